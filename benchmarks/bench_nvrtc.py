"""NVRTC compile time of every built-in reference solution, uncached against a cache hit, side by side.

    python benchmarks/bench_nvrtc.py
"""

from __future__ import annotations

import statistics
import time

from leap_gym.backends.nvrtc import compile_cuda
from leap_gym.evaluation.parse import parse_response
from leap_gym.tasks import load_tasks


def main() -> None:
    sources = [parse_response(s, wrapper=t.wrapper).cuda for t in load_tasks("builtin") for s in t.reference_solutions]
    cold, hit = [], []
    for source in sources:
        start = time.perf_counter()
        result = compile_cuda(source, "sm_90", options=(f"-DLEAP_BENCH_{time.time_ns()}",), use_disk_cache=False)
        cold.append(time.perf_counter() - start)
        assert result.ok, result.log
        compile_cuda(source, "sm_90")
        start = time.perf_counter()
        assert compile_cuda(source, "sm_90").cached
        hit.append(time.perf_counter() - start)
    cold_ms, hit_ms = 1000 * statistics.median(cold), 1000 * statistics.median(hit)
    print(f"{len(sources)} reference solutions, sm_90")
    print(f"{'':22}{'median ms':>10}{'max ms':>10}")
    print(f"{'NVRTC, uncached':22}{cold_ms:10.1f}{1000 * max(cold):10.1f}")
    print(f"{'cache hit':22}{hit_ms:10.3f}{1000 * max(hit):10.3f}")
    print(f"cache hit is {cold_ms / hit_ms:,.0f}x faster than compiling")


if __name__ == "__main__":
    main()
