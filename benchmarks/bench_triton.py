"""Triton against CUDA C++ on the cpu backend, side by side: the same level-1 tasks, cold and warm.

For every level-1 built-in task that has a reference Triton solution, its Triton solution (run in
Triton's interpreter, every access checked) and its CUDA C++ reference solution (NVRTC, then the
CUDA-on-CPU runtime) are judged through a sandboxed `Evaluator` each (one worker, ``cpu`` sizes),
timed end to end on the host:

- **cold**: the first evaluation of the response, with an empty compile cache (a fresh
  ``LEAP_GYM_CACHE``): CUDA C++ pays NVRTC and the host C++ build, Triton its first decoration and
  AST rewrite;
- **warm**: the median of two more evaluations of the same response in the same worker.

Each pool is started (and torch, triton imported in it) by one evaluation of level1/relu before the
table, reported on its own line. Prints per-task times and the Triton / CUDA C++ ratios, then the
totals. Also checks every Triton reference solution is CORRECT (exit status 1 when one is not).

    python benchmarks/bench_triton.py [--tasks level1/relu level1/softmax ...]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

os.environ["LEAP_GYM_CACHE"] = tempfile.mkdtemp(prefix="leap_bench_triton_")  # cold compiles, passed to workers

import leap_gym  # noqa: E402
from leap_gym.evaluation.evaluator import Evaluator  # noqa: E402
from leap_gym.result import CORRECT  # noqa: E402

WARM_RUNS = 2


def timed(evaluator: Evaluator, task: leap_gym.Task, response: str) -> tuple[float, str]:
    start = time.perf_counter()
    result = evaluator.evaluate(task, response)
    return time.perf_counter() - start, result.status


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="*", default=None, help="task ids (default: every level-1 task with a "
                                                                  "Triton solution)")
    args = parser.parse_args()
    every = {t.id: t.with_size("cpu") for t in leap_gym.load_tasks("builtin")}
    ids = args.tasks or [t.id for t in every.values() if t.level == 1 and t.triton_solutions]
    tasks = [every[i] for i in ids if i != "level1/relu"]
    responses = {"triton": {t.id: t.triton_solutions[0] for t in [every["level1/relu"], *tasks]},
                 "cuda": {t.id: t.reference_solutions[0] for t in [every["level1/relu"], *tasks]}}
    times: dict[str, dict[str, tuple[float, float]]] = {"triton": {}, "cuda": {}}
    statuses: dict[str, dict[str, str]] = {"triton": {}, "cuda": {}}
    start_up: dict[str, float] = {}
    for language in ("cuda", "triton"):
        with Evaluator(backend="cpu", workers=1, timeout_s=120) as evaluator:
            start_up[language], _ = timed(evaluator, every["level1/relu"], responses[language]["level1/relu"])
            for task in tasks:
                cold, status = timed(evaluator, task, responses[language][task.id])
                warm = statistics.median(timed(evaluator, task, responses[language][task.id])[0]
                                         for _ in range(WARM_RUNS))
                times[language][task.id] = (cold, warm)
                statuses[language][task.id] = status
    print(f"pool start + first evaluation (level1/relu): CUDA C++ {start_up['cuda']:.2f} s, "
          f"Triton {start_up['triton']:.2f} s, ratio {start_up['triton'] / start_up['cuda']:.2f}")
    print(f"{'task':24s} {'cuda cold':>9s} {'triton cold':>11s} {'ratio':>6s} {'cuda warm':>9s} {'triton warm':>11s} "
          f"{'ratio':>6s}  statuses (cuda/triton)")
    for task in tasks:
        (cc, cw), (tc, tw) = times["cuda"][task.id], times["triton"][task.id]
        print(f"{task.id:24s} {cc:9.2f} {tc:11.2f} {tc / cc:6.2f} {cw:9.2f} {tw:11.2f} {tw / cw:6.2f}  "
              f"{statuses['cuda'][task.id]}/{statuses['triton'][task.id]}")
    total = {lang: [sum(times[lang][t.id][k] for t in tasks) for k in (0, 1)] for lang in times}
    print(f"{'total (' + str(len(tasks)) + ' tasks)':24s} {total['cuda'][0]:9.2f} {total['triton'][0]:11.2f} "
          f"{total['triton'][0] / total['cuda'][0]:6.2f} {total['cuda'][1]:9.2f} {total['triton'][1]:11.2f} "
          f"{total['triton'][1] / total['cuda'][1]:6.2f}")
    bad = [t.id for t in tasks if statuses["triton"][t.id] != CORRECT]
    not_correct = f" (not: {', '.join(bad)})" if bad else ""
    print(f"Triton solutions CORRECT: {len(tasks) - len(bad)}/{len(tasks)}{not_correct}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
