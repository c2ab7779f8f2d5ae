"""HardTanh: y = min(max(x, min_val), max_val), elementwise."""

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 4096
DIM = 4096
MIN_VAL = -1.0
MAX_VAL = 1.0


class Model(nn.Module):
    def __init__(self, min_val: float = -1.0, max_val: float = 1.0):
        super().__init__()
        self.min_val = float(min_val)
        self.max_val = float(max_val)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.hardtanh(x, min_val=self.min_val, max_val=self.max_val)


def get_inputs():
    return [torch.randn(BATCH, DIM) * 3.0]


def get_init_inputs():
    return [MIN_VAL, MAX_VAL]


LEAP_TASK = dict(
    level=1,
    tags=['elementwise', 'activation'],
    dtype="float32",
    atol=1e-06,
    rtol=1e-06,
    target_speedup=1.0,
    sizes={"cpu": {"BATCH": 16, "DIM": 300}, "gpu": {"BATCH": 4096, "DIM": 4096}},
    wrapper_signature=('extern "C" __global__ void hardtanh_kernel(const float* x, float* y, int n, float min_val, '
                       'float max_val)'),
    wrapper='''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, min_val=-1.0, max_val=1.0):
        super().__init__()
        self.min_val = float(min_val)
        self.max_val = float(max_val)

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        threads = 256
        blocks = min((n + threads - 1) // threads, 65535)
        kernels.hardtanh_kernel(blocks, threads, x, y, n, self.min_val, self.max_val)
        return y
''',
)
