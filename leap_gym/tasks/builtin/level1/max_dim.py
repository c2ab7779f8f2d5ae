"""Row maximum: y[b] = max_d x[b, d], a reduction over the last dimension."""

import torch
import torch.nn as nn

BATCH = 8192
DIM = 2048


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.max(x, dim=1).values


def get_inputs():
    return [torch.randn(BATCH, DIM)]


def get_init_inputs():
    return []


LEAP_TASK = dict(
    level=1,
    tags=["reduction", "warp"],
    dtype="float32",
    atol=0.0,
    rtol=0.0,
    target_speedup=1.0,
    sizes={"cpu": {"BATCH": 45, "DIM": 500}, "gpu": {"BATCH": 8192, "DIM": 2048}},
    wrapper_signature='extern "C" __global__ void max_rows_kernel(const float* x, float* y, int rows, int cols)',
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
        warps_per_block = 8
        kernels.max_rows_kernel((rows + warps_per_block - 1) // warps_per_block, 32 * warps_per_block,
                                x, y, rows, cols)
        return y
''',
)
