"""Hyperbolic tangent: y = tanh(x), elementwise."""

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 4096
DIM = 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x)


def get_inputs():
    return [torch.randn(BATCH, DIM) * 3.0]


def get_init_inputs():
    return []


LEAP_TASK = dict(
    level=1,
    tags=['elementwise', 'activation'],
    dtype="float32",
    # torch's own float32 tanh on a CPU has been measured 9e-5 away from the correctly rounded value
    # (CI saw 30% of a reference's values outside 1e-5 of tanhf's): the bar covers the reference's error
    atol=1e-04,
    rtol=1e-04,
    target_speedup=1.0,
    sizes={"cpu": {"BATCH": 16, "DIM": 300}, "gpu": {"BATCH": 4096, "DIM": 4096}},
    wrapper_signature='extern "C" __global__ void tanh_kernel(const float* x, float* y, int n)',
    wrapper='''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        threads = 256
        blocks = min((n + threads - 1) // threads, 65535)
        kernels.tanh_kernel(blocks, threads, x, y, n)
        return y
''',
)
