"""Mean squared error loss: a scalar mean((pred - target)^2) over all elements."""

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 4096
DIM = 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(pred, target)


def get_inputs():
    return [torch.randn(BATCH, DIM), torch.randn(BATCH, DIM)]


def get_init_inputs():
    return []


LEAP_TASK = dict(
    level=1,
    tags=["loss", "reduction"],
    dtype="float32",
    atol=1e-5,
    rtol=1e-4,
    target_speedup=1.0,
    sizes={"cpu": {"BATCH": 16, "DIM": 1000}, "gpu": {"BATCH": 4096, "DIM": 4096}},
    wrapper_signature=('extern "C" __global__ void mse_loss_kernel(const float* pred, const float* target, '
                       'float* partial, unsigned int* counter, float* out, int n)'),
    wrapper='''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, pred, target):
        pred = pred.contiguous()
        target = target.contiguous()
        n = pred.numel()
        threads = 256
        blocks = max(1, min((n + threads - 1) // threads, 1024))
        partial = torch.empty(blocks, dtype=pred.dtype, device=pred.device)
        counter = torch.zeros(1, dtype=torch.int32, device=pred.device)
        out = torch.empty((), dtype=pred.dtype, device=pred.device)
        kernels.mse_loss_kernel(blocks, threads, pred, target, partial, counter, out, n)
        return out
''',
)
