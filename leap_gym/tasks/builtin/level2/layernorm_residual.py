"""Residual add then layer norm (post-norm transformer style): y = LayerNorm(x + residual)."""

import torch
import torch.nn as nn

BATCH = 4096
DIM = 4096


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        with torch.no_grad():
            self.norm.weight.normal_(1.0, 0.2)
            self.norm.bias.normal_(0.0, 0.2)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.norm(x + residual)


def get_inputs():
    return [torch.randn(BATCH, DIM), torch.randn(BATCH, DIM) + 1.0]


def get_init_inputs():
    return [DIM]


LEAP_TASK = dict(
    level=2,
    tags=["normalization", "fused", "residual", "reduction"],
    dtype="float32",
    atol=1e-4,
    rtol=1e-4,
    target_speedup=1.5,
    sizes={"cpu": {"BATCH": 24, "DIM": 700}, "gpu": {"BATCH": 4096, "DIM": 4096}},
    wrapper_signature=('extern "C" __global__ void add_layernorm_kernel(const float* x, const float* residual, '
                       'const float* weight, const float* bias, float* y, int rows, int cols, float eps)'),
    wrapper='''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        with torch.no_grad():
            self.norm.weight.normal_(1.0, 0.2)
            self.norm.bias.normal_(0.0, 0.2)

    def forward(self, x, residual):
        x = x.contiguous()
        residual = residual.contiguous()
        cols = x.shape[-1]
        rows = x.numel() // cols
        y = torch.empty_like(x)
        kernels.add_layernorm_kernel(rows, 256, x, residual, self.norm.weight, self.norm.bias, y, rows, cols,
                                     self.norm.eps)
        return y
''',
)
