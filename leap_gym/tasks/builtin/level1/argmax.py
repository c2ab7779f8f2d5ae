"""Row argmax: y[b] = argmax_d x[b, d] (int64; the first index on ties, as torch)."""

import torch
import torch.nn as nn

BATCH = 4096
DIM = 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.argmax(x, dim=1)


def get_inputs():
    return [torch.randn(BATCH, DIM)]


def get_init_inputs():
    return []


LEAP_TASK = dict(
    level=1,
    tags=["reduction", "index"],
    dtype="float32",
    atol=0.0,
    rtol=0.0,
    target_speedup=1.0,
    sizes={"cpu": {"BATCH": 30, "DIM": 777}, "gpu": {"BATCH": 4096, "DIM": 4096}},
    wrapper_signature='extern "C" __global__ void argmax_rows_kernel(const float* x, long long* y, int rows, int cols)',
    wrapper='''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        rows, cols = x.shape
        y = torch.empty(rows, dtype=torch.int64, device=x.device)
        kernels.argmax_rows_kernel(rows, 256, x, y, rows, cols)
        return y
''',
)
