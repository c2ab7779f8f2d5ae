"""Reward-hacking defences, whole run: every adversarial response caught, every honest solution CORRECT.

Evaluates the adversarial corpus (``envs_tests/adversarial``, expectations in ``cases.tsv``; the
``triton_*`` cases are Triton attacks) and every reference solution of every built-in task (CUDA
C++ and Triton, plus the corpus' own tasks) through a sandboxed
`Evaluator` on the cpu backend, and prints per-case results and the counts side by side. The test
suite runs the corpus and a sample of the honest solutions (``envs_tests/test_hostile.py``).

Usage: ``python benchmarks/hostile_corpus.py [--workers 2]``; exit status 0 when all hold.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "envs_tests"))

from test_hostile import CASES, CORPUS  # noqa: E402

import leap_gym  # noqa: E402
from leap_gym.evaluation.evaluator import Evaluator  # noqa: E402
from leap_gym.result import CORRECT  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    suite = leap_gym.load_tasks("builtin") + leap_gym.load_tasks(CORPUS / "tasks")
    tasks = {t.id: t.with_size("cpu") for t in suite}
    start = time.perf_counter()
    with Evaluator(backend="cpu", workers=args.workers, timeout_s=60) as normal, \
            Evaluator(backend="cpu", workers=1, timeout_s=60, strict=True) as strict:
        attacks = {c["name"]: (strict if "strict" in c["options"] else normal).submit(
            tasks[c["task"]], (CORPUS / f"{c['name']}.md").read_text()) for c in CASES}
        honest = {(t.id, i): normal.submit(t, sol) for t in tasks.values() for i, sol in enumerate(t.reference_solutions)}
        honest |= {(t.id, f"triton{i}"): normal.submit(t, sol) for t in tasks.values()
                   for i, sol in enumerate(t.triton_solutions)}
        caught = 0
        for case in CASES:
            r = attacks[case["name"]].result()
            good = (r.status, r.detail) == (case["status"], case["detail"])
            caught += good
            print(f"{'caught' if good else 'MISSED':6s} {case['klass']:9s} {case['name']:28s} {r.status} {r.detail}")
        correct = 0
        for (task_id, i), future in honest.items():
            r = future.result()
            correct += r.status == CORRECT
            if r.status != CORRECT:
                print(f"HONEST NOT CORRECT {task_id}#{i}: {r.status} {r.detail} {r.message[:200]}")
    wall = time.perf_counter() - start
    print(f"adversarial responses caught with the right detail: {caught}/{len(CASES)} "
          f"({len({c['klass'] for c in CASES})} classes)")
    print(f"honest reference solutions CORRECT: {correct}/{len(honest)} on {len(tasks)} tasks; wall-clock {wall:.0f} s")
    return 0 if caught == len(CASES) and correct == len(honest) else 1


if __name__ == "__main__":
    sys.exit(main())
