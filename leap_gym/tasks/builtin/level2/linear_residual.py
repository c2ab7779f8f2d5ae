"""Residual linear layer: y = x @ W.T + b + x (square weight)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 2048
FEATURES = 4096


class Model(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.linear = nn.Linear(features, features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x) + x


def get_inputs():
    return [torch.randn(BATCH, FEATURES)]


def get_init_inputs():
    return [FEATURES]


LEAP_TASK = dict(
    level=2,
    tags=["matmul", "fused", "residual"],
    dtype="float32",
    atol=2e-4,
    rtol=2e-4,
    target_speedup=0.5,
    sizes={"cpu": {"BATCH": 50, "FEATURES": 90},
           "gpu": {"BATCH": 2048, "FEATURES": 4096}},
    wrapper_signature=('extern "C" __global__ void linear_kernel(const float* x, const float* w, const float* bias, '
                       'const float* residual, float* y, int m, int n, int k, int act, int has_bias, '
                       'int has_residual)'),
    wrapper='''
import torch
import torch.nn as nn

TILE = 16
ACT_NONE = 0


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.linear = nn.Linear(features, features)

    def forward(self, x):
        x = x.contiguous()
        m, k = x.shape
        n = self.linear.weight.shape[0]
        y = torch.empty(m, n, dtype=x.dtype, device=x.device)
        grid = ((n + TILE - 1) // TILE, (m + TILE - 1) // TILE)
        kernels.linear_kernel(grid, (TILE, TILE), x, self.linear.weight, self.linear.bias, x, y, m, n, k,
                              ACT_NONE, 1, 1)
        return y
''',
)
