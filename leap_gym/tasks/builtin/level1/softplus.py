"""Softplus: y = log(1 + exp(x)), linear above the threshold 20 as in torch, elementwise."""

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 4096
DIM = 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.softplus(x)


def get_inputs():
    return [torch.randn(BATCH, DIM) * 3.0]


def get_init_inputs():
    return []


LEAP_TASK = dict(
    level=1,
    tags=['elementwise', 'activation'],
    dtype="float32",
    atol=1e-05,
    rtol=1e-05,
    target_speedup=1.0,
    sizes={"cpu": {"BATCH": 16, "DIM": 300}, "gpu": {"BATCH": 4096, "DIM": 4096}},
    wrapper_signature='extern "C" __global__ void softplus_kernel(const float* x, float* y, int n)',
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
        kernels.softplus_kernel(blocks, threads, x, y, n)
        return y
''',
)
