"""One LSTM cell step (nn.LSTMCell): gates from x and h, then the new hidden and cell states (h1, c1)."""

import torch
import torch.nn as nn

BATCH = 1024
INPUT = 1024
HIDDEN = 1024


class Model(nn.Module):
    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        self.cell = nn.LSTMCell(input_size, hidden_size)

    def forward(self, x: torch.Tensor, h: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h1, c1 = self.cell(x, (h, c))
        return h1, c1


def get_inputs():
    return [torch.randn(BATCH, INPUT), torch.randn(BATCH, HIDDEN), torch.randn(BATCH, HIDDEN)]


def get_init_inputs():
    return [INPUT, HIDDEN]


LEAP_TASK = dict(
    level=3,
    tags=["recurrent", "matmul", "gating", "block"],
    dtype="float32",
    atol=2e-4,
    rtol=2e-4,
    target_speedup=0.5,
    sizes={"cpu": {"BATCH": 24, "INPUT": 40, "HIDDEN": 36}, "gpu": {"BATCH": 1024, "INPUT": 1024, "HIDDEN": 1024}},
)
