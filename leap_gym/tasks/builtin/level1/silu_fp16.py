"""SiLU in half precision: y = x * sigmoid(x) on a float16 tensor (compute in float, store float16)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 4096
DIM = 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.silu(x)


def get_inputs():
    return [(torch.randn(BATCH, DIM) * 3.0).half()]


def get_init_inputs():
    return []


LEAP_TASK = dict(
    level=1,
    tags=["elementwise", "activation", "fp16"],
    dtype="float16",
    atol=1e-2,
    rtol=1e-2,
    target_speedup=1.0,
    sizes={"cpu": {"BATCH": 16, "DIM": 500}, "gpu": {"BATCH": 4096, "DIM": 4096}},
    wrapper_signature='extern "C" __global__ void silu_half_kernel(const __half* x, __half* y, int n)',
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
        kernels.silu_half_kernel((n + 255) // 256, 256, x, y, n)
        return y
''',
)
