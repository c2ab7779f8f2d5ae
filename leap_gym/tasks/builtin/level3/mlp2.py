"""Two-layer MLP: y = fc2(relu(fc1(x)))."""

import torch
import torch.nn as nn

BATCH = 1024
IN_FEATURES = 2048
HIDDEN = 4096
OUT_FEATURES = 1024


class Model(nn.Module):
    def __init__(self, in_features: int, hidden: int, out_features: int):
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden)
        self.fc2 = nn.Linear(hidden, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


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
    sizes={"cpu": {"BATCH": 32, "IN_FEATURES": 64, "HIDDEN": 96, "OUT_FEATURES": 40},
           "gpu": {"BATCH": 1024, "IN_FEATURES": 2048, "HIDDEN": 4096, "OUT_FEATURES": 1024}},
)
