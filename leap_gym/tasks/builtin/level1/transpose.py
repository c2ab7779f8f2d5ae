"""Matrix transpose into a new contiguous tensor: y = x.T, x of shape (M, N)."""

import torch
import torch.nn as nn

M = 4096
N = 8192


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.transpose(0, 1).contiguous()


def get_inputs():
    return [torch.randn(M, N)]


def get_init_inputs():
    return []


LEAP_TASK = dict(
    level=1,
    tags=["memory-bound", "transpose", "shared-memory"],
    dtype="float32",
    atol=0.0,
    rtol=0.0,
    target_speedup=1.0,
    sizes={"cpu": {"M": 70, "N": 90}, "gpu": {"M": 4096, "N": 8192}},
    wrapper_signature='extern "C" __global__ void transpose_kernel(const float* x, float* y, int rows, int cols)',
    wrapper='''
import torch
import torch.nn as nn

TILE = 32
ROWS_PER_PASS = 8


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        rows, cols = x.shape
        y = torch.empty(cols, rows, dtype=x.dtype, device=x.device)
        grid = ((cols + TILE - 1) // TILE, (rows + TILE - 1) // TILE)
        kernels.transpose_kernel(grid, (TILE, ROWS_PER_PASS), x, y, rows, cols)
        return y
''',
)
