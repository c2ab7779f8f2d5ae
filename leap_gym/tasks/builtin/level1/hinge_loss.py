"""Hinge loss for binary labels in {-1, +1}: a scalar mean(clamp(1 - pred * label, min=0))."""

import torch
import torch.nn as nn

BATCH = 1 << 24


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, pred: torch.Tensor, label: torch.Tensor) -> torch.Tensor:
        return torch.clamp(1.0 - pred * label, min=0.0).mean()


def get_inputs():
    return [torch.randn(BATCH), torch.randint(0, 2, (BATCH,)).float() * 2.0 - 1.0]


def get_init_inputs():
    return []


LEAP_TASK = dict(
    level=1,
    tags=["loss", "reduction", "atomics"],
    dtype="float32",
    atol=1e-5,
    rtol=1e-4,
    target_speedup=1.0,
    sizes={"cpu": {"BATCH": 20000}, "gpu": {"BATCH": 1 << 24}},
    wrapper_signature=('extern "C" __global__ void hinge_loss_kernel(const float* pred, const float* label, '
                       'float* out, int n)'),
    wrapper='''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, pred, label):
        pred = pred.contiguous()
        label = label.contiguous()
        n = pred.numel()
        out = torch.zeros((), dtype=pred.dtype, device=pred.device)
        threads = 256
        blocks = max(1, min((n + threads - 1) // threads, 2048))
        kernels.hinge_loss_kernel(blocks, threads, pred, label, out, n)
        return out
''',
)
