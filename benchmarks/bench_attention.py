"""SmolLM2's judging, both turns, with transformers' ``sdpa`` attention and with ``leap_grouped_sdpa``.

With a padding mask on a CPU, ``sdpa`` copies SmolLM2's keys and values once per query head that shares them (3
each) in every layer at every decoding step; `leap_agents.policies.attention` reads the cache as it is, and
`HFPolicy` switches a CPU model to it. A refinement turn's histories are long (the task, the last kernel, the
environment's feedback), so that is where the copies cost most. This runs the SmolLM2 race's judging (the race's
policy as `build_policy` makes it: the LoRA warm-up, the merged copy; the 19 training tasks, `--samples` each, full
refinement over the preset's 2 turns, temperature 0.8, up to 256 tokens, the same seed) in two child processes, one
per attention, and prints generation seconds, tokens per second, kernel (``sys``) CPU time and the ratio, and how
many responses came out the same (float rounding may move a rare sample):

    python benchmarks/bench_attention.py --samples 2     # 38 trajectories, a few minutes
    python benchmarks/bench_attention.py                 # 114, as the race judges
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys


def child(attention: str, samples: int, threads: int) -> dict:
    import torch

    from leap_agents.policies import hf
    from leap_agents.training.config import DCPConfig, load_config
    from leap_agents.training.rollout import RolloutConfig, RolloutEngine
    from leap_agents.training.trainer import build_policy, select_tasks

    if attention == "sdpa":
        hf.use_grouped_sdpa = lambda model: False  # keep transformers' sdpa
    torch.set_num_threads(threads)
    config = load_config(preset="smollm2", overrides=[("split", "train"), ("task_ids", "")])
    policy = build_policy(config)
    assert policy.model.config._attn_implementation == ("sdpa" if attention == "sdpa" else "leap_grouped_sdpa")
    tasks, r = select_tasks(config), config.rollout
    rollout = RolloutConfig(group_size=samples, max_turns=r.max_turns, temperature=r.temperature,
                            max_new_tokens=r.max_new_tokens, eval_workers=r.eval_workers, progress_bar=False)
    engine = RolloutEngine(policy, tasks, backend=config.backend, config=rollout, dcp=DCPConfig(enabled=False))
    before = resource.getrusage(resource.RUSAGE_SELF)
    batch = engine.run([t.id for t in tasks], seed=54321, desc="judge")
    after = resource.getrusage(resource.RUSAGE_SELF)
    responses = [turn.response for t in batch.trajectories for turn in t.turns]
    return {"attention": attention, "trajectories": len(batch.trajectories), "responses": responses,
            "tokens": batch.tokens, "generation_s": batch.generation_s, "evaluation_s": batch.evaluation_s,
            "sys_s": after.ru_stime - before.ru_stime,
            "pass_at_1": sum(t.first_solved_turn == 1 for t in batch.trajectories) / len(batch.trajectories)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samples", type=int, default=6, help="trajectories per training task (the race judges 6)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--child", choices=("sdpa", "grouped"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.samples, args.threads)))
        return
    results = {}
    for attention in ("sdpa", "grouped"):
        out = subprocess.run([sys.executable, __file__, "--child", attention, "--samples", str(args.samples),
                              "--threads", str(args.threads)], check=True, capture_output=True, text=True).stdout
        results[attention] = r = json.loads(out.strip().splitlines()[-1])
        print(f"  {attention:8s} {r['trajectories']} trajectories, {len(r['responses'])} responses, {r['tokens']} tokens: "
              f"generation {r['generation_s']:6.1f} s ({r['tokens'] / r['generation_s']:6.1f} tokens/s), evaluation "
              f"{r['evaluation_s']:5.1f} s, sys {r['sys_s']:5.1f} s, pass@1 {r['pass_at_1']:.3f}", flush=True)
    a, b = results["sdpa"], results["grouped"]
    same = sum(x == y for x, y in zip(a["responses"], b["responses"]))
    print(f"judging generation, leap_grouped_sdpa / sdpa: "
          f"{(b['tokens'] / b['generation_s']) / (a['tokens'] / a['generation_s']):.2f}x tokens/s, "
          f"{a['generation_s'] / b['generation_s']:.2f}x less time; the same responses: {same} of "
          f"{max(len(a['responses']), len(b['responses']))}")


if __name__ == "__main__":
    main()
