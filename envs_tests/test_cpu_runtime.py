"""The CUDA-on-CPU runtime (`leap_gym.backends.cpu`): real kernels, NVRTC-checked, run on CPU tensors.

Every kernel here first passes NVRTC (so it is valid device code), then runs through the `cpu`
backend and the `Kernels` handle, and is checked against torch.
"""

from __future__ import annotations

import math

import pytest
import torch

from leap_gym.backends.base import KernelRuntimeError
from leap_gym.backends.cpu import CpuBackend, find_compiler
from leap_gym.evaluation.kernels import Kernels, parse_kernel_signatures

pytestmark = pytest.mark.skipif(find_compiler() is None, reason="no host C++ compiler for the CPU runtime")


def load(src: str, needs_libcudacxx: bool = False, **backend_kwargs) -> Kernels:
    from leap_gym.backends.nvrtc import compile_cuda

    compiled = compile_cuda(src, "sm_90")
    if needs_libcudacxx and not compiled.ok and "cuda/std/" in compiled.log:
        pass  # NVRTC lacks libcu++ headers (pip install nvidia-cuda-cccl): only the host side is exercised
    else:
        assert compiled.ok, compiled.log
    sigs = parse_kernel_signatures(src)
    launcher = CpuBackend(**backend_kwargs).load(src, compiled.cubin, sigs, "sm_90")
    return Kernels(sigs, launcher)


def test_thread_and_block_indices_1d_2d_3d():
    k = load(r'''
extern "C" __global__ void idx3(int* out, int nx, int ny, int nz) {
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    int z = blockIdx.z * blockDim.z + threadIdx.z;
    if (x < nx && y < ny && z < nz) {
        int lin = (z * ny + y) * nx + x;
        out[lin * 4 + 0] = x; out[lin * 4 + 1] = y; out[lin * 4 + 2] = z;
        out[lin * 4 + 3] = gridDim.x * 10000 + gridDim.y * 100 + gridDim.z
                           + blockDim.x * blockDim.y * blockDim.z * 1000000;
    }
}''')
    for nx, ny, nz, block in [(37, 1, 1, (8, 1, 1)), (13, 9, 1, (4, 4, 1)), (5, 6, 7, (2, 3, 4))]:
        grid = tuple(-(-n // b) for n, b in zip((nx, ny, nz), block))
        out = torch.full((nx * ny * nz * 4,), -1, dtype=torch.int32)
        k.idx3(grid, block, out, nx, ny, nz)
        o = out.view(nz, ny, nx, 4)
        zz, yy, xx = torch.meshgrid(torch.arange(nz), torch.arange(ny), torch.arange(nx), indexing="ij")
        assert torch.equal(o[..., 0], xx.int()) and torch.equal(o[..., 1], yy.int())
        assert torch.equal(o[..., 2], zz.int())
        tag = grid[0] * 10000 + grid[1] * 100 + grid[2] + block[0] * block[1] * block[2] * 1000000
        assert (o[..., 3] == tag).all()


def test_static_and_dynamic_shared_memory_with_syncthreads():
    k = load(r'''
extern "C" __global__ void reverse_static(const float* x, float* y) {
    __shared__ float s[128];
    int t = threadIdx.x, base = blockIdx.x * blockDim.x;
    s[t] = x[base + t];
    __syncthreads();
    y[base + t] = s[blockDim.x - 1 - t];
}
extern "C" __global__ void reverse_dynamic(const float* x, float* y) {
    extern __shared__ float s[];
    int t = threadIdx.x, base = blockIdx.x * blockDim.x;
    s[t] = x[base + t];
    __syncthreads();
    y[base + t] = s[blockDim.x - 1 - t];
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
}''')
    x = torch.randn(16 * 128)
    y = torch.empty_like(x)
    expected = x.view(16, 128).flip(1).flatten()
    k.reverse_static(16, 128, x, y)
    assert torch.equal(y, expected)
    y.zero_()
    k.reverse_dynamic(16, 128, x, y, shared_mem=128 * 4)
    assert torch.equal(y, expected)
    n = 10_000
    x = torch.randn(n)
    out = torch.empty((n + 255) // 256)
    k.block_sum(out.numel(), 256, x, out, n)
    assert torch.allclose(out.sum(), x.sum(), atol=1e-3)
    # shuffled thread order must not change a correctly synchronised kernel
    k2 = load(r'''
extern "C" __global__ void block_sum(const float* x, float* out, int n) {
    __shared__ float s[256];
    int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
    s[t] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k >>= 1) { if (t < k) s[t] += s[t + k]; __syncthreads(); }
    if (t == 0) out[blockIdx.x] = s[0];
}''', shuffle=True, seed=3)
    out2 = torch.empty_like(out)
    k2.block_sum(out.numel(), 256, x, out2, n)
    assert torch.allclose(out, out2)


def test_syncthreads_count_and_or():
    k = load(r'''
extern "C" __global__ void votes(const int* x, int* out) {
    int p = x[threadIdx.x];
    int c = __syncthreads_count(p);
    int a = __syncthreads_and(p);
    int o = __syncthreads_or(p);
    if (threadIdx.x == 0) { out[0] = c; out[1] = a; out[2] = o; }
}''')
    x = (torch.arange(64) % 3 == 0).int()
    out = torch.zeros(3, dtype=torch.int32)
    k.votes(1, 64, x, out)
    assert out.tolist() == [int(x.sum()), 0, 1]


def test_warp_operations():
    k = load(r'''
extern "C" __global__ void warp_ops(const int* x, int* out) {
    int t = threadIdx.x, lane = t & 31;
    int v = x[t];
    int* o = out + t * 10;
    o[0] = __shfl_sync(0xffffffffu, v, 3);
    o[1] = __shfl_up_sync(0xffffffffu, v, 2);
    o[2] = __shfl_down_sync(0xffffffffu, v, 5);
    o[3] = __shfl_xor_sync(0xffffffffu, v, 1);
    o[4] = (int)__ballot_sync(0xffffffffu, v > 0);
    o[5] = __any_sync(0xffffffffu, v > 90);
    o[6] = __all_sync(0xffffffffu, v > -1000);
    __syncwarp();
    o[7] = (int)__activemask();
    o[8] = __shfl_sync(0xffffffffu, v, lane + 1, 8);   // width 8 segments
    float f = (float)v;
    for (int d = 16; d > 0; d >>= 1) f += __shfl_xor_sync(0xffffffffu, f, d);
    o[9] = (int)f;
}''')
    torch.manual_seed(0)
    x = torch.randint(-100, 100, (64,), dtype=torch.int32)
    out = torch.zeros(64 * 10, dtype=torch.int32)
    k.warp_ops(1, 64, x, out)
    o = out.view(64, 10)
    xs = x.view(2, 32)
    for w in range(2):
        v = xs[w].tolist()
        for lane in range(32):
            row = o[w * 32 + lane].tolist()
            assert row[0] == v[3]
            assert row[1] == (v[lane - 2] if lane >= 2 else v[lane])
            assert row[2] == (v[lane + 5] if lane + 5 < 32 else v[lane])
            assert row[3] == v[lane ^ 1]
            ballot = sum(1 << i for i in range(32) if v[i] > 0)
            assert row[4] & 0xFFFFFFFF == ballot
            assert row[5] == int(any(a > 90 for a in v))
            assert row[6] == 1
            assert row[7] & 0xFFFFFFFF == 0xFFFFFFFF
            seg = lane & ~7
            assert row[8] == v[seg + ((lane + 1) & 7)]
            assert row[9] == sum(v)


def test_atomics_on_every_type_across_blocks():
    k = load(r'''
extern "C" __global__ void atomics(int* i, unsigned int* u, unsigned long long* ull, float* f, double* d, int n) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n) return;
    atomicAdd(&i[0], 1);
    atomicSub(&i[1], 2);
    atomicMin(&i[2], -t);
    atomicMax(&i[3], t);
    atomicExch(&i[4], 7);
    atomicCAS(&i[5], 0, t + 1);            // exactly one thread wins
    atomicAdd(&u[0], 3u);
    atomicMax(&u[1], (unsigned)t);
    atomicMin(&u[2], (unsigned)t);
    atomicAdd(&ull[0], 1ull << 33);
    atomicCAS(&ull[1], 0ull, 5ull);
    atomicAdd(&f[0], 0.5f);
    atomicAdd(&f[1], -1.0f);
    atomicExch(&f[2], 2.5f);
    atomicAdd(&d[0], 0.25);
}''')
    n = 5000
    i = torch.tensor([0, 0, 0, 0, 0, 0], dtype=torch.int32)
    u = torch.tensor([0, 0, -(2**31)], dtype=torch.int32)  # u[2] = 0x80000000
    ull = torch.zeros(2, dtype=torch.int64)
    f = torch.zeros(3)
    d = torch.zeros(1, dtype=torch.float64)
    k.atomics((n + 127) // 128, 128, i, u, ull, f, d, n)
    assert i[:5].tolist() == [n, -2 * n, -(n - 1), n - 1, 7]
    assert 1 <= int(i[5]) <= n
    assert int(u[0]) == 3 * n and int(u[1]) == n - 1 and int(u[2]) == 0
    assert int(ull[0]) == n * 2**33 and int(ull[1]) == 5
    assert float(f[0]) == n * 0.5 and float(f[1]) == -n and float(f[2]) == 2.5
    assert float(d[0]) == n * 0.25


def test_templates_device_functions_and_qualifiers():
    k = load(r'''
template <typename T, int N>
__device__ __forceinline__ T dot(const T* __restrict__ a, const T* __restrict__ b) {
    T acc = T(0);
#pragma unroll
    for (int i = 0; i < N; ++i) acc += __ldg(a + i) * b[i];
    return acc;
}
template <typename T> struct Square { __device__ T operator()(T v) const { return v * v; } };
__device__ float helper(float v) { return Square<float>()(v) + 1.0f; }

extern "C" __global__ void __launch_bounds__(128) rowdot(const float* __restrict__ a, const float* __restrict__ b,
                                                          float* __restrict__ out, int rows) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < rows) out[r] = helper(dot<float, 8>(a + r * 8, b + r * 8));
}
extern "C" __global__ void rowdot_d(const double* a, const double* b, double* out, int rows) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < rows) out[r] = dot<double, 8>(a + r * 8, b + r * 8);
}''')
    a, b = torch.randn(100, 8), torch.randn(100, 8)
    out = torch.empty(100)
    k.rowdot(1, 128, a, b, out, 100)
    assert torch.allclose(out, (a * b).sum(1) ** 2 + 1, rtol=1e-4, atol=1e-4)
    ad, bd = a.double(), b.double()
    outd = torch.empty(100, dtype=torch.float64)
    k.rowdot_d(4, 32, ad, bd, outd, 100)
    assert torch.allclose(outd, (ad * bd).sum(1))


def test_vector_types():
    k = load(r'''
extern "C" __global__ void vec(const float4* a, const float2* b, const int4* c, const int2* e, const double2* g,
                               float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float4 v = a[i];
    float2 w = b[i];
    int4 q = c[i];
    int2 r = e[i];
    double2 h = g[i];
    float4 m = make_float4(v.x + w.x, v.y + w.y, v.z * 2.0f, v.w - 1.0f);
    int2 s = make_int2(q.x + q.y + r.x, q.z * q.w - r.y);
    out[i * 6 + 0] = m.x; out[i * 6 + 1] = m.y; out[i * 6 + 2] = m.z; out[i * 6 + 3] = m.w;
    out[i * 6 + 4] = (float)(s.x + s.y);
    out[i * 6 + 5] = (float)(h.x * h.y);
}''')
    n = 50
    a, b = torch.randn(n * 4), torch.randn(n * 2)
    c, e = torch.randint(-5, 5, (n * 4,), dtype=torch.int32), torch.randint(-5, 5, (n * 2,), dtype=torch.int32)
    g = torch.randn(n * 2, dtype=torch.float64)
    out = torch.empty(n * 6)
    k.vec(2, 32, a, b, c, e, g, out, n)
    o = out.view(n, 6)
    A, B, C, E, G = a.view(n, 4), b.view(n, 2), c.view(n, 4), e.view(n, 2), g.view(n, 2)
    assert torch.allclose(o[:, 0], A[:, 0] + B[:, 0]) and torch.allclose(o[:, 1], A[:, 1] + B[:, 1])
    assert torch.allclose(o[:, 2], A[:, 2] * 2) and torch.allclose(o[:, 3], A[:, 3] - 1)
    s = (C[:, 0] + C[:, 1] + E[:, 0]) + (C[:, 2] * C[:, 3] - E[:, 1])
    assert torch.equal(o[:, 4], s.float())
    assert torch.allclose(o[:, 5], (G[:, 0] * G[:, 1]).float())


def test_half_and_bfloat16():
    k = load(r'''
#include <cuda_fp16.h>
#include <cuda_bf16.h>
extern "C" __global__ void halfops(const __half* x, const __nv_bfloat16* y, __half* hout, __nv_bfloat16* bout,
                                   float* fout, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    __half a = x[i];
    __half two = __float2half(2.0f);
    hout[i * 3 + 0] = __hadd(a, two);
    hout[i * 3 + 1] = a * a - two;
    hout[i * 3 + 2] = __hfma(a, two, __float2half(0.5f));
    __nv_bfloat16 b = y[i];
    bout[i * 2 + 0] = __float2bfloat16(__bfloat162float(b) * 3.0f);
    bout[i * 2 + 1] = b + b;
    __half2 p = __floats2half2_rn(__half2float(a), 1.0f);
    float2 q = __half22float2(__hmul2(p, p));
    fout[i * 3 + 0] = q.x;
    fout[i * 3 + 1] = (a > two) ? 1.0f : 0.0f;
    fout[i * 3 + 2] = __half2float(hexp(a));
}''')
    n = 64
    torch.manual_seed(1)
    x = torch.randn(n).half()
    y = torch.randn(n).bfloat16()
    hout = torch.empty(n * 3, dtype=torch.float16)
    bout = torch.empty(n * 2, dtype=torch.bfloat16)
    fout = torch.empty(n * 3)
    k.halfops(1, 64, x, y, hout, bout, fout, n)
    h = hout.view(n, 3)
    assert torch.equal(h[:, 0], x + 2)  # a correctly rounded half add
    assert torch.allclose(h[:, 1].float(), (x * x - 2).float(), atol=2e-2)
    assert torch.allclose(h[:, 2].float(), (x.float() * 2 + 0.5), atol=2e-2)
    b = bout.view(n, 2)
    assert torch.equal(b[:, 0], (y.float() * 3).bfloat16())
    assert torch.equal(b[:, 1], y + y)
    f = fout.view(n, 3)
    assert torch.allclose(f[:, 0], (x * x).float(), atol=1e-2)
    assert torch.equal(f[:, 1], (x > 2).float())
    assert torch.allclose(f[:, 2], torch.exp(x.float()).half().float(), rtol=2e-3)
    # conversions round to nearest even, including subnormals and overflow, exactly as torch does
    vals = torch.tensor([0.0, -0.0, 1e-8, 6e-8, 3e-5, 65504.0, 65520.0, 1e6, -2.5, 0.1, float("inf"), 1.0009765625])
    k2 = load(r'''
#include <cuda_fp16.h>
#include <cuda_bf16.h>
extern "C" __global__ void conv(const float* x, __half* h, __nv_bfloat16* b, float* back, int n) {
    int i = threadIdx.x;
    if (i < n) { h[i] = __float2half(x[i]); b[i] = __float2bfloat16(x[i]); back[i] = __half2float(h[i]); }
}''')
    h = torch.empty(len(vals), dtype=torch.float16)
    b = torch.empty(len(vals), dtype=torch.bfloat16)
    back = torch.empty(len(vals))
    k2.conv(1, 32, vals, h, b, back, len(vals))
    assert torch.equal(h.view(torch.int16), vals.half().view(torch.int16))
    assert torch.equal(b.view(torch.int16), vals.bfloat16().view(torch.int16))
    assert torch.equal(back, vals.half().float())


def test_math_functions_and_intrinsics():
    k = load(r'''
extern "C" __global__ void mathk(const float* x, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = x[i];
    float* o = out + i * 14;
    o[0] = expf(v); o[1] = __expf(v); o[2] = logf(fabsf(v) + 1.0f); o[3] = __logf(fabsf(v) + 1.0f);
    o[4] = rsqrtf(fabsf(v) + 1.0f); o[5] = __fdividef(v, 3.0f); o[6] = fmaf(v, 2.0f, 1.0f); o[7] = erff(v);
    o[8] = tanhf(v); o[9] = __fmul_rn(v, v); o[10] = __saturatef(v); o[11] = fminf(v, 0.5f) + max(v, -0.5f);
    o[12] = (float)(min(3, (int)v) + max(-2, (int)v));
    o[13] = sqrtf(fabsf(v)) + __sinf(v) + cosf(v) + powf(fabsf(v), 1.5f);
}''')
    x = torch.linspace(-3, 3, 97)
    out = torch.empty(97 * 14)
    k.mathk(1, 128, x, out, 97)
    o = out.view(97, 14)
    a = x.abs()
    expected = [x.exp(), x.exp(), (a + 1).log(), (a + 1).log(), (a + 1).rsqrt(), x / 3, x * 2 + 1, torch.erf(x),
                x.tanh(), x * x, x.clamp(0, 1), x.clamp(max=0.5) + x.clamp(min=-0.5),
                (x.trunc().clamp(max=3) + x.trunc().clamp(min=-2)),
                a.sqrt() + x.sin() + x.cos() + a.pow(1.5)]
    for j, e in enumerate(expected):
        assert torch.allclose(o[:, j], e.float(), rtol=1e-5, atol=1e-5), j


def test_device_printf_is_captured():
    k = load(r'''
extern "C" __global__ void hello(int n) {
    if (threadIdx.x == 0) printf("block %d of %d, n=%d, pi=%.2f\n", blockIdx.x, gridDim.x, n, 3.14159f);
}''')
    k.hello(3, 32, 42)
    text = k._launcher.drain_output()
    assert sorted(text.splitlines()) == [f"block {b} of 3, n=42, pi=3.14" for b in range(3)]
    assert k._launcher.drain_output() == ""


def test_unsupported_features_name_themselves():
    for src, what in [
        (r'''extern "C" __global__ void k(int* x) {
    int v; asm volatile("mov.u32 %0, %%laneid;" : "=r"(v)); x[0] = v;
}''',
         "inline PTX"),
        (r'''#include <mma.h>
using namespace nvcuda;
extern "C" __global__ void k(float* x) {
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> c; wmma::fill_fragment(c, 0.0f);
}''',
         "WMMA"),
    ]:
        with pytest.raises(KernelRuntimeError) as info:
            load(src)
        assert info.value.detail == "unsupported"
        assert what in str(info.value) and "line" in str(info.value)


def test_divergent_syncthreads_is_a_deadlock_not_a_hang():
    k = load(r'''
extern "C" __global__ void divergent(float* x) {
    __shared__ float s[64];
    if (threadIdx.x < 16) {
        s[threadIdx.x] = 1.0f;
        __syncthreads();
    }
    __syncthreads();
    x[threadIdx.x] = s[0];
}
extern "C" __global__ void early_exit_ok(const float* x, float* y, int n) {
    __shared__ float s[64];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;                     // threads that returned count as arrived, as on a GPU
    s[threadIdx.x] = x[i];
    __syncthreads();
    y[i] = s[threadIdx.x] * 2.0f;
}
extern "C" __global__ void warp_wait(float* x) {
    float v = x[threadIdx.x];
    if (threadIdx.x % 32 < 16) v += __shfl_down_sync(0xffffffffu, v, 1);
    else __syncthreads();
    x[threadIdx.x] = v;
}''')
    x = torch.zeros(64)
    with pytest.raises(KernelRuntimeError) as info:
        k.divergent(1, 64, x)
    assert info.value.detail == "deadlock"
    msg = str(info.value)
    assert "divergent" in msg and "'divergent'" in msg and "line 6" in msg and "line 8" in msg
    x = torch.randn(100)
    y = torch.empty(100)
    k.early_exit_ok(2, 64, x, y, 100)
    assert torch.equal(y, x * 2)
    with pytest.raises(KernelRuntimeError) as info:
        k.warp_wait(1, 64, torch.zeros(64))
    assert info.value.detail == "deadlock" and "__shfl_down_sync" in str(info.value)


def test_out_of_bounds_write_names_kernel_line_and_index():
    k = load(r'''
extern "C" __global__ void relu(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n) {
        float v = x[i < n ? i : 0];
        y[i] = v > 0.0f ? v : 0.0f;
    }
}''')
    x = torch.randn(1000)
    y = torch.empty(1000)
    with pytest.raises(KernelRuntimeError) as info:
        k.relu(4, 256, x, y, 1000)
    assert info.value.detail == "out_of_bounds"
    msg = str(info.value)
    assert "'relu'" in msg and "element 1000" in msg and "'y'" in msg
    assert "line 6" in msg  # the guard page after `y` faults; the line comes from the module's line tables


def test_trap_and_assert_are_kernel_errors():
    k = load(r'''
extern "C" __global__ void checks(const int* x, int mode) {
    if (mode == 0 && threadIdx.x == 5) __trap();
    if (mode == 1) assert(x[threadIdx.x] < 3);
}''')
    x = torch.arange(32, dtype=torch.int32)
    for mode, text in [(0, "__trap"), (1, "assert")]:
        with pytest.raises(KernelRuntimeError) as info:
            k.checks(1, 32, x, mode)
        assert info.value.detail == "kernel_error" and text in str(info.value)


def test_shuffled_thread_order_exposes_a_missing_syncthreads():
    src = r'''
extern "C" __global__ void shift(const float* x, float* y) {
    __shared__ float s[256];
    int t = threadIdx.x;
    s[t] = x[blockIdx.x * blockDim.x + t];
    // missing __syncthreads(): in thread order this passes by luck
    y[blockIdx.x * blockDim.x + t] = t > 0 ? s[t - 1] : 0.0f;
}'''
    x = torch.randn(4 * 256)
    expected = torch.cat([torch.zeros(4, 1), x.view(4, 256)[:, :-1]], 1).flatten()
    y = torch.empty_like(x)
    load(src).shift(4, 256, x, y)
    assert torch.equal(y, expected)
    y.zero_()
    load(src, shuffle=True, seed=1).shift(4, 256, x, y)
    assert not torch.equal(y, expected)


def test_launcher_contract_and_cache():
    from leap_gym.backends.base import get_backend

    backend = get_backend("cpu")
    assert backend.name == "cpu" and backend.device == "cpu" and backend.size_preset == "cpu"
    assert not backend.reports_speedup and backend.availability().ok
    k = load(r'''extern "C" __global__ void fill(float* y, float v, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = v; }''')
    assert k._launcher.device == "cpu" and k._launcher.max_shared_mem == 48 * 1024
    y = torch.zeros(1000)
    k.fill(8, 128, y, math.pi, 1000)
    assert torch.allclose(y, torch.full((1000,), math.pi))


def test_wild_access_is_an_error_not_a_crash():
    # a stride of 2^47 bytes puts every stray address outside the (4-level paging) user address space: one that can land
    # in mapped memory would write into this test process (in the environment such kernels run in a worker)
    k = load(r'''
extern "C" __global__ void wild(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        long long j = (long long)i << 45;
        y[j] = x[i];
    }
}''')
    x = torch.randn(64)
    y = torch.empty(64)
    with pytest.raises(KernelRuntimeError) as info:
        k.wild(1, 64, x, y, 64)
    assert info.value.detail == "out_of_bounds"
    msg = str(info.value)
    assert "'wild'" in msg and "line 6" in msg and "no argument's buffer" in msg
    # the process and the runtime keep working
    k2 = load(r'''extern "C" __global__ void one(float* y) { y[threadIdx.x] = 1.0f; }''')
    k2.one(1, 32, y)
    assert (y[:32] == 1).all()


def test_cooperative_groups_block_and_tiles():
    k = load(r'''
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;
extern "C" __global__ void cg_sum(const float* x, float* out, int n) {
    __shared__ float partial[32];
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
    int i = blockIdx.x * blockDim.x + block.thread_rank();
    float v = i < n ? x[i] : 0.0f;
    v = cg::reduce(warp, v, cg::plus<float>());
    if (warp.thread_rank() == 0) partial[warp.meta_group_rank()] = v;
    block.sync();
    if (block.thread_rank() == 0) {
        float t = 0.0f;
        for (int w = 0; w < (int)warp.meta_group_size(); ++w) t += partial[w];
        atomicAdd(out, t);
    }
}''', needs_libcudacxx=True)
    x = torch.randn(5000)
    out = torch.zeros(1)
    k.cg_sum(20, 256, x, out, 5000)
    assert torch.allclose(out, x.sum().view(1), atol=1e-3)


def test_static_plus_dynamic_shared_memory_over_the_limit_is_a_launch_error():
    k = load(r'''
extern "C" __global__ void big(float* y) {
    __shared__ float tile[10000];                 // 40000 bytes of static shared memory
    extern __shared__ float extra[];
    tile[threadIdx.x] = 1.0f;
    extra[threadIdx.x] = 2.0f;
    __syncthreads();
    y[threadIdx.x] = tile[threadIdx.x ^ 1] + extra[threadIdx.x ^ 1];
}''')
    assert k._launcher.static_shared["big"] == 40000
    y = torch.zeros(32)
    k.big(1, 32, y, shared_mem=8000)
    assert (y == 3).all()
    with pytest.raises(KernelRuntimeError) as info:
        k.big(1, 32, y, shared_mem=10000)
    assert info.value.detail == "launch" and "too many resources" in str(info.value)


def test_shared_and_constant_declaration_forms():
    k = load(r'''
__constant__ float coeffs[4] = {1.0f, 2.0f, 3.0f, 4.0f};
extern __shared__ float file_scope_smem[];
template <typename T>
__device__ T load_through_shared(const T* x) {
    extern __shared__ __align__(16) unsigned char raw[];
    T* s = reinterpret_cast<T*>(raw);
    s[threadIdx.x] = x[threadIdx.x];
    __syncthreads();
    return s[(threadIdx.x + 1) % blockDim.x];
}
extern "C" __global__ void forms(const float* x, const double* xd, float* y, double* yd) {
    __shared__ __align__(16) float a[64];
    alignas(16) __shared__ float b[64];
    static __shared__ int c[64];
    a[threadIdx.x] = x[threadIdx.x];
    b[threadIdx.x] = 2.0f * x[threadIdx.x];
    c[threadIdx.x] = (int)threadIdx.x;
    __syncthreads();
    float v = a[63 - threadIdx.x] + b[threadIdx.x] + (float)c[threadIdx.x] * coeffs[threadIdx.x % 4];
    __syncthreads();
    file_scope_smem[threadIdx.x] = v;
    __syncthreads();
    y[threadIdx.x] = file_scope_smem[threadIdx.x];
    __syncthreads();
    yd[threadIdx.x] = load_through_shared<double>(xd);
}''')
    x = torch.randn(64)
    xd = torch.randn(64, dtype=torch.float64)
    y = torch.empty(64)
    yd = torch.empty(64, dtype=torch.float64)
    k.forms(1, 64, x, xd, y, yd, shared_mem=64 * 8)
    t = torch.arange(64)
    expected = x.flip(0) + 2 * x + t.float() * torch.tensor([1.0, 2.0, 3.0, 4.0])[t % 4]
    assert torch.allclose(y, expected)
    assert torch.equal(yd, xd.roll(-1))


def test_host_build_failure_names_the_missing_feature():
    with pytest.raises(KernelRuntimeError) as info:
        load(r'''
#include <cuda_fp8.h>
extern "C" __global__ void k(float* y) { __nv_fp8_e4m3 v(y[0]); y[0] = float(v); }''')
    assert info.value.detail == "unsupported" and "cuda_fp8.h" in str(info.value)


def test_warp_reductions_matches_and_shuffles_of_other_types():
    k = load(r'''
#include <cuda_fp16.h>
extern "C" __global__ void more_warp(const int* x, const double* d, const __half* h, int* out, double* dout,
                                     __half* hout) {
    int t = threadIdx.x;
    out[t * 4 + 0] = __reduce_add_sync(0xffffffffu, x[t]);
    out[t * 4 + 1] = __reduce_max_sync(0xffffffffu, x[t]);
    out[t * 4 + 2] = (int)__match_any_sync(0xffffffffu, x[t] % 3);
    out[t * 4 + 3] = (int)__reduce_min_sync(0xffffffffu, (unsigned)(x[t] + 1000));
    dout[t] = __shfl_xor_sync(0xffffffffu, d[t], 16);
    hout[t] = __shfl_down_sync(0xffffffffu, h[t], 1);
}''')
    x = torch.randint(-50, 50, (32,), dtype=torch.int32)
    d = torch.randn(32, dtype=torch.float64)
    h = torch.randn(32).half()
    out = torch.zeros(128, dtype=torch.int32)
    dout = torch.empty(32, dtype=torch.float64)
    hout = torch.empty(32, dtype=torch.float16)
    k.more_warp(1, 32, x, d, h, out, dout, hout)
    o = out.view(32, 4)
    assert (o[:, 0] == x.sum()).all() and (o[:, 1] == x.max()).all() and (o[:, 3] == x.min() + 1000).all()
    for lane in range(32):
        expected = sum(1 << j for j in range(32) if _c_mod(int(x[j]), 3) == _c_mod(int(x[lane]), 3))
        assert int(o[lane, 2]) & 0xFFFFFFFF == expected
    assert torch.equal(dout, d.roll(-16))
    assert torch.equal(hout[:31], h[1:]) and hout[31] == h[31]


def _c_mod(a: int, b: int) -> int:
    """C's %, which keeps the sign of the dividend."""
    return int(math.fmod(a, b))


def test_thread_stack_overflow_is_a_kernel_error():
    k = load(r'''
__device__ __noinline__ int deep(int n, volatile float* sink) {
    volatile float pad[512];
    pad[n % 512] = (float)n;
    int r = n == 0 ? 0 : deep(n - 1, sink);
    sink[0] = pad[n % 512];      // the frame stays live across the call
    return r + 1;
}
extern "C" __global__ void recurse(float* sink, int* out, int n) {
    out[threadIdx.x] = deep(n, sink);
}''')
    sink = torch.zeros(1)
    out = torch.zeros(32, dtype=torch.int32)
    k.recurse(1, 32, sink, out, 5)
    assert (out == 6).all()
    with pytest.raises(KernelRuntimeError) as info:
        k.recurse(1, 32, sink, out, 100000)
    assert info.value.detail == "kernel_error" and "stack overflow" in str(info.value)
