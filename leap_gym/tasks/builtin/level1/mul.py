"""Broadcast product: y = a * b with a of shape (BATCH, DIM) and b of shape (DIM,) scaling every row."""

import torch
import torch.nn as nn

BATCH = 4096
DIM = 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a * b


def get_inputs():
    return [torch.randn(BATCH, DIM), torch.randn(DIM)]


def get_init_inputs():
    return []


LEAP_TASK = dict(
    level=1,
    tags=["elementwise", "binary", "broadcast"],
    dtype="float32",
    atol=1e-6,
    rtol=1e-6,
    target_speedup=1.0,
    sizes={"cpu": {"BATCH": 8, "DIM": 999}, "gpu": {"BATCH": 4096, "DIM": 4096}},
    wrapper_signature='extern "C" __global__ void mul_kernel(const float* a, const float* b, float* y, int n, int dim)',
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
        dim = b.numel()
        kernels.mul_kernel(((n + 255) // 256,), (256,), a, b, y, n, dim)
        return y
''',
)
