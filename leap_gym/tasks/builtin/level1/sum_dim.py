"""Row sum: y[b] = sum_d x[b, d], a reduction over the last dimension."""

import torch
import torch.nn as nn

BATCH = 4096
DIM = 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sum(x, dim=1)


def get_inputs():
    return [torch.randn(BATCH, DIM)]


def get_init_inputs():
    return []


LEAP_TASK = dict(
    level=1,
    tags=["reduction"],
    dtype="float32",
    atol=1e-3,
    rtol=1e-4,
    target_speedup=1.0,
    sizes={"cpu": {"BATCH": 24, "DIM": 1000}, "gpu": {"BATCH": 4096, "DIM": 4096}},
    wrapper_signature='extern "C" __global__ void sum_rows_kernel(const float* x, float* y, int rows, int cols)',
    wrapper='''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        rows, cols = x.shape
        y = torch.empty(rows, dtype=x.dtype, device=x.device)
        kernels.sum_rows_kernel(rows, 256, x, y, rows, cols)
        return y
''',
)
