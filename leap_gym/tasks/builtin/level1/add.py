"""Elementwise addition of two tensors of the same shape: y = a + b."""

import torch
import torch.nn as nn

BATCH = 4096
DIM = 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a + b


def get_inputs():
    return [torch.randn(BATCH, DIM), torch.randn(BATCH, DIM)]


def get_init_inputs():
    return []


LEAP_TASK = dict(
    level=1,
    tags=["elementwise", "binary"],
    dtype="float32",
    atol=1e-6,
    rtol=1e-6,
    target_speedup=1.0,
    sizes={"cpu": {"BATCH": 8, "DIM": 999}, "gpu": {"BATCH": 4096, "DIM": 4096}},
    wrapper_signature='extern "C" __global__ void add_kernel(const float* a, const float* b, float* y, int n)',
    wrapper='''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        a = a.contiguous()
        b = b.contiguous()
        y = torch.empty_like(a)
        n = a.numel()
        kernels.add_kernel(((n + 255) // 256,), (256,), a, b, y, n)
        return y
''',
)
