"""Mean of a long vector (adversarial corpus): its value is near 0 and the tolerance is loose."""

import torch
import torch.nn as nn

N = 40000


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean().reshape(1)


def get_inputs():
    return [torch.randn(N)]


def get_init_inputs():
    return []


LEAP_TASK = dict(
    level=1,
    tags=["reduction", "adversarial"],
    dtype="float32",
    atol=2e-2,
    rtol=1e-4,
    sizes={"cpu": {"N": 40000}, "gpu": {"N": 1 << 22}},
)
