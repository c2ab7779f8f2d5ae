"""Cross-entropy loss over class logits (batch, classes) with int64 targets, averaged over the batch."""

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 8192
CLASSES = 1000


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits, target)


def get_inputs():
    return [torch.randn(BATCH, CLASSES) * 3.0, torch.randint(0, CLASSES, (BATCH,))]


def get_init_inputs():
    return []


LEAP_TASK = dict(
    level=1,
    tags=["loss", "softmax", "reduction", "atomics"],
    dtype="float32",
    atol=1e-5,
    rtol=1e-4,
    target_speedup=1.0,
    sizes={"cpu": {"BATCH": 40, "CLASSES": 300}, "gpu": {"BATCH": 8192, "CLASSES": 1000}},
    wrapper_signature=('extern "C" __global__ void ce_rows_kernel(const float* logits, const long long* target, '
                       'float* out, int rows, int classes)'),
    wrapper='''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits, target):
        logits = logits.contiguous()
        target = target.contiguous()
        rows, classes = logits.shape
        out = torch.zeros((), dtype=logits.dtype, device=logits.device)  # the kernel accumulates into it
        kernels.ce_rows_kernel(rows, 128, logits, target, out, rows, classes)
        return out
''',
)
