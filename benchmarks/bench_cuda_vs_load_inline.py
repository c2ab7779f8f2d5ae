"""Per-evaluation latency: this project's path (NVRTC to CUBIN, driver load, launch) against
``torch.utils.cpp_extension.load_inline`` on the same kernel, measured side by side in one run.

Every evaluation of an LLM's response sees a new source, so both paths are timed **uncached**: a
unique comment defeats NVRTC's cache, and each ``load_inline`` build gets a fresh name and build
folder.

    python benchmarks/bench_cuda_vs_load_inline.py [--nvrtc-repeats 5] [--inline-repeats 2] [--arch sm_90]

Parts, each skipped with the reason when this machine cannot run it:

1. compile side: NVRTC ``compile_cuda`` (and a KernelBench-style answer converted to the native
   format by ``leap_gym.kernelbench``, then NVRTC: the ``cpu`` backend's path) against ``load_inline``
   with ``cuda_sources`` (needs a CUDA build of torch and nvcc); with a CPU-only torch, which refuses
   CUDA sources, against ``load_inline`` of the equivalent C++ CPU extension (the same host-side build
   of ``torch/extension.h`` and pybind11 bindings, minus nvcc's device pass), and, where nvcc is
   found, ``nvcc -cubin`` of the bare kernel;
2. launch side (needs a GPU): compile + ``CudaBackend.load`` + launch + synchronise, against
   ``load_inline`` build + import + launch + synchronise.
"""

from __future__ import annotations

import argparse
import itertools
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

KERNEL = r"""
extern "C" __global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = fmaxf(x[i], 0.0f);
}
"""

INLINE_CUDA = KERNEL + r"""
#include <torch/extension.h>
torch::Tensor relu(torch::Tensor x) {
    auto y = torch::empty_like(x);
    int n = x.numel();
    relu_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""

INLINE_CPP = r"""
#include <torch/extension.h>
#include <algorithm>
torch::Tensor relu(torch::Tensor x) {
    auto y = torch::empty_like(x);
    const float* xp = x.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); ++i) yp[i] = std::max(xp[i], 0.0f);
    return y;
}
"""

_nonce = itertools.count()


def _unique(source: str) -> tuple[str, int]:
    n = next(_nonce)
    return f"{source}\n// evaluation {os.getpid()}-{n}-{time.time_ns()}\n", n


_cpu_medians: dict[int, float] = {}


def _cpu_seconds() -> float:
    """CPU time of this process and its finished children (compilers run as children)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _median_time(fn: Callable[[], None], repeats: int) -> tuple[float, list[float]]:
    """Median wall-clock seconds of `fn` and the samples; the median CPU seconds go to `_cpu_medians`."""
    samples, cpu = [], []
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), _cpu_seconds()
        fn()
        samples.append(time.perf_counter() - start)
        cpu.append(_cpu_seconds() - start_cpu)
    median = statistics.median(samples)
    _cpu_medians[id(samples)] = statistics.median(cpu)
    return median, samples


def nvrtc_compile(arch: str) -> None:
    from leap_gym.backends.nvrtc import compile_cuda

    source, _ = _unique(KERNEL)
    result = compile_cuda(source, arch, use_disk_cache=False)
    assert result.ok and not result.cached, result.log


def converted_compile(arch: str) -> None:
    """A KernelBench-style answer (INLINE_CUDA through load_inline) converted to the native format, then NVRTC."""
    from leap_gym.backends.nvrtc import compile_cuda
    from leap_gym.kernelbench import convert_answer

    _, n = _unique("")
    source = f"#define LEAP_BENCH_NONCE {os.getpid()}_{n}_{time.time_ns()}\n{INLINE_CUDA}"  # kept in the cuda block
    answer = (f'from torch.utils.cpp_extension import load_inline\nsrc = """{source}"""\n'
              'ext = load_inline(name="relu", cpp_sources="torch::Tensor relu(torch::Tensor x);", cuda_sources=src, '
              'functions=["relu"])\n\nclass ModelNew:\n    pass\n')
    converted = convert_answer(answer)
    assert not converted.error, converted.error
    result = compile_cuda(converted.cuda, arch, use_disk_cache=False)
    assert result.ok and not result.cached, result.log


def nvrtc_evaluate_on_gpu(arch: str) -> None:
    import torch

    from leap_gym.backends.base import get_backend
    from leap_gym.backends.nvrtc import compile_cuda
    from leap_gym.evaluation.kernels import Kernels, parse_kernel_signatures

    source, _ = _unique(KERNEL)
    backend = get_backend("cuda")
    compiled = compile_cuda(source, arch, use_disk_cache=False)
    signatures = parse_kernel_signatures(source)
    kernels = Kernels(signatures, backend.load(source, compiled.cubin, signatures, arch))
    x = torch.randn(1 << 20, device="cuda")
    y = torch.empty_like(x)
    kernels.relu_kernel((x.numel() + 255) // 256, 256, x, y, x.numel())
    backend.synchronize()


def inline_build(cuda: bool, launch: bool) -> None:
    import torch
    from torch.utils.cpp_extension import load_inline

    source, n = _unique(INLINE_CUDA if cuda else INLINE_CPP)
    build = tempfile.mkdtemp(prefix="bench_load_inline_")
    try:
        kwargs = dict(cuda_sources=source, cpp_sources="torch::Tensor relu(torch::Tensor x);") if cuda else \
            dict(cpp_sources=source)
        module = load_inline(f"bench_relu_{os.getpid()}_{n}", functions=["relu"], build_directory=build,
                             verbose=False, **kwargs)
        if launch:
            x = torch.randn(1 << 20, device="cuda" if cuda else "cpu")
            module.relu(x)
            if cuda:
                torch.cuda.synchronize()
    finally:
        shutil.rmtree(build, ignore_errors=True)


def nvcc_cubin(nvcc: str, arch: str) -> None:
    folder = tempfile.mkdtemp(prefix="bench_nvcc_")
    try:
        path = Path(folder) / "k.cu"
        path.write_text(_unique(KERNEL)[0])
        subprocess.run([nvcc, "-cubin", f"-arch={arch}", "-o", str(path.with_suffix(".cubin")), str(path)],
                       check=True, capture_output=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _row(label: str, seconds: float, samples: list[float], base: float | None) -> str:
    ratio = f"{seconds / base:8.1f}x" if base else "      1x"
    cpu = _cpu_medians.get(id(samples))
    cpu_text = f"{cpu * 1e3:10.1f} ms CPU" if cpu is not None else ""
    return f"  {label:<62} {seconds * 1e3:10.1f} ms  {ratio}  {cpu_text}   ({len(samples)} runs: " \
           f"{', '.join(f'{s:.3f}' for s in samples)} s)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="per-evaluation latency: NVRTC + driver launch vs load_inline")
    parser.add_argument("--nvrtc-repeats", type=int, default=5)
    parser.add_argument("--inline-repeats", type=int, default=2)
    parser.add_argument("--arch", default=None, help="NVRTC target (default: the GPU's, else sm_90)")
    args = parser.parse_args(argv)

    import torch

    from leap_gym.backends.base import get_backend
    from leap_gym.backends.nvrtc import nvrtc_version

    backend = get_backend("cuda")
    available = backend.availability()
    arch = args.arch or backend.default_arch()
    torch_has_cuda = bool(torch.version.cuda) and torch.cuda.is_available()
    nvcc = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if Path("/usr/local/cuda/bin/nvcc").exists() else None)
    print(f"torch {torch.__version__} (CUDA build: {torch.version.cuda or 'no'}), NVRTC {nvrtc_version()}, "
          f"arch {arch}, nvcc {nvcc or 'not found'}, CPUs {os.cpu_count()}")
    print(f"GPU: {'available' if available.ok else 'none (' + available.reason + ')'}\n")
    skipped: list[str] = []

    print("1. compile side, uncached (median wall-clock, ratio of wall-clocks to NVRTC, median CPU time incl. "
          "compiler subprocesses):")
    nvrtc_compile(arch)  # load libnvrtc once, outside the timing
    base, samples = _median_time(lambda: nvrtc_compile(arch), args.nvrtc_repeats)
    print(_row("NVRTC compile_cuda -> CUBIN (this backend)", base, samples, None))
    t, s = _median_time(lambda: converted_compile(arch), args.nvrtc_repeats)
    print(_row("load_inline answer converted to native (kernelbench) + NVRTC", t, s, base))
    if torch_has_cuda and nvcc:
        t, s = _median_time(lambda: inline_build(cuda=True, launch=False), args.inline_repeats)
        print(_row("load_inline(cuda_sources=...) host-side build", t, s, base))
    else:
        why = "torch is a CPU-only build" if not torch.version.cuda else "no GPU/nvcc"
        skipped.append(f"load_inline with cuda_sources ({why}: torch refuses CUDA sources without CUDA_HOME)")
        t, s = _median_time(lambda: inline_build(cuda=False, launch=False), args.inline_repeats)
        print(_row("load_inline(cpp_sources=...) equivalent C++ CPU extension build", t, s, base))
        print("     (stands in for load_inline's host-side build: same torch/extension.h + pybind11 compile and link,"
              " without nvcc's device pass, so the real CUDA build is slower still)")
    if nvcc:
        try:
            t, s = _median_time(lambda: nvcc_cubin(nvcc, arch), args.nvrtc_repeats)
            print(_row(f"nvcc -cubin -arch={arch} of the bare kernel (device pass only)", t, s, base))
        except subprocess.CalledProcessError as exc:
            skipped.append(f"nvcc -cubin failed: {exc.stderr.decode(errors='replace')[-300:]}")

    print("\n2. launch side, whole evaluation path (compile + load + launch + synchronise):")
    if available.ok:
        nvrtc_evaluate_on_gpu(arch)  # CUDA context creation outside the timing
        base, samples = _median_time(lambda: nvrtc_evaluate_on_gpu(arch), args.nvrtc_repeats)
        print(_row("NVRTC + cuModuleLoadData + cuLaunchKernel (this backend)", base, samples, None))
        if torch_has_cuda and nvcc:
            t, s = _median_time(lambda: inline_build(cuda=True, launch=True), args.inline_repeats)
            print(_row("load_inline build + import + launch", t, s, base))
        else:
            skipped.append("load_inline launch (no nvcc)")
    else:
        print("  SKIPPED: no GPU on this machine, so nothing was launched; the compile-side ratio above is the "
              "measured part.")
        skipped.append(f"launch side ({available.reason})")
    if skipped:
        print("\nskipped:\n" + "\n".join(f"  - {s}" for s in skipped))
    return 0


if __name__ == "__main__":
    sys.exit(main())
