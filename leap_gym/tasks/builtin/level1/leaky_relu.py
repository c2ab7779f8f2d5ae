"""Leaky ReLU: y = x if x > 0 else negative_slope * x, elementwise."""

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 4096
DIM = 4096
NEGATIVE_SLOPE = 0.01


class Model(nn.Module):
    def __init__(self, negative_slope: float = 0.01):
        super().__init__()
        self.negative_slope = float(negative_slope)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.leaky_relu(x, negative_slope=self.negative_slope)


def get_inputs():
    return [torch.randn(BATCH, DIM) * 3.0]


def get_init_inputs():
    return [NEGATIVE_SLOPE]


LEAP_TASK = dict(
    level=1,
    tags=['elementwise', 'activation'],
    dtype="float32",
    atol=1e-06,
    rtol=1e-06,
    target_speedup=1.0,
    sizes={"cpu": {"BATCH": 16, "DIM": 300}, "gpu": {"BATCH": 4096, "DIM": 4096}},
    wrapper_signature=('extern "C" __global__ void leaky_relu_kernel(const float* x, float* y, int n, '
                       'float negative_slope)'),
    wrapper='''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, negative_slope=0.01):
        super().__init__()
        self.negative_slope = float(negative_slope)

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        threads = 256
        blocks = min((n + threads - 1) // threads, 65535)
        kernels.leaky_relu_kernel(blocks, threads, x, y, n, self.negative_slope)
        return y
''',
)
