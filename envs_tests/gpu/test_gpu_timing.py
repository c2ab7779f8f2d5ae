"""The GPU timing protocol: repeatability, work on side streams counted, the L2 flush, torch references.

Written without a GPU; not yet run.
"""

from __future__ import annotations

import statistics

import pytest
import torch

from leap_gym.backends.base import get_backend
from leap_gym.backends.cuda import CudaBackend, device_attribute
from leap_gym.backends.nvrtc import compile_cuda
from leap_gym.backends.timing import time_gpu
from leap_gym.evaluation.kernels import Kernels, parse_kernel_signatures

pytestmark = pytest.mark.gpu

SOURCE = r"""
extern "C" __global__ void copy(const float* __restrict__ x, float* __restrict__ y, long long n) {
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) y[i] = x[i];
}

extern "C" __global__ void spin(float* out, long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) { }
    if (threadIdx.x == 0) out[blockIdx.x] = 1.0f;
}
"""

REPEATS = 5
MAX_RELATIVE_SPREAD = 0.02


@pytest.fixture(scope="module")
def backend() -> CudaBackend:
    return get_backend("cuda")  # type: ignore[return-value]


@pytest.fixture(scope="module")
def kernels(backend: CudaBackend) -> Kernels:
    compiled = compile_cuda(SOURCE, backend.default_arch())
    assert compiled.ok, compiled.log
    signatures = parse_kernel_signatures(SOURCE)
    return Kernels(signatures, backend.load(SOURCE, compiled.cubin, signatures, compiled.arch))


def _spin_cycles(seconds: float) -> int:
    return int(device_attribute("CLOCK_RATE") * 1e3 * seconds)  # kHz


def test_same_kernel_timed_repeatedly_agrees_within_2_percent(backend: CudaBackend, kernels: Kernels, record):
    n = 1 << 28  # 1 GiB read + 1 GiB written: about half a millisecond on an H100, memory-bound
    x, y = torch.randn(n, device="cuda"), torch.empty(n, device="cuda")
    sms = device_attribute("MULTIPROCESSOR_COUNT")
    run = lambda: kernels.copy(sms * 8, 256, x, y, n)  # noqa: E731
    runs = [backend.time_stats(run, budget_s=1.0) for _ in range(REPEATS)]
    medians = [r.median_ms for r in runs]
    center = statistics.median(medians)
    half_range = (max(medians) - min(medians)) / 2
    record("repeatability", kernel="copy", n=n, medians_ms=medians, half_range_ms=half_range,
           relative_half_range=half_range / center, per_run_relative_spread=[r.relative_spread for r in runs],
           trials=[r.trials for r in runs], stop_reasons=[r.stop_reason for r in runs],
           device=torch.cuda.get_device_name())
    assert half_range / center < MAX_RELATIVE_SPREAD, f"medians {medians} spread more than 2% of {center:.4f} ms"


def test_work_on_a_side_stream_is_timed(backend: CudaBackend, kernels: Kernels, record):
    out = torch.zeros(1, device="cuda")
    cycles = _spin_cycles(0.002)
    side = torch.cuda.Stream()

    def on_current() -> None:
        kernels.spin(1, 32, out, cycles)

    def on_side() -> None:
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            kernels.spin(1, 32, out, cycles)

    current = time_gpu(on_current, budget_s=0.5, flush_l2=False)
    hidden = time_gpu(on_side, budget_s=0.5, flush_l2=False)
    record("side_stream", current_ms=current.median_ms, side_ms=hidden.median_ms)
    assert current.median_ms > 1.0
    assert hidden.median_ms > 0.8 * current.median_ms, "a kernel on a side stream escaped the timing"


def test_l2_flush_keeps_reads_cold(kernels: Kernels, record):
    n = 1 << 21  # 8 MB: fits in the L2 of an A100/H100
    x, y = torch.randn(n, device="cuda"), torch.empty(n, device="cuda")
    run = lambda: kernels.copy(1024, 256, x, y, n)  # noqa: E731
    cold = time_gpu(run, budget_s=0.5, flush_l2=True)
    warm = time_gpu(run, budget_s=0.5, flush_l2=False)
    record("l2_flush", cold_ms=cold.median_ms, warm_ms=warm.median_ms, ratio=cold.median_ms / warm.median_ms)
    assert cold.median_ms >= 0.9 * warm.median_ms


def test_torch_reference_is_timed_the_same_way(backend: CudaBackend):
    x = torch.randn(1 << 24, device="cuda")
    median, spread, trials = backend.time_ms(lambda: torch.relu(x), 0.5)
    assert median > 0 and spread >= 0 and trials >= 3
