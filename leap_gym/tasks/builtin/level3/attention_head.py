"""Single attention head: q, k, v = x Wq, x Wk, x Wv (no bias); y = softmax(q k^T / sqrt(d)) v."""

import math

import torch
import torch.nn as nn

BATCH = 16
SEQ = 1024
EMBED = 1024
HEAD_DIM = 128


class Model(nn.Module):
    def __init__(self, embed: int, head_dim: int):
        super().__init__()
        self.q = nn.Linear(embed, head_dim, bias=False)
        self.k = nn.Linear(embed, head_dim, bias=False)
        self.v = nn.Linear(embed, head_dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.q(x), self.k(x), self.v(x)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        return torch.softmax(scores, dim=-1) @ v


def get_inputs():
    return [torch.randn(BATCH, SEQ, EMBED)]


def get_init_inputs():
    return [EMBED, HEAD_DIM]


LEAP_TASK = dict(
    level=3,
    tags=["attention", "softmax", "matmul", "block"],
    dtype="float32",
    atol=2e-4,
    rtol=2e-4,
    target_speedup=0.5,
    sizes={"cpu": {"BATCH": 2, "SEQ": 20, "EMBED": 48, "HEAD_DIM": 16},
           "gpu": {"BATCH": 16, "SEQ": 1024, "EMBED": 1024, "HEAD_DIM": 128}},
)
