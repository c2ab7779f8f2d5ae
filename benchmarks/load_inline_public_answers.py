"""Judge public KernelBench answers on the ``cpu`` backend: answers a GPU build judged correct.

KernelBench's leaderboard (github.com/anneouyang/KernelBenchLeaderboard, ``docs/assets``) publishes the
``load_inline`` answers of several models with their GPU speedups, so a GPU build judged each one
correct at KernelBench's sizes. This script judges each on ``cpu`` against the problem files they were
written for (KernelBench's first release, commit bb27f27, ``KernelBench/levelN``) at shrunk sizes, and
prints every verdict that is not CORRECT and the counts. Nothing of either repository is copied::

    python benchmarks/load_inline_public_answers.py LEADERBOARD_ASSETS KERNELBENCH_LEVEL_DIR [--level 1]
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("assets", type=Path, help="the leaderboard's docs/assets folder (data.json, solutions/)")
    parser.add_argument("problems", type=Path, help="KernelBench's level folder the answers were written for")
    parser.add_argument("--level", type=int, default=1)
    parser.add_argument("--max-numel", type=int, default=2 ** 16)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    import leap_gym

    tasks = {Path(t.path).name: t for t in leap_gym.load_tasks(args.problems, max_numel=args.max_numel)}
    entries = json.loads((args.assets / "data.json").read_text())
    counts: collections.Counter[str] = collections.Counter()
    start = time.perf_counter()
    for key, answers in entries.items():
        if not key.startswith(f"Level {args.level}:"):
            continue
        task = tasks.get(key.split(": ", 1)[1] + ".py")
        for answer in answers:
            if task is None:
                counts["no problem file"] += 1
                continue
            source = (args.assets / "solutions" / f"{answer['file']}.py").read_text()
            result = leap_gym.evaluate(task, f"```python\n{source}\n```", backend="cpu", timeout_s=120)
            label = result.status if result.status == "CORRECT" else f"{result.status} ({result.detail})"
            counts[label] += 1
            if result.status != "CORRECT":
                print(f"{task.id:48s} {answer['file'][:8]} {label:34s} {(result.message or '').splitlines()[0][:110]}",
                      flush=True)
    total = sum(v for k, v in counts.items() if k != "no problem file")
    print(f"\n{total} answers judged in {time.perf_counter() - start:.0f} s:")
    for label, count in counts.most_common():
        print(f"  {count:4d}  {label}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
