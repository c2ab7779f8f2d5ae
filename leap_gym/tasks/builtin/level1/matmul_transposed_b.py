"""Matrix multiplication with a transposed right operand: C = A @ B.T, A of shape (M, K), B of shape (N, K)."""

import torch
import torch.nn as nn

M = 4096
K = 2048
N = 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b.T)


def get_inputs():
    return [torch.randn(M, K), torch.randn(N, K)]


def get_init_inputs():
    return []


LEAP_TASK = dict(
    level=1,
    tags=["matmul", "tiling", "shared-memory", "transpose"],
    dtype="float32",
    atol=1e-2,
    rtol=1e-3,
    target_speedup=0.5,
    sizes={"cpu": {"M": 70, "K": 90, "N": 50}, "gpu": {"M": 4096, "K": 2048, "N": 4096}},
    wrapper_signature=('extern "C" __global__ void matmul_tb_kernel(const float* a, const float* b, float* c, '
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
        m, k = a.shape
        n = b.shape[0]
        c = torch.empty(m, n, dtype=a.dtype, device=a.device)
        grid = ((n + TILE - 1) // TILE, (m + TILE - 1) // TILE)
        kernels.matmul_tb_kernel(grid, (TILE, TILE), a, b, c, m, n, k)
        return c
''',
)
