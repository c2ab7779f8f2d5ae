"""Pre-norm transformer feed-forward block: y = x + fc2(gelu(fc1(LayerNorm(x))))."""

import torch
import torch.nn as nn
import torch.nn.functional as F

TOKENS = 2048
DIM = 1024
HIDDEN = 4096


class Model(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


def get_inputs():
    return [torch.randn(TOKENS, DIM)]


def get_init_inputs():
    return [DIM, HIDDEN]


LEAP_TASK = dict(
    level=3,
    tags=["transformer", "mlp", "normalization", "matmul", "block"],
    dtype="float32",
    atol=2e-4,
    rtol=2e-4,
    target_speedup=0.5,
    sizes={"cpu": {"TOKENS": 32, "DIM": 64, "HIDDEN": 128}, "gpu": {"TOKENS": 2048, "DIM": 1024, "HIDDEN": 4096}},
)
