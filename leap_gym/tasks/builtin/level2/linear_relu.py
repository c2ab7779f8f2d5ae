"""Linear layer followed by ReLU: y = relu(x @ W.T + b)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 2048
IN_FEATURES = 4096
OUT_FEATURES = 4096


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES]


LEAP_TASK = dict(
    level=2,
    tags=["matmul", "fused", "activation"],
    dtype="float32",
    atol=2e-4,
    rtol=2e-4,
    target_speedup=0.5,
    sizes={"cpu": {"BATCH": 50, "IN_FEATURES": 100, "OUT_FEATURES": 70},
           "gpu": {"BATCH": 2048, "IN_FEATURES": 4096, "OUT_FEATURES": 4096}},
    wrapper_signature=('extern "C" __global__ void linear_kernel(const float* x, const float* w, const float* bias, '
                       'const float* residual, float* y, int m, int n, int k, int act, int has_bias, '
                       'int has_residual)'),
    wrapper='''
import torch
import torch.nn as nn

TILE = 16
ACT_RELU = 1


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        x = x.contiguous()
        m, k = x.shape
        n = self.linear.weight.shape[0]
        y = torch.empty(m, n, dtype=x.dtype, device=x.device)
        grid = ((n + TILE - 1) // TILE, (m + TILE - 1) // TILE)
        # no residual: x stands in for the unused pointer
        kernels.linear_kernel(grid, (TILE, TILE), x, self.linear.weight, self.linear.bias, x, y, m, n, k,
                              ACT_RELU, 1, 0)
        return y
''',
)
