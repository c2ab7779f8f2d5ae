"""Inclusive prefix sum along the last dimension: y[b, d] = sum_{k <= d} x[b, k]."""

import torch
import torch.nn as nn

BATCH = 4096
DIM = 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(x, dim=1)


def get_inputs():
    return [torch.randn(BATCH, DIM)]


def get_init_inputs():
    return []


LEAP_TASK = dict(
    level=1,
    tags=["scan", "shared-memory"],
    dtype="float32",
    atol=1e-3,
    rtol=1e-4,
    target_speedup=1.0,
    sizes={"cpu": {"BATCH": 12, "DIM": 1500}, "gpu": {"BATCH": 4096, "DIM": 4096}},
    wrapper_signature='extern "C" __global__ void cumsum_rows_kernel(const float* x, float* y, int rows, int cols)',
    wrapper='''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        rows, cols = x.shape
        y = torch.empty_like(x)
        kernels.cumsum_rows_kernel(rows, 256, x, y, rows, cols)
        return y
''',
)
