"""DCP on vs off: turns, tokens and evaluations per training step, side by side.

A simulated policy with known per-task pass rates answers through the real environment
(`compile-only` backend: a task's reference solution compiles, which counts as solved there; a
failure is a kernel that does not compile or, for hopeless tasks, a response with no code block).
A trajectory's chance to solve at turn t is ``1 - (1 - p) * (1 - gain)^(t-1)`` (refinement helps),
except that hopeless tasks (p = 0) never solve. Both arms see the same tasks and the same random
draws; only DCP differs. Tokens are the responses' lengths in characters / 4. On compile-only the
status ladder tops out at COMPILED, so the engine lowers DCP's progress rank to 1: a well-formed
kernel that does not compile yet counts as progress; only groups that never write code are pruned
as hopeless at once.

    python benchmarks/bench_dcp.py [--steps 6 --tasks-per-step 8 --group-size 8 --max-turns 4]
"""

from __future__ import annotations

import argparse
import logging
import random
import time
from collections.abc import Sequence
from typing import Any

import leap_gym
from leap_agents import DCPConfig
from leap_agents.algorithms.rewards import group_advantages
from leap_agents.policies.base import Generation
from leap_agents.training.rollout import RolloutConfig, RolloutEngine
from leap_agents.training.trajectory import assign_rewards

BROKEN = '```cuda\nextern "C" __global__ void k(float* y) { y[0] = undefined_symbol; }\n```'
NO_CODE = "I am not sure how to write this kernel."

# (task, pass rate at turn 1): easy, medium, hard, hopeless
PASS_RATES = {
    "level1/relu": 0.9, "level1/add": 0.85, "level1/sigmoid": 0.75, "level1/tanh": 0.6,
    "level1/elu": 0.35, "level1/softplus": 0.25, "level1/clamp": 0.15, "level1/leaky_relu": 0.1,
    "level1/gelu_tanh": 0.05, "level1/silu": 0.0, "level1/hardtanh": 0.0, "level1/mul": 0.0,
}


class SimulatedPolicy:
    """Solves task `t` at turn k with probability ``1 - (1 - p_t)(1 - gain)^(k-1)``; deterministic per draw."""

    def __init__(self, tasks: Sequence[Any], pass_rates: dict[str, float], gain: float = 0.25, seed: int = 0):
        self.refs = {t.id: t.reference_solutions[0] for t in tasks}
        self.pass_rates = pass_rates
        self.gain = gain
        self.seed = seed
        self.step = 0

    def generate(self, histories: Sequence[list[dict[str, str]]], meta: Sequence[dict[str, Any]] | None = None,
                 **sampling: Any) -> list[Generation]:
        out = []
        for info in meta or []:
            p = self.pass_rates[info["task_id"]]
            k = info["turn"]
            p_k = 0.0 if p == 0 else 1 - (1 - p) * (1 - self.gain) ** (k - 1)
            key = f"{self.seed}/{self.step}/{info['task_id']}/{info['group']}/{info['index']}/{k}"
            draw = random.Random(key).random()
            text = self.refs[info["task_id"]] if draw < p_k else (BROKEN if p > 0 else NO_CODE)
            out.append(Generation(text=text, token_ids=list(range(max(1, len(text) // 4))), off_policy=True))
        return out


def run_arm(dcp_on: bool, args: argparse.Namespace, tasks: list[Any]) -> list[dict[str, float]]:
    policy = SimulatedPolicy(tasks, PASS_RATES, gain=args.gain, seed=args.seed)
    engine = RolloutEngine(policy, tasks, backend="compile-only",
                           config=RolloutConfig(group_size=args.group_size, max_turns=args.max_turns,
                                                eval_workers=args.workers, progress_bar=False),
                           dcp=DCPConfig(enabled=dcp_on, easy_threshold=args.easy_threshold, min_history=2))
    ids = [t.id for t in tasks]
    rng = random.Random(args.seed)
    rows = []
    for step in range(args.steps):
        policy.step = step
        batch_ids = rng.sample(ids, args.tasks_per_step)
        start = time.perf_counter()
        batch = engine.run(batch_ids, seed=step)
        wall = time.perf_counter() - start
        assign_rewards(batch.groups, "leap")
        signal = sum(any(a != 0 for a in group_advantages([t.reward for t in g])) for g in batch.groups)
        rows.append({"turns": batch.responses, "tokens": batch.tokens, "evals": batch.evaluations,
                     "solve": sum(t.solved for t in batch.trajectories) / len(batch.trajectories),
                     "signal_groups": signal, "wall": wall,
                     "adv_samples": sum(1 for t in batch.trajectories for turn in t.turns if turn.advantage != 0)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--tasks-per-step", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--max-turns", type=int, default=4)
    parser.add_argument("--easy-threshold", type=float, default=0.5)
    parser.add_argument("--gain", type=float, default=0.25, help="per-turn refinement gain of the simulated policy")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    by_id = {t.id: t for t in leap_gym.load_tasks("builtin")}
    tasks = [by_id[i] for i in PASS_RATES]
    for t in tasks:  # warm the worker pool and the compile cache so neither arm pays for them
        for text in (t.reference_solutions[0], BROKEN):
            leap_gym.evaluate(t, text, backend="compile-only", workers=args.workers)
    off = run_arm(False, args, tasks)
    on = run_arm(True, args, tasks)
    print(f"{len(tasks)} tasks (turn-1 pass rates {sorted(set(PASS_RATES.values()))}), {args.tasks_per_step} per step, "
          f"G={args.group_size}, max_turns={args.max_turns}, easy_threshold={args.easy_threshold}, "
          "backend compile-only")
    print(f"{'step':>4s} | {'turns off':>9s} {'on':>5s} | {'tokens off':>10s} {'on':>6s} | "
          f"{'evals off':>9s} {'on':>5s} | "
          f"{'solve off':>9s} {'on':>5s} | {'signal grp off':>14s} {'on':>3s}")
    for i, (a, b) in enumerate(zip(off, on), 1):
        print(f"{i:4d} | {a['turns']:9d} {b['turns']:5d} | {a['tokens']:10d} {b['tokens']:6d} | "
              f"{a['evals']:9d} {b['evals']:5d} | "
              f"{a['solve']:9.3f} {b['solve']:5.3f} | {a['signal_groups']:14d} {b['signal_groups']:3d}")
    keys = ("turns", "tokens", "evals", "signal_groups", "wall")
    tot = {k: (sum(r[k] for r in off), sum(r[k] for r in on)) for k in keys}
    n = len(off)
    print(f"mean | {tot['turns'][0] / n:9.1f} {tot['turns'][1] / n:5.1f} | "
          f"{tot['tokens'][0] / n:10.0f} {tot['tokens'][1] / n:6.0f} | "
          f"{tot['evals'][0] / n:9.1f} {tot['evals'][1] / n:5.1f} | "
          f"{sum(r['solve'] for r in off) / n:9.3f} {sum(r['solve'] for r in on) / n:5.3f} | "
          f"{tot['signal_groups'][0] / n:14.1f} {tot['signal_groups'][1] / n:3.1f}")
    print(f"ratio off/on: turns {tot['turns'][0] / tot['turns'][1]:.2f}x, "
          f"tokens {tot['tokens'][0] / tot['tokens'][1]:.2f}x, evaluations {tot['evals'][0] / tot['evals'][1]:.2f}x, "
          f"rollout wall-clock {tot['wall'][0] / tot['wall'][1]:.2f}x; "
          f"groups with a learning signal: {tot['signal_groups'][1]} on vs {tot['signal_groups'][0]} off")


if __name__ == "__main__":
    main()
