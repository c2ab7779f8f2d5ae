"""The CPU runtime against numba's CUDA simulator, side by side, on the same two kernels.

Vector add and a shared-memory block reduction at 1e5 elements (256 threads per block), each run
by this project's CUDA-on-CPU runtime (`leap_gym.backends.cpu`) and by numba's simulator
(``NUMBA_ENABLE_CUDASIM=1``); prints both times and their ratio. The simulator part is slow
(minutes); ``--skip-numba`` leaves it out. ``--tasks`` adds the end-to-end evaluation time (NVRTC +
host compile + correctness trials, in process) of every level-1 built-in task, cold (empty caches)
and warm.

    python benchmarks/bench_cpu_runtime.py [--n 100000] [--skip-numba] [--tasks]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from typing import Any

os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")  # before numba is imported anywhere

import numpy as np  # noqa: E402
import torch  # noqa: E402

# Numba's module and float32, set by bench_numba: its CUDA simulator patches the kernels' *global* `cuda`.
cuda: Any = None
float32: Any = None

CUDA_SOURCE = r'''
extern "C" __global__ void vadd(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
extern "C" __global__ void block_sum(const float* x, float* out, int n) {
    __shared__ float s[256];
    int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
    s[t] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k >>= 1) {
        if (t < k) s[t] += s[t + k];
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = s[0];
}
'''
THREADS = 256


def bench_leap(n: int, repeats: int = 5) -> dict[str, float]:
    from leap_gym.backends.cpu import CpuBackend
    from leap_gym.backends.nvrtc import compile_cuda
    from leap_gym.evaluation.kernels import Kernels, parse_kernel_signatures

    compiled = compile_cuda(CUDA_SOURCE, "sm_90")
    assert compiled.ok, compiled.log
    sigs = parse_kernel_signatures(CUDA_SOURCE)
    start = time.perf_counter()
    kernels = Kernels(sigs, CpuBackend().load(CUDA_SOURCE + f"\n// {time.time()}\n", compiled.cubin, sigs, "sm_90"))
    build_s = time.perf_counter() - start
    blocks = (n + THREADS - 1) // THREADS
    a, b = torch.randn(n), torch.randn(n)
    c = torch.empty(n)
    out = torch.empty(blocks)
    times: dict[str, list[float]] = {"vadd": [], "block_sum": []}
    for _ in range(repeats):
        t = time.perf_counter()
        kernels.vadd(blocks, THREADS, a, b, c, n)
        times["vadd"].append(time.perf_counter() - t)
        t = time.perf_counter()
        kernels.block_sum(blocks, THREADS, a, out, n)
        times["block_sum"].append(time.perf_counter() - t)
    assert torch.allclose(c, a + b)
    assert abs(float(out.double().sum()) - float(a.double().sum())) < 1e-2
    result = {k: statistics.median(v) for k, v in times.items()}
    result["build"] = build_s
    return result


def bench_numba(n: int) -> dict[str, float]:
    import numba
    import numba.cuda

    # the simulator patches the kernel's *global* `cuda`, so the kernels must not close over a local
    globals()["cuda"] = numba.cuda
    globals()["float32"] = numba.float32

    @cuda.jit
    def vadd(a, b, c, n):
        i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        if i < n:
            c[i] = a[i] + b[i]

    @cuda.jit
    def block_sum(x, out, n):
        s = cuda.shared.array(THREADS, dtype=float32)
        t = cuda.threadIdx.x
        i = cuda.blockIdx.x * cuda.blockDim.x + t
        s[t] = x[i] if i < n else 0.0
        cuda.syncthreads()
        k = cuda.blockDim.x // 2
        while k > 0:
            if t < k:
                s[t] += s[t + k]
            cuda.syncthreads()
            k //= 2
        if t == 0:
            out[cuda.blockIdx.x] = s[0]

    blocks = (n + THREADS - 1) // THREADS
    a = np.random.randn(n).astype(np.float32)
    b = np.random.randn(n).astype(np.float32)
    c = np.empty(n, dtype=np.float32)
    out = np.empty(blocks, dtype=np.float32)
    t = time.perf_counter()
    vadd[blocks, THREADS](a, b, c, n)
    vadd_s = time.perf_counter() - t
    t = time.perf_counter()
    block_sum[blocks, THREADS](a, out, n)
    sum_s = time.perf_counter() - t
    assert np.allclose(c, a + b)
    assert abs(float(out.astype(np.float64).sum()) - float(a.astype(np.float64).sum())) < 1e-2
    return {"vadd": vadd_s, "block_sum": sum_s}


def bench_tasks() -> None:
    import leap_gym
    from leap_gym.evaluation.languages import prepare, run_job
    from leap_gym.evaluation.pipeline import EvalJob

    def run_all(label: str) -> list[float]:
        times = []
        for task in leap_gym.load_tasks("builtin"):
            if task.level != 1:
                continue
            t = task.with_size("cpu")
            parsed = prepare(t, t.reference_solutions[0])
            job = EvalJob(task=t, cuda=parsed.cuda, python=parsed.python, backend="cpu", arch="sm_90")
            start = time.perf_counter()
            result = run_job(job)
            times.append(time.perf_counter() - start)
            assert result.status == "CORRECT", (task.id, result.message)
        print(f"  {label}: {len(times)} level-1 tasks, median {statistics.median(times):.3f} s, "
              f"max {max(times):.3f} s per evaluation")
        return times

    from leap_gym.backends.cpu import runtime_build

    with tempfile.TemporaryDirectory() as cache:
        os.environ["LEAP_GYM_CACHE"] = cache
        runtime_build(False)  # the one-time runtime/PCH build is not part of a task's evaluation
        print("end-to-end evaluation (NVRTC + host compile + 3 trials, in process, no sandbox):")
        cold = run_all("cold (empty NVRTC and module caches)")
        warm = run_all("warm")
        print(f"  cold/warm median ratio: {statistics.median(cold) / statistics.median(warm):.1f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--skip-numba", action="store_true")
    parser.add_argument("--tasks", action="store_true")
    args = parser.parse_args()
    leap = bench_leap(args.n)
    print(f"LEAP CPU runtime (n={args.n}, {THREADS} threads/block): host build {leap['build']:.3f} s, "
          f"vadd {leap['vadd'] * 1e3:.2f} ms, block_sum {leap['block_sum'] * 1e3:.2f} ms (median of 5)")
    if not args.skip_numba:
        sim = bench_numba(args.n)
        print(f"numba CUDA simulator:              vadd {sim['vadd']:.2f} s, "
              f"block_sum {sim['block_sum']:.2f} s (one run)")
        for k in ("vadd", "block_sum"):
            print(f"  {k}: LEAP runtime is {sim[k] / leap[k]:,.0f}x faster")
    if args.tasks:
        bench_tasks()
    sys.stdout.flush()


if __name__ == "__main__":
    main()
