"""KernelBench as it is: per level, files loaded and skipped (with reasons), the reference's time at
the shrunk sizes, and, given a folder of answers, each answer's status on the ``cpu`` backend.

    python benchmarks/kernelbench_report.py KERNELBENCH_DIR [--answers DIR] [--levels 1 2 3 4]
        [--max-numel 1=65536 2=65536 3=1048576 4=1048576] [--online]

KERNELBENCH_DIR is KernelBench's ``KernelBench`` folder (``level1/`` ... ``level4/``); nothing of it
is copied. Answers are files named like KernelBench's generations, ``level_<L>_problem_<P>...`` or
``level<L>_<P>...`` (``.py``: the answer's Python; ``.md``/``.txt``: a whole response). Level 4 builds
Hugging Face models from the hub; without ``--online`` the hub is not contacted (``HF_HUB_OFFLINE=1``),
so those files are skipped at once with the reason instead of after minutes of retries.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

DEFAULT_MAX_NUMEL = {1: 2**16, 2: 2**16, 3: 2**20, 4: 2**20}


def _reference_seconds(task) -> float:
    import torch

    from leap_gym.tasks import instantiate

    _, model, inputs, _ = instantiate(task, seed=0)
    start = time.perf_counter()
    with torch.no_grad():
        model(*inputs)
    return time.perf_counter() - start


def _answers(folder: Path, level: int) -> dict[int, Path]:
    found = {}
    for path in sorted(folder.iterdir()):
        match = re.match(r"level_?(\d+)_(?:problem_)?(\d+)", path.name)
        if match and int(match.group(1)) == level and path.suffix in (".py", ".md", ".txt"):
            found.setdefault(int(match.group(2)), path)
    return found


def _response(path: Path) -> str:
    text = path.read_text(errors="replace")
    return f"```python\n{text}\n```" if path.suffix == ".py" else text


def report_level(folder: Path, level: int, max_numel: int, answers: Path | None, timeout_s: float) -> None:
    from leap_gym.tasks import load_tasks

    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tasks = load_tasks(folder, max_numel=max_numel)
    load_s = time.perf_counter() - start
    total = len(tasks) + len(tasks.skipped)
    print(f"\n== level {level} ({folder}), max_numel={max_numel}: {total} files, loaded {len(tasks)}, "
          f"skipped {len(tasks.skipped)} (load and shrink: {load_s:.1f} s)")
    for item in tasks.skipped:
        print(f"   skipped {item}")
    seconds: dict[str, float] = {}
    failed: dict[str, str] = {}
    for task in tasks:
        try:
            seconds[task.id] = _reference_seconds(task)
        except Exception as exc:  # a reference that fails at the shrunk sizes
            failed[task.id] = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
    if seconds:
        values = sorted(seconds.values())
        slowest = sorted(seconds, key=seconds.get, reverse=True)[:3]
        print(f"   reference at the shrunk sizes (one forward, CPU, 1 thread): {len(values)} ran, total "
              f"{sum(values):.2f} s, median {statistics.median(values):.4f} s, max {values[-1]:.2f} s")
        print("   slowest: " + ", ".join(f"{t} {seconds[t]:.2f} s" for t in slowest))
    for task_id, reason in failed.items():
        print(f"   reference FAILED at the shrunk sizes: {task_id}: {reason}")
    if answers is None:
        return
    import leap_gym

    by_number = {}
    for task in tasks:
        number = re.match(r"(\d+)", Path(task.path).name)
        if number:
            by_number[int(number.group(1))] = task
    statuses: dict[str, int] = {}
    for problem, path in _answers(answers, level).items():
        task = by_number.get(problem)
        if task is None:
            print(f"   answer {path.name}: problem {problem} not loaded")
            continue
        result = leap_gym.evaluate(task, _response(path), backend="cpu", timeout_s=timeout_s)
        statuses[result.status] = statuses.get(result.status, 0) + 1
        print(f"   answer {path.name} -> {task.id}: {result.status} ({result.answer_format}) "
              f"{result.message.splitlines()[0][:160]}")
    if statuses:
        print("   statuses: " + ", ".join(f"{k} {v}" for k, v in sorted(statuses.items())))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kernelbench_dir", type=Path, help="KernelBench's KernelBench folder (holding level1/...)")
    parser.add_argument("--answers", type=Path, default=None, help="a folder of answers to judge on the cpu backend")
    parser.add_argument("--levels", type=int, nargs="*", default=[1, 2, 3, 4])
    parser.add_argument("--max-numel", nargs="*", default=[], help="LEVEL=N pairs (default 1,2: 2**16; 3,4: 2**20)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per answer evaluation")
    parser.add_argument("--online", action="store_true", help="let level 4 contact the Hugging Face hub")
    args = parser.parse_args(argv)
    if not args.online:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    torch.set_num_threads(1)
    limits = dict(DEFAULT_MAX_NUMEL)
    for pair in args.max_numel:
        level, _, value = pair.partition("=")
        limits[int(level)] = int(eval(value, {"__builtins__": {}}))  # accepts 2**16
    for level in args.levels:
        folder = args.kernelbench_dir / f"level{level}"
        if not folder.is_dir():
            print(f"\n== level {level}: no folder {folder}")
            continue
        report_level(folder, level, limits.get(level, 2**20), args.answers, args.timeout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
