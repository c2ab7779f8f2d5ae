"""Square matrix multiplication: C = A @ B with A and B of shape (N, N)."""

import torch
import torch.nn as nn

N = 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(N, N), torch.randn(N, N)]


def get_init_inputs():
    return []


LEAP_TASK = dict(
    level=1,
    tags=["matmul", "tiling", "shared-memory"],
    dtype="float32",
    atol=1e-2,
    rtol=1e-3,
    target_speedup=0.5,
    sizes={"cpu": {"N": 72}, "gpu": {"N": 4096}},
    wrapper_signature='extern "C" __global__ void matmul_kernel(const float* a, const float* b, float* c, int n)',
    wrapper='''
import torch
import torch.nn as nn

TILE = 16


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        a = a.contiguous()
        b = b.contiguous()
        n = a.shape[0]
        c = torch.empty(n, n, dtype=a.dtype, device=a.device)
        grid = ((n + TILE - 1) // TILE, (n + TILE - 1) // TILE)
        kernels.matmul_kernel(grid, (TILE, TILE), a, b, c, n)
        return c
''',
)
