"""Scale and shift: y = x * scale + bias with scalar scale and bias, elementwise."""

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 4096
DIM = 4096
SCALE = 1.75
BIAS = -0.25


class Model(nn.Module):
    def __init__(self, scale: float = 1.75, bias: float = -0.25):
        super().__init__()
        self.scale = float(scale)
        self.bias = float(bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale + self.bias


def get_inputs():
    return [torch.randn(BATCH, DIM) * 3.0]


def get_init_inputs():
    return [SCALE, BIAS]


LEAP_TASK = dict(
    level=1,
    tags=['elementwise'],
    dtype="float32",
    atol=1e-05,
    rtol=1e-05,
    target_speedup=1.0,
    sizes={"cpu": {"BATCH": 16, "DIM": 300}, "gpu": {"BATCH": 4096, "DIM": 4096}},
    wrapper_signature=('extern "C" __global__ void scale_bias_kernel(const float* x, float* y, int n, float scale, '
                       'float bias)'),
    wrapper='''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, scale=1.75, bias=-0.25):
        super().__init__()
        self.scale = float(scale)
        self.bias = float(bias)

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        threads = 256
        blocks = min((n + threads - 1) // threads, 65535)
        kernels.scale_bias_kernel(blocks, threads, x, y, n, self.scale, self.bias)
        return y
''',
)
