"""Kernel signature parsing and argument marshalling of the `kernels` handle."""

import ctypes

import pytest
import torch

from leap_gym.evaluation.kernels import (
    Kernels,
    LaunchError,
    check_launch,
    marshal_args,
    normalize_dims,
    parse_kernel_signatures,
)

SOURCE = r'''
#include <cuda_fp16.h>
// extern "C" __global__ void commented_out(int x) {}
template <typename T> __device__ T twice(T v) { return v + v; }
extern "C" __global__ void __launch_bounds__(256) axpy(const float* __restrict__ x, float *y, float a, int n) {}
extern "C" {
__global__ void half_copy(const __half* in, __half* out, unsigned int n, long long offset) {}
}
extern "C" __global__ void noargs(void) {}
'''


def test_finds_extern_c_kernels_and_types():
    sigs = parse_kernel_signatures(SOURCE)
    assert set(sigs) == {"axpy", "half_copy", "noargs"}
    x, y, a, n = sigs["axpy"].params
    assert (x.name, x.type, x.pointer, x.const) == ("x", "float", True, True)
    assert (y.type, y.pointer, y.const) == ("float", True, False)
    assert (a.type, a.pointer) == ("float", False) and n.type == "int"
    assert [p.type for p in sigs["half_copy"].params] == ["__half", "__half", "unsigned int", "long long"]
    assert sigs["noargs"].params == ()


@pytest.mark.parametrize("decl", ["float** p", "float& r", "float a[4]", "MyStruct s"])
def test_unsupported_parameters_are_refused_with_a_reason(decl):
    with pytest.raises(ValueError, match="kernel 'k'|parameter"):
        parse_kernel_signatures(f'extern "C" __global__ void k({decl}) {{}}')


def test_marshal_checks_types_and_counts():
    sig = parse_kernel_signatures(SOURCE)["axpy"]
    x, y = torch.ones(8), torch.zeros(8)
    packed = marshal_args(sig, (x, y, 2.0, 8), "cpu")
    assert packed[0].value == x.data_ptr() and isinstance(packed[2], ctypes.c_float)
    assert isinstance(packed[3], ctypes.c_int32) and packed[3].value == 8
    with pytest.raises(LaunchError, match="takes 4 arguments"):
        marshal_args(sig, (x, y, 2.0), "cpu")
    with pytest.raises(LaunchError, match="expects a float32 tensor, got float16"):
        marshal_args(sig, (x.half(), y, 2.0, 8), "cpu")
    with pytest.raises(LaunchError, match="expects a Python int"):
        marshal_args(sig, (x, y, 2.0, 8.5), "cpu")
    with pytest.raises(LaunchError, match="does not fit"):
        marshal_args(sig, (x, y, 2.0, 2**40), "cpu")
    with pytest.raises(LaunchError, match="not contiguous"):
        marshal_args(sig, (torch.ones(4, 4).t(), y, 2.0, 8), "cpu")
    with pytest.raises(LaunchError, match="expects a tensor"):
        marshal_args(sig, (1.0, y, 2.0, 8), "cpu")


def test_launch_limits_match_cuda():
    assert normalize_dims(5, "grid") == (5, 1, 1)
    assert normalize_dims((2, 3), "grid") == (2, 3, 1)
    with pytest.raises(LaunchError, match="ints"):
        normalize_dims((2.0,), "grid")
    with pytest.raises(LaunchError, match="invalid configuration argument"):
        check_launch("k", (1, 1, 1), (2048, 1, 1), 0, 48 * 1024)
    with pytest.raises(LaunchError, match="invalid configuration argument"):
        check_launch("k", (1, 70000, 1), (32, 1, 1), 0, 48 * 1024)
    with pytest.raises(LaunchError, match="shared memory"):
        check_launch("k", (1, 1, 1), (32, 1, 1), 100_000, 48 * 1024)
    check_launch("k", (2**31 - 1, 65535, 65535), (1024, 1, 1), 48 * 1024, 48 * 1024)


class RecordingLauncher:
    device = "cpu"
    max_shared_mem = 48 * 1024

    def __init__(self):
        self.calls = []

    def launch(self, name, grid, block, shared_mem, args, tensors):
        self.calls.append((name, grid, block, shared_mem, len(args)))


def test_handle_counts_launches_and_names_unknown_kernels():
    launcher = RecordingLauncher()
    kernels = Kernels(parse_kernel_signatures(SOURCE), launcher)
    kernels.axpy(2, 128, torch.ones(4), torch.ones(4), 1.0, 4)
    kernels.axpy((2,), (128,), torch.ones(4), torch.ones(4), 1.0, 4, shared_mem=64)
    assert kernels.launches["axpy"] == 2
    assert launcher.calls[1] == ("axpy", (2, 1, 1), (128, 1, 1), 64, 4)
    with pytest.raises(LaunchError, match="no kernel named 'axpi'.*axpy"):
        kernels.axpi(1, 1)


def test_deeply_nested_extern_c_blocks_parse_in_linear_time():
    nested = 'extern "C" {' * 4000 + "__global__ void k(int a) {}" + "}" * 4000
    assert list(parse_kernel_signatures(nested)) == ["k"]
    many = "".join(f'extern "C" {{ __global__ void k{i}(float* x) {{}} }}\n' for i in range(3000))
    assert len(parse_kernel_signatures(many)) == 3000
    assert parse_kernel_signatures("__global__ void not_extern(float* x) {}") == {}
