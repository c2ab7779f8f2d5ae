"""SwiGLU feed-forward (LLaMA style, no biases): y = w2(silu(w1(x)) * w3(x))."""

import torch
import torch.nn as nn
import torch.nn.functional as F

TOKENS = 2048
DIM = 1024
HIDDEN = 2816


class Model(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


def get_inputs():
    return [torch.randn(TOKENS, DIM)]


def get_init_inputs():
    return [DIM, HIDDEN]


LEAP_TASK = dict(
    level=3,
    tags=["transformer", "mlp", "gating", "matmul", "block"],
    dtype="float32",
    atol=2e-4,
    rtol=2e-4,
    target_speedup=0.5,
    sizes={"cpu": {"TOKENS": 32, "DIM": 64, "HIDDEN": 88}, "gpu": {"TOKENS": 2048, "DIM": 1024, "HIDDEN": 2816}},
)
