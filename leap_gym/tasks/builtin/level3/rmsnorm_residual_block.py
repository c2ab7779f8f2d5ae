"""Pre-norm residual block: y = x + proj(RMSNorm(x)), with RMSNorm(x) = x / sqrt(mean(x^2) + eps) * weight."""

import torch
import torch.nn as nn

BATCH = 4096
DIM = 2048


class Model(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.norm_weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps) * self.norm_weight
        return x + self.proj(h)


def get_inputs():
    return [torch.randn(BATCH, DIM)]


def get_init_inputs():
    return [DIM]


LEAP_TASK = dict(
    level=3,
    tags=["normalization", "matmul", "residual", "block"],
    dtype="float32",
    atol=2e-4,
    rtol=2e-4,
    target_speedup=0.5,
    sizes={"cpu": {"BATCH": 40, "DIM": 96}, "gpu": {"BATCH": 4096, "DIM": 2048}},
)
