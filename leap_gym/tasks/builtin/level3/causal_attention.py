"""Causal scaled dot-product attention over (batch, heads, seq, dim): softmax(q k^T / sqrt(dim) + mask) v."""

import math

import torch
import torch.nn as nn

BATCH = 8
HEADS = 16
SEQ = 1024
DIM = 64


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        seq = q.shape[-2]
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        mask = torch.triu(torch.ones(seq, seq, dtype=torch.bool, device=q.device), diagonal=1)
        scores = scores.masked_fill(mask, float("-inf"))
        return torch.softmax(scores, dim=-1) @ v


def get_inputs():
    return [torch.randn(BATCH, HEADS, SEQ, DIM), torch.randn(BATCH, HEADS, SEQ, DIM),
            torch.randn(BATCH, HEADS, SEQ, DIM)]


def get_init_inputs():
    return []


LEAP_TASK = dict(
    level=3,
    tags=["attention", "softmax", "causal", "block"],
    dtype="float32",
    atol=1e-4,
    rtol=1e-4,
    target_speedup=0.5,
    sizes={"cpu": {"BATCH": 1, "HEADS": 2, "SEQ": 30, "DIM": 16},
           "gpu": {"BATCH": 8, "HEADS": 16, "SEQ": 1024, "DIM": 64}},
    wrapper_signature=('extern "C" __global__ void attention_kernel(const float* q, const float* k, const float* v, '
                       'float* out, int heads, int seq, int dim, float scale, int causal)'),
    wrapper='''
import math

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q, k, v):
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        batch, heads, seq, dim = q.shape
        out = torch.empty_like(q)
        kernels.attention_kernel((seq, batch * heads), 128, q, k, v, out, batch * heads, seq, dim,
                                 1.0 / math.sqrt(dim), 1, shared_mem=seq * 4)
        return out
''',
)
