"""Tiny scale (adversarial corpus): y = 1e-5 * x, with a tolerance that is loose for outputs this small."""

import torch
import torch.nn as nn

N = 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 1e-5


def get_inputs():
    return [torch.randn(N)]


def get_init_inputs():
    return []


LEAP_TASK = dict(
    level=1,
    tags=["elementwise", "adversarial"],
    dtype="float32",
    atol=1e-4,
    rtol=1e-4,
    sizes={"cpu": {"N": 4096}, "gpu": {"N": 1 << 20}},
)
