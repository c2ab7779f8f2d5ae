"""Linear layer followed by a row log-sum-exp: y[b] = log sum_j exp(x[b] . W[j] + bias[j])."""

import torch
import torch.nn as nn

BATCH = 2048
IN_FEATURES = 4096
OUT_FEATURES = 4096


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.logsumexp(self.linear(x), dim=1)


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES]


LEAP_TASK = dict(
    level=2,
    tags=["matmul", "fused", "reduction"],
    dtype="float32",
    atol=1e-4,
    rtol=1e-4,
    target_speedup=0.5,
    sizes={"cpu": {"BATCH": 40, "IN_FEATURES": 100, "OUT_FEATURES": 75},
           "gpu": {"BATCH": 2048, "IN_FEATURES": 4096, "OUT_FEATURES": 4096}},
)
