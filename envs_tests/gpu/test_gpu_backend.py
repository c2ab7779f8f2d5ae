"""The `cuda` backend in this process: load, launch, argument marshalling, big shared memory,
streams, occupancy, profiling. No test here faults (a fault would poison this process's context);
faults are tested through sandboxed workers in ``test_gpu_evaluate.py``.

Written without a GPU; not yet run.
"""

from __future__ import annotations

import pytest
import torch

from leap_gym.backends.base import KernelRuntimeError, get_backend
from leap_gym.backends.cuda import CudaBackend, device_attribute, device_peak_bandwidth_gbps, pick_arch, tensor_bytes
from leap_gym.backends.nvrtc import compile_cuda
from leap_gym.evaluation.kernels import Kernels, LaunchError, parse_kernel_signatures

pytestmark = pytest.mark.gpu

SOURCE = r"""
extern "C" __global__ void saxpy(const float* __restrict__ x, float* __restrict__ y, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}

extern "C" __global__ void scalars(double* out, char c, unsigned short us, int i, unsigned int u,
                                   long long ll, unsigned long long ull, float f, double d, bool b) {
    if (threadIdx.x == 0 && blockIdx.x == 0) {
        out[0] = c; out[1] = us; out[2] = i; out[3] = u; out[4] = (double)ll; out[5] = (double)ull;
        out[6] = f; out[7] = d; out[8] = b ? 1.0 : 0.0;
    }
}

// Reverses each row of n floats through dynamic shared memory (n = 16384: 64 KB, above the 48 KB default).
extern "C" __global__ void reverse_rows(const float* x, float* y, int n) {
    extern __shared__ float buf[];
    const float* row = x + (long long)blockIdx.x * n;
    for (int i = threadIdx.x; i < n; i += blockDim.x) buf[i] = row[i];
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) y[(long long)blockIdx.x * n + i] = buf[n - 1 - i];
}

extern "C" __global__ void spin(float* out, long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) { }
    if (threadIdx.x == 0) out[blockIdx.x] = 1.0f;
}

extern "C" __global__ void __launch_bounds__(128) bounded(float* out) {
    out[threadIdx.x] = 1.0f;
}
"""


@pytest.fixture(scope="module")
def backend() -> CudaBackend:
    b = get_backend("cuda")
    assert isinstance(b, CudaBackend)
    return b


@pytest.fixture(scope="module")
def kernels(backend: CudaBackend) -> Kernels:
    compiled = compile_cuda(SOURCE, backend.default_arch())
    assert compiled.ok, compiled.log
    signatures = parse_kernel_signatures(SOURCE)
    launcher = backend.load(SOURCE, compiled.cubin, signatures, compiled.arch)
    return Kernels(signatures, launcher)


def test_default_arch_is_the_devices(backend: CudaBackend):
    from cuda.bindings import nvrtc

    major, minor = torch.cuda.get_device_capability()
    _, supported = nvrtc.nvrtcGetSupportedArchs()
    assert backend.default_arch() == pick_arch(major, minor, list(supported))
    assert backend.max_shared_mem() >= 48 * 1024


def test_launch_saxpy(backend: CudaBackend, kernels: Kernels):
    n = 1_000_003
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    expected = 2.5 * x + y
    kernels.saxpy(((n + 255) // 256,), (256,), x, y, 2.5, n)
    backend.synchronize()
    torch.testing.assert_close(y, expected)
    assert kernels.launches["saxpy"] == 1


def test_every_scalar_width_arrives_intact(backend: CudaBackend, kernels: Kernels):
    out = torch.zeros(9, dtype=torch.float64, device="cuda")
    kernels.scalars(1, 32, out, -7, 65535, -123456, 4_000_000_000, -(2**40), 2**53, 1.5, -2.25, True)
    backend.synchronize()
    assert out.tolist() == [-7, 65535, -123456, 4_000_000_000, -(2**40), 2**53, 1.5, -2.25, 1.0]


def test_dynamic_shared_memory_above_48kb(backend: CudaBackend, kernels: Kernels):
    n, rows = 16384, 8
    x = torch.randn(rows, n, device="cuda")
    y = torch.empty_like(x)
    kernels.reverse_rows(rows, 256, x, y, n, shared_mem=n * 4)
    backend.synchronize()
    torch.testing.assert_close(y, x.flip(1))
    with pytest.raises(LaunchError, match="shared memory"):
        kernels.reverse_rows(rows, 256, x, y, n, shared_mem=backend.max_shared_mem() + 4)


def test_launches_go_on_torchs_current_stream(backend: CudaBackend, kernels: Kernels):
    side = torch.cuda.Stream()
    out = torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    cycles = int(device_attribute("CLOCK_RATE") * 1e3 * 0.2)  # CLOCK_RATE is in kHz
    with torch.cuda.stream(side):
        kernels.spin(1, 32, out, cycles)  # ~0.2 s busy
    # Had the launch gone to another stream, `side` would have nothing pending.
    assert not side.query(), "the kernel should still be running on the side stream"
    side.synchronize()
    assert out.item() == 1.0


def test_refused_launch_does_not_poison_the_context(backend: CudaBackend, kernels: Kernels):
    out = torch.zeros(1024, device="cuda")
    with pytest.raises((KernelRuntimeError, LaunchError)) as info:
        kernels.bounded(1, 1024, out)  # more threads than __launch_bounds__(128)
        backend.synchronize()
    assert "CUDA_ERROR" in str(info.value) or "CUDA error" in str(info.value)
    assert not backend.context_poisoned
    assert backend.check_health()
    kernels.bounded(1, 128, out)
    backend.synchronize()
    assert out[:128].sum().item() == 128


def test_occupancy_profile_and_bandwidth(backend: CudaBackend, kernels: Kernels, record):
    n = 1 << 26
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    launcher = kernels._launcher
    occupancy = backend.occupancy(launcher, "saxpy", 256, 0)
    assert 0 < occupancy <= 1
    report = backend.profile(launcher, lambda: kernels.saxpy((n + 255) // 256, 256, x, y, 2.0, n),
                             bytes_moved=tensor_bytes(x, y, y))
    assert report.launches == {"saxpy": 1} and report.per_kernel_ms["saxpy"] > 0
    assert 0 < report.occupancy["saxpy"] <= 1
    peak = device_peak_bandwidth_gbps()
    assert peak is not None and 100 < peak < 20_000
    assert report.peak_bandwidth_gbps == peak
    assert 0 < report.bandwidth_gbps < 1.2 * peak
    record("profile", kernel="saxpy", n=n, ms=report.per_kernel_ms["saxpy"], occupancy=report.occupancy["saxpy"],
           bandwidth_gbps=report.bandwidth_gbps, peak_bandwidth_gbps=peak,
           device=torch.cuda.get_device_name())


def test_health_check_on_a_healthy_context(backend: CudaBackend):
    assert backend.check_health() and not backend.context_poisoned
