"""ReLU: y = max(x, 0), elementwise."""

import torch
import torch.nn as nn

N = 1 << 22


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


def get_inputs():
    return [torch.randn(N)]


def get_init_inputs():
    return []


LEAP_TASK = dict(
    level=1,
    tags=["elementwise", "activation"],
    dtype="float32",
    atol=1e-5,
    rtol=1e-5,
    target_speedup=1.0,
    sizes={"cpu": {"N": 4096}, "gpu": {"N": 1 << 24}},
    wrapper_signature='extern "C" __global__ void relu_kernel(const float* x, float* y, int n)',
    wrapper='''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        y = torch.empty_like(x)
        n = x.numel()
        kernels.relu_kernel(((n + 255) // 256,), (256,), x, y, n)
        return y
''',
)
