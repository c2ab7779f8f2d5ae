"""Residual add then RMS norm: h = x + residual; y = h / sqrt(mean(h^2) + eps) * weight."""

import torch
import torch.nn as nn

BATCH = 4096
DIM = 4096


class Model(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        h = x + residual
        return h * torch.rsqrt(h.pow(2).mean(dim=-1, keepdim=True) + self.eps) * self.weight


def get_inputs():
    return [torch.randn(BATCH, DIM), torch.randn(BATCH, DIM)]


def get_init_inputs():
    return [DIM]


LEAP_TASK = dict(
    level=2,
    tags=["normalization", "fused", "residual", "reduction"],
    dtype="float32",
    atol=1e-5,
    rtol=1e-4,
    target_speedup=1.5,
    sizes={"cpu": {"BATCH": 24, "DIM": 700}, "gpu": {"BATCH": 4096, "DIM": 4096}},
    wrapper_signature=('extern "C" __global__ void add_rmsnorm_kernel(const float* x, const float* residual, '
                       'const float* weight, float* y, int rows, int cols, float eps)'),
    wrapper='''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))

    def forward(self, x, residual):
        x = x.contiguous()
        residual = residual.contiguous()
        cols = x.shape[-1]
        rows = x.numel() // cols
        y = torch.empty_like(x)
        kernels.add_rmsnorm_kernel(rows, 256, x, residual, self.weight, y, rows, cols, self.eps)
        return y
''',
)
