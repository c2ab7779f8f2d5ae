"""RMS normalisation over the last dimension: y = x / sqrt(mean(x^2) + eps) * weight."""

import torch
import torch.nn as nn

BATCH = 4096
DIM = 4096


class Model(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rms = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return x * rms * self.weight


def get_inputs():
    return [torch.randn(BATCH, DIM)]


def get_init_inputs():
    return [DIM]


LEAP_TASK = dict(
    level=1,
    tags=["normalization", "reduction", "warp"],
    dtype="float32",
    atol=1e-5,
    rtol=1e-4,
    target_speedup=1.0,
    sizes={"cpu": {"BATCH": 24, "DIM": 700}, "gpu": {"BATCH": 4096, "DIM": 4096}},
    wrapper_signature=('extern "C" __global__ void rmsnorm_kernel(const float* x, const float* weight, float* y, '
                       'int rows, int cols, float eps)'),
    wrapper='''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))

    def forward(self, x):
        x = x.contiguous()
        cols = x.shape[-1]
        rows = x.numel() // cols
        y = torch.empty_like(x)
        warps_per_block = 4
        kernels.rmsnorm_kernel((rows + warps_per_block - 1) // warps_per_block, 32 * warps_per_block,
                               x, self.weight, y, rows, cols, self.eps)
        return y
''',
)
