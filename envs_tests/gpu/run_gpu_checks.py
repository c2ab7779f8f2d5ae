"""Run the GPU checks of the `cuda` backend and write a log and a JSON report to a folder.

Usage (from anywhere; the repository root is found from this file's path)::

    python envs_tests/gpu/run_gpu_checks.py OUTDIR [--timing-budget 0.25] [--timeout 540] [-k EXPR]

Runs ``pytest envs_tests/gpu -m gpu`` in a subprocess (its output streamed to the console and to
``OUTDIR/gpu_log.txt``), then writes ``OUTDIR/gpu_results.json``: the device, versions, pytest's
counts and failures, every reference solution's status, times and speedup, the timing
repeatability figures, and a summary; the speedup table is appended to the log. The exit status
is pytest's (0 when everything passed), or 3 when the `cuda` backend is unavailable (every test is
then skipped, with the reason in the log).

Meant to finish in under 5 minutes on one H100 or H200.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def device_info() -> dict[str, Any]:
    """What machine this ran on (never raises)."""
    info: dict[str, Any] = {"python": platform.python_version(), "host": platform.node()}
    try:
        import torch

        info["torch"] = torch.__version__
        info["torch_cuda"] = torch.version.cuda
        if torch.cuda.is_available():
            info["device"] = torch.cuda.get_device_name()
            info["capability"] = "sm_%d%d" % torch.cuda.get_device_capability()
            info["memory_gib"] = round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
    except Exception as exc:  # torch missing or broken: the report says so
        info["torch_error"] = str(exc)
    try:
        sys.path.insert(0, str(REPO))
        from leap_gym.backends.base import get_backend
        from leap_gym.backends.cuda import device_peak_bandwidth_gbps
        from leap_gym.backends.nvrtc import nvrtc_version

        backend = get_backend("cuda")
        available = backend.availability()
        info["cuda_backend_available"] = available.ok
        info["cuda_backend_reason"] = available.reason
        info["nvrtc"] = nvrtc_version()
        if available.ok:
            info["arch"] = backend.default_arch()
            info["peak_bandwidth_gbps"] = device_peak_bandwidth_gbps()
            from cuda.bindings import driver

            _, version = driver.cuDriverGetVersion()
            info["driver_cuda_version"] = f"{int(version) // 1000}.{int(version) % 1000 // 10}"
    except Exception as exc:
        info["leap_gym_error"] = f"{type(exc).__name__}: {exc}"
    return info


def run_pytest(outdir: Path, args: argparse.Namespace, log: Any) -> tuple[int, float]:
    """Run the GPU tests, streaming their output to the console and `log`; return (exit code, seconds)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    env["LEAP_GPU_RESULTS"] = str(outdir / "records.jsonl")
    env["LEAP_GPU_TIMING_BUDGET"] = str(args.timing_budget)
    cache = None
    if not env.get("LEAP_GYM_CACHE"):
        cache = Path(tempfile.mkdtemp(prefix="leap_gym_cache_"))
        cache.chmod(0o755)  # sandbox workers may run under their own uid: they must read the NVRTC cache
        env["LEAP_GYM_CACHE"] = str(cache)
    cmd = [sys.executable, "-m", "pytest", str(REPO / "envs_tests" / "gpu"), "-m", "gpu", "-v", "-rA",
           "-p", "no:cacheprovider", f"--junitxml={outdir / 'junit.xml'}"]
    if args.k:
        cmd += ["-k", args.k]
    log.write(f"$ {' '.join(cmd)}\n")
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            bufsize=1, start_new_session=True)
    assert proc.stdout is not None
    timed_out = threading.Event()

    def kill() -> None:
        timed_out.set()
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    watchdog = threading.Timer(args.timeout, kill)
    watchdog.start()
    try:
        for line in proc.stdout:
            sys.stdout.write(line)
            log.write(line)
    finally:
        watchdog.cancel()
    if timed_out.is_set():
        log.write(f"\n!!! pytest killed after {args.timeout} s\n")
    code = proc.wait()
    if cache is not None:
        shutil.rmtree(cache, ignore_errors=True)
    return (124 if timed_out.is_set() else code), time.perf_counter() - start


def junit_summary(path: Path) -> dict[str, Any]:
    """Counts and failures from pytest's JUnit XML."""
    if not path.exists():
        return {"error": "no junit.xml (pytest did not finish)"}
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root)
    summary: dict[str, Any] = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0, "failed_tests": []}
    for suite in suites:
        for key in ("tests", "failures", "errors", "skipped"):
            summary[key] += int(suite.get(key, 0))
        for case in suite.iter("testcase"):
            for kind in ("failure", "error"):
                node = case.find(kind)
                if node is not None:
                    summary["failed_tests"].append({"test": f"{case.get('classname')}::{case.get('name')}",
                                                    "kind": kind, "message": (node.get("message") or "")[:500]})
    summary["passed"] = summary["tests"] - summary["failures"] - summary["errors"] - summary["skipped"]
    return summary


def read_records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def speedup_table(references: list[dict[str, Any]]) -> str:
    header = (f"{'task':<34} {'#':>2} {'status':<14} {'kernel ms':>10} {'± ms':>8} {'torch ms':>10} {'± ms':>8} "
              f"{'speedup':>8}")
    lines = [header, "-" * len(header)]
    for r in sorted(references, key=lambda r: (r["task"], r["solution"])):
        def num(key: str, fmt: str = "10.4f", r: dict[str, Any] = r) -> str:
            value = r.get(key)
            return format(value, fmt) if isinstance(value, (int, float)) else " " * int(fmt.split(".")[0])

        lines.append(f"{r['task']:<34} {r['solution']:>2} {r['status']:<14} {num('kernel_ms')} "
                     f"{num('kernel_spread_ms', '8.4f')} {num('reference_ms')} {num('reference_spread_ms', '8.4f')} "
                     f"{num('speedup', '8.2f')}")
    return "\n".join(lines)


def summarize(records: list[dict[str, Any]]) -> dict[str, Any]:
    references = [r for r in records if r["kind"] == "reference"]
    correct = [r for r in references if r["status"] == "CORRECT"]
    speedups = [r["speedup"] for r in correct if isinstance(r.get("speedup"), (int, float)) and r["speedup"] > 0]
    repeat = [r for r in records if r["kind"] == "repeatability"]
    triton = [r for r in records if r["kind"] == "triton_reference"]  # envs_tests/gpu/test_gpu_triton.py
    return {
        "triton_reference_solutions": len(triton),
        "triton_reference_correct": sum(r["status"] == "CORRECT" for r in triton),
        "triton_not_correct": [f"{r['task']}: {r['status']} {r.get('detail', '')}" for r in triton
                               if r["status"] != "CORRECT"],
        "reference_solutions": len(references),
        "reference_correct": len(correct),
        "all_reference_correct": bool(references) and len(correct) == len(references),
        "not_correct": [f"{r['task']}#{r['solution']}: {r['status']} {r.get('message', '')}" for r in references
                        if r["status"] != "CORRECT"],
        "geomean_speedup": math.exp(sum(map(math.log, speedups)) / len(speedups)) if speedups else None,
        "min_speedup": min(speedups) if speedups else None,
        "max_speedup": max(speedups) if speedups else None,
        "timing_repeatability": repeat[0] if repeat else None,
        "timing_spread_below_2_percent": (repeat[0]["relative_half_range"] < 0.02) if repeat else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("outdir", type=Path, help="folder for gpu_log.txt and gpu_results.json")
    parser.add_argument("--timing-budget", type=float, default=0.25,
                        help="seconds to time each correct kernel and each reference (default 0.25)")
    parser.add_argument("--timeout", type=float, default=540.0, help="kill pytest after this many seconds")
    parser.add_argument("-k", default="", help="pytest -k expression to run a subset")
    args = parser.parse_args(argv)
    outdir: Path = args.outdir
    outdir.mkdir(parents=True, exist_ok=True)
    (outdir / "records.jsonl").unlink(missing_ok=True)
    info = device_info()
    with open(outdir / "gpu_log.txt", "w") as log:
        log.write(f"LEAP gym GPU checks, {time.strftime('%Y-%m-%d %H:%M:%S %Z')}\n{json.dumps(info, indent=2)}\n\n")
        code, seconds = run_pytest(outdir, args, log)
        records = read_records(outdir / "records.jsonl")
        summary = summarize(records)
        table = speedup_table([r for r in records if r["kind"] == "reference"])
        tail = (f"\n\n== speedups of the reference solutions (median of CUDA-event trials, L2 flushed) ==\n{table}\n\n"
                f"== summary ==\n{json.dumps(summary, indent=2, default=str)}\n"
                f"pytest exit code {code}, {seconds:.1f} s\n")
        log.write(tail)
        sys.stdout.write(tail)
    results = {"device": info, "pytest": {"exit_code": code, "seconds": round(seconds, 1),
                                          **junit_summary(outdir / "junit.xml")},
               "summary": summary, "records": records}
    (outdir / "gpu_results.json").write_text(json.dumps(results, indent=2, default=str))
    if code == 0 and not info.get("cuda_backend_available"):
        sys.stdout.write(f"the cuda backend is unavailable: {info.get('cuda_backend_reason')}\n")
        return 3
    return code


if __name__ == "__main__":
    sys.exit(main())
