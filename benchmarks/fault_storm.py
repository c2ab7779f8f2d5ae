"""Fault storm: submit many faulty responses through `KernelDebugEnv-v0` in one run (issue 5, "Must show" 2).

Crashes (null-pointer write, __trap, out-of-bounds, division by zero, stack overflow), hangs (infinite
loop, deadlock), resource abuse (huge allocation, output flood) and escapes (fork, file writes outside
the working directory, network, subprocess) go through ``env.step`` on two threads sharing a pool of
two sandboxed workers, 5 s timeout. The run must end with zero uncaught exceptions, zero hung calls,
every step answered with a status, no sentinel file written outside the sandbox, and the
environment still CORRECT on an honest response. It prints the count, the wall-clock, the time per
response and the per-status and per-kind counts. Exit status 0 when every condition holds.

Usage: ``python benchmarks/fault_storm.py [--count 1000] [--workers 2] [--timeout 5]``
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "envs_tests"))

import gymnasium as gym  # noqa: E402
from fault_responses import HONEST, SENTINELS, fault_stream  # noqa: E402

import leap_gym  # noqa: E402,F401  (registers the environment)
from leap_gym.result import CORRECT, STATUSES  # noqa: E402


def storm(count: int, workers: int, timeout_s: float, log_every: int = 100) -> dict:
    """Run `count` faulty responses on `workers` threads; return the tallies."""
    for path in SENTINELS:
        if os.path.exists(path):
            os.remove(path)
    cwd_before = set(os.listdir("."))
    jobs = list(fault_stream(count))
    lock = threading.Lock()
    next_index = [0]
    statuses: collections.Counter = collections.Counter()
    by_kind: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    problems: list[str] = []
    slowest = [0.0]
    limit = timeout_s * 3 + 30  # a call longer than this counts as hung (worker start + kill + replace)

    def work() -> None:
        env = gym.make("KernelDebugEnv-v0", tasks=["level1/relu"], backend="cpu", max_turns=10**9, timeout_s=timeout_s,
                       workers=workers, locate_faults=False)
        env.reset(seed=0, options={"task_id": "level1/relu"})
        while True:
            with lock:
                index = next_index[0]
                next_index[0] += 1
            if index >= len(jobs):
                return
            kind, response = jobs[index]
            start = time.perf_counter()
            try:
                _, _, terminated, truncated, info = env.step(response)
                status = info["result"].status
            except Exception as exc:  # an uncaught exception: the run fails
                status = "EXCEPTION"
                with lock:
                    problems.append(f"#{index} {kind}: {type(exc).__name__}: {exc}")
                env.reset(seed=0, options={"task_id": "level1/relu"})
            took = time.perf_counter() - start
            with lock:
                statuses[status] += 1
                by_kind[kind][status] += 1
                slowest[0] = max(slowest[0], took)
                if took > limit:
                    problems.append(f"#{index} {kind}: took {took:.1f} s (hung)")
                if status not in STATUSES:
                    problems.append(f"#{index} {kind}: no status ({status})")
                if status == CORRECT:
                    problems.append(f"#{index} {kind}: a faulty response was judged CORRECT")
                done = sum(statuses.values())
                if log_every and done % log_every == 0:
                    print(f"  {done}/{count} answered", flush=True)
            if terminated or truncated:
                env.reset(seed=0, options={"task_id": "level1/relu"})

    start = time.perf_counter()
    threads = [threading.Thread(target=work, daemon=True) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    written = [p for p in SENTINELS if os.path.exists(p)]
    new_here = sorted(set(os.listdir(".")) - cwd_before)
    env = gym.make("KernelDebugEnv-v0", tasks=["level1/relu"], backend="cpu", max_turns=2, timeout_s=timeout_s,
                   workers=workers, locate_faults=False)
    env.reset(seed=0, options={"task_id": "level1/relu"})
    _, _, _, _, info = env.step(HONEST)
    return dict(count=sum(statuses.values()), wall_s=wall, statuses=dict(statuses), by_kind=by_kind,
                problems=problems, slowest_s=slowest[0], files_written=written, new_files_here=new_here,
                honest_after=info["result"].status)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=5.0)
    args = parser.parse_args()
    report = storm(args.count, args.workers, args.timeout)
    print(f"faulty responses answered: {report['count']} of {args.count} in {report['wall_s']:.1f} s "
          f"({report['wall_s'] / max(report['count'], 1):.2f} s per response, "
          f"slowest call {report['slowest_s']:.1f} s)")
    print("per status: " + ", ".join(f"{k}={v}" for k, v in sorted(report["statuses"].items())))
    for kind, counts in sorted(report["by_kind"].items()):
        print(f"  {kind:16s} " + ", ".join(f"{k}={v}" for k, v in sorted(counts.items())))
    print(f"uncaught exceptions / hung / unanswered: {len(report['problems'])}")
    for problem in report["problems"][:20]:
        print("  " + problem)
    print(f"files written outside the sandbox: {report['files_written'] or 'none'}; new files in cwd: "
          f"{report['new_files_here'] or 'none'}")
    print(f"honest response afterwards: {report['honest_after']}")
    ok = (not report["problems"] and report["count"] == args.count and not report["files_written"]
          and not report["new_files_here"] and report["honest_after"] == CORRECT)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
