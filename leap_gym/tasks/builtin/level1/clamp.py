"""Clamp: y = clamp(x, lo, hi), elementwise."""

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 4096
DIM = 4096
LO = -0.5
HI = 0.5


class Model(nn.Module):
    def __init__(self, lo: float = -0.5, hi: float = 0.5):
        super().__init__()
        self.lo = float(lo)
        self.hi = float(hi)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.clamp(x, min=self.lo, max=self.hi)


def get_inputs():
    return [torch.randn(BATCH, DIM) * 3.0]


def get_init_inputs():
    return [LO, HI]


LEAP_TASK = dict(
    level=1,
    tags=['elementwise'],
    dtype="float32",
    atol=1e-06,
    rtol=1e-06,
    target_speedup=1.0,
    sizes={"cpu": {"BATCH": 16, "DIM": 300}, "gpu": {"BATCH": 4096, "DIM": 4096}},
    wrapper_signature='extern "C" __global__ void clamp_kernel(const float* x, float* y, int n, float lo, float hi)',
    wrapper='''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, lo=-0.5, hi=0.5):
        super().__init__()
        self.lo = float(lo)
        self.hi = float(hi)

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        threads = 256
        blocks = min((n + threads - 1) // threads, 65535)
        kernels.clamp_kernel(blocks, threads, x, y, n, self.lo, self.hi)
        return y
''',
)
