"""GEGLU gate: split the last dimension in halves a | b and return gelu(a) * b."""

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 4096
HIDDEN = 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = x.chunk(2, dim=-1)
        return F.gelu(a) * b


def get_inputs():
    return [torch.randn(BATCH, 2 * HIDDEN)]


def get_init_inputs():
    return []


LEAP_TASK = dict(
    level=2,
    tags=["elementwise", "fused", "activation", "gating"],
    dtype="float32",
    atol=1e-5,
    rtol=1e-5,
    target_speedup=1.5,
    sizes={"cpu": {"BATCH": 20, "HIDDEN": 300}, "gpu": {"BATCH": 4096, "HIDDEN": 4096}},
    wrapper_signature='extern "C" __global__ void geglu_kernel(const float* x, float* y, int rows, int hidden)',
    wrapper='''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        hidden = x.shape[-1] // 2
        rows = x.numel() // x.shape[-1]
        y = torch.empty(*x.shape[:-1], hidden, dtype=x.dtype, device=x.device)
        grid = ((hidden + 255) // 256, rows)
        kernels.geglu_kernel(grid, 256, x, y, rows, hidden)
        return y
''',
)
