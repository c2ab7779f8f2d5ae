"""Row softmax on bfloat16 input and output (accumulate in float32), over the last dimension."""

import torch
import torch.nn as nn

BATCH = 4096
DIM = 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [(torch.randn(BATCH, DIM) * 2.0).bfloat16()]


def get_init_inputs():
    return []


LEAP_TASK = dict(
    level=1,
    tags=["softmax", "reduction", "bf16"],
    dtype="bfloat16",
    atol=1e-4,
    rtol=2e-2,
    target_speedup=1.0,
    sizes={"cpu": {"BATCH": 20, "DIM": 900}, "gpu": {"BATCH": 4096, "DIM": 4096}},
    wrapper_signature=('extern "C" __global__ void softmax_bf16_kernel(const __nv_bfloat16* x, __nv_bfloat16* y, '
                       'int rows, int cols)'),
    wrapper='''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        cols = x.shape[-1]
        rows = x.numel() // cols
        y = torch.empty_like(x)
        kernels.softmax_bf16_kernel(rows, 256, x, y, rows, cols)
        return y
''',
)
