"""Batched matrix multiplication: C[i] = A[i] @ B[i], A of shape (BATCH, M, K), B of shape (BATCH, K, N)."""

import torch
import torch.nn as nn

BATCH = 64
M = 512
K = 256
N = 512


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.bmm(a, b)


def get_inputs():
    return [torch.randn(BATCH, M, K), torch.randn(BATCH, K, N)]


def get_init_inputs():
    return []


LEAP_TASK = dict(
    level=1,
    tags=["matmul", "batched", "tiling", "shared-memory"],
    dtype="float32",
    atol=1e-3,
    rtol=1e-3,
    target_speedup=0.5,
    sizes={"cpu": {"BATCH": 4, "M": 33, "K": 40, "N": 27}, "gpu": {"BATCH": 64, "M": 512, "K": 256, "N": 512}},
    wrapper_signature=('extern "C" __global__ void bmm_kernel(const float* a, const float* b, float* c, int batch, '
                       'int m, int n, int k)'),
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
        batch, m, k = a.shape
        n = b.shape[2]
        c = torch.empty(batch, m, n, dtype=a.dtype, device=a.device)
        grid = ((n + TILE - 1) // TILE, (m + TILE - 1) // TILE, batch)
        kernels.bmm_kernel(grid, (TILE, TILE), a, b, c, batch, m, n, k)
        return c
''',
)
