"""The SmolLM2 race's judging, sampled 32 histories per call against every open trajectory in one call.

`leap_vs_baselines.py --preset smollm2` judges the start policy and each arm's trained policy on the 19 training
tasks (`--eval-samples 6`: 114 trajectories) and the 6 held-out tasks (`--held-out-samples 17`: 102), and the
judging was most of the race's wall-clock. This samples the judging's first turn (the race's policy as
`build_policy` makes it: SmolLM2, its LoRA warm-up, the merged copy for sampling; temperature 0.8, up to 256
tokens, the block stop rule) with `HFPolicy.generate` at two batch sizes, the same seed, alternating rounds:

- 32 per call: the preset's `model.gen_batch_size` before this benchmark;
- one call: every open trajectory at once (the preset's `gen_batch_size: 128`).

A call decodes until its longest response ends and the batch shrinks as sequences finish, so fewer, wider calls
keep the two cores busy on more rows per step. Prints each round's seconds and tokens per second and the ratio:

    python benchmarks/bench_judging.py                        # training tasks, 6 samples each, 2 rounds
    python benchmarks/bench_judging.py --split held_out --samples 17
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from leap_agents.training.config import load_config
from leap_agents.training.trainer import LeapTrainer, build_policy, select_tasks


def measure(policy, histories: list, batch_size: int, seed: int) -> dict:
    policy.batch_size = batch_size
    start = time.perf_counter()
    gens = policy.generate(histories, temperature=0.8, max_new_tokens=256, seed=seed)
    seconds = time.perf_counter() - start
    tokens = sum(len(g.token_ids) for g in gens)
    return {"seconds": seconds, "tokens": tokens, "tokens_per_s": tokens / seconds}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--split", choices=("train", "held_out"), default="train")
    p.add_argument("--samples", type=int, default=6, help="trajectories judged per task")
    p.add_argument("--chunk", type=int, default=32, help="histories per call of the chunked path")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    config = load_config(preset="smollm2", overrides=[("split", "train"), ("task_ids", "")])
    policy = build_policy(config)
    tasks = select_tasks(config, args.split)
    engine = LeapTrainer(config, policy=policy, tasks=tasks).engine
    histories = [h for h in engine.first_histories([t.id for t in tasks]) for _ in range(args.samples)]
    paths = {f"{args.chunk} per call": args.chunk, "one call": len(histories)}
    print(f"{args.split}: {len(tasks)} tasks x {args.samples} samples = {len(histories)} first-turn histories, "
          f"{args.threads} threads", flush=True)
    results: dict[str, list[dict]] = {name: [] for name in paths}
    for r in range(args.rounds):
        for name in (paths if r % 2 == 0 else reversed(paths)):
            m = measure(policy, histories, paths[name], seed=r)
            results[name].append(m)
            print(f"  round {r}  {name:12s} {m['seconds']:7.1f} s {m['tokens']:6d} tokens "
                  f"{m['tokens_per_s']:6.1f} tokens/s", flush=True)
    chunked, whole = (statistics.mean(m["tokens_per_s"] for m in results[name]) for name in paths)
    seconds = [statistics.mean(m["seconds"] for m in results[name]) for name in paths]
    print(f"mean over {args.rounds} rounds: {seconds[0]:.1f} s vs {seconds[1]:.1f} s; tokens/s {chunked:.1f} vs "
          f"{whole:.1f}: one call {whole / chunked:.2f}x")


if __name__ == "__main__":
    main()
