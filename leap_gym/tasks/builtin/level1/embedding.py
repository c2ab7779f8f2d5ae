"""Embedding lookup (gather of rows): y[b, s, :] = table[idx[b, s], :] with int64 indices."""

import torch
import torch.nn as nn

BATCH = 64
SEQ = 512
VOCAB = 32000
DIM = 512


class Model(nn.Module):
    def __init__(self, vocab: int, dim: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.embed(idx)


def get_inputs():
    return [torch.randint(0, VOCAB, (BATCH, SEQ))]


def get_init_inputs():
    return [VOCAB, DIM]


LEAP_TASK = dict(
    level=1,
    tags=["gather", "memory-bound", "index"],
    dtype="float32",
    atol=0.0,
    rtol=0.0,
    target_speedup=1.0,
    sizes={"cpu": {"BATCH": 4, "SEQ": 20, "VOCAB": 100, "DIM": 96},
           "gpu": {"BATCH": 64, "SEQ": 512, "VOCAB": 32000, "DIM": 512}},
    wrapper_signature=('extern "C" __global__ void embedding_kernel(const long long* idx, const float* table, '
                       'float* y, int num_idx, int dim)'),
    wrapper='''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, vocab, dim):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)

    def forward(self, idx):
        idx = idx.contiguous()
        dim = self.embed.weight.shape[1]
        y = torch.empty(*idx.shape, dim, dtype=self.embed.weight.dtype, device=idx.device)
        num_idx = idx.numel()
        kernels.embedding_kernel(num_idx, 128, idx, self.embed.weight, y, num_idx, dim)
        return y
''',
)
