"""Three-layer MLP with SiLU activations: y = fc3(silu(fc2(silu(fc1(x)))))."""

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 1024
IN_FEATURES = 1024
HIDDEN = 2048
OUT_FEATURES = 512


class Model(nn.Module):
    def __init__(self, in_features: int, hidden: int, out_features: int):
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc3(F.silu(self.fc2(F.silu(self.fc1(x)))))


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, HIDDEN, OUT_FEATURES]


LEAP_TASK = dict(
    level=3,
    tags=["mlp", "matmul", "block"],
    dtype="float32",
    atol=2e-4,
    rtol=2e-4,
    target_speedup=0.5,
    sizes={"cpu": {"BATCH": 24, "IN_FEATURES": 48, "HIDDEN": 80, "OUT_FEATURES": 30},
           "gpu": {"BATCH": 1024, "IN_FEATURES": 1024, "HIDDEN": 2048, "OUT_FEATURES": 512}},
)
