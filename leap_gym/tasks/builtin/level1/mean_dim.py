"""Mean over the middle dimension of a 3-D tensor: y[b, c] = mean_r x[b, r, c]."""

import torch
import torch.nn as nn

BATCH = 32
ROWS = 512
COLS = 1024


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.mean(x, dim=1)


def get_inputs():
    return [torch.randn(BATCH, ROWS, COLS)]


def get_init_inputs():
    return []


LEAP_TASK = dict(
    level=1,
    tags=["reduction", "strided"],
    dtype="float32",
    atol=1e-5,
    rtol=1e-4,
    target_speedup=1.0,
    sizes={"cpu": {"BATCH": 4, "ROWS": 37, "COLS": 100}, "gpu": {"BATCH": 32, "ROWS": 512, "COLS": 1024}},
    wrapper_signature=('extern "C" __global__ void mean_dim1_kernel(const float* x, float* y, int batch, int rows, '
                       'int cols)'),
    wrapper='''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        batch, rows, cols = x.shape
        y = torch.empty(batch, cols, dtype=x.dtype, device=x.device)
        threads = 256
        kernels.mean_dim1_kernel(((cols + threads - 1) // threads, batch), threads, x, y, batch, rows, cols)
        return y
''',
)
