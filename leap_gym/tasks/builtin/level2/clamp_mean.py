"""Scale, clamp, then a row mean: y[b] = mean_d clamp(x[b, d] * scale, lo, hi)."""

import torch
import torch.nn as nn

BATCH = 8192
DIM = 2048
SCALE = 2.0
LO = -1.0
HI = 1.5


class Model(nn.Module):
    def __init__(self, scale: float, lo: float, hi: float):
        super().__init__()
        self.scale, self.lo, self.hi = float(scale), float(lo), float(hi)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.clamp(x * self.scale, min=self.lo, max=self.hi).mean(dim=-1)


def get_inputs():
    return [torch.randn(BATCH, DIM)]


def get_init_inputs():
    return [SCALE, LO, HI]


LEAP_TASK = dict(
    level=2,
    tags=["elementwise", "fused", "reduction", "warp"],
    dtype="float32",
    atol=1e-5,
    rtol=1e-4,
    target_speedup=1.5,
    sizes={"cpu": {"BATCH": 50, "DIM": 400}, "gpu": {"BATCH": 8192, "DIM": 2048}},
    wrapper_signature=('extern "C" __global__ void clamp_mean_kernel(const float* x, float* y, int rows, int cols, '
                       'float scale, float lo, float hi)'),
    wrapper='''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, scale, lo, hi):
        super().__init__()
        self.scale, self.lo, self.hi = float(scale), float(lo), float(hi)

    def forward(self, x):
        x = x.contiguous()
        cols = x.shape[-1]
        rows = x.numel() // cols
        y = torch.empty(x.shape[:-1], dtype=x.dtype, device=x.device)
        warps_per_block = 4
        kernels.clamp_mean_kernel((rows + warps_per_block - 1) // warps_per_block, 32 * warps_per_block, x, y, rows,
                                  cols, self.scale, self.lo, self.hi)
        return y
''',
)
