"""Matrix-vector product: y = A @ x, A of shape (M, K), x of shape (K,)."""

import torch
import torch.nn as nn

M = 8192
K = 8192


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return torch.mv(a, x)


def get_inputs():
    return [torch.randn(M, K), torch.randn(K)]


def get_init_inputs():
    return []


LEAP_TASK = dict(
    level=1,
    tags=["matmul", "gemv", "warp", "memory-bound"],
    dtype="float32",
    atol=1e-3,
    rtol=1e-4,
    target_speedup=1.0,
    sizes={"cpu": {"M": 100, "K": 300}, "gpu": {"M": 8192, "K": 8192}},
    wrapper_signature=('extern "C" __global__ void matvec_kernel(const float* a, const float* x, float* y, int m, '
                       'int k)'),
    wrapper='''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, x):
        a = a.contiguous()
        x = x.contiguous()
        m, k = a.shape
        y = torch.empty(m, dtype=a.dtype, device=a.device)
        warps_per_block = 8
        kernels.matvec_kernel((m + warps_per_block - 1) // warps_per_block, 32 * warps_per_block, a, x, y, m, k)
        return y
''',
)
