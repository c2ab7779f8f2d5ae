"""Per-channel bias, tanh, then a scalar scale on (batch, channels, length): y = tanh(x + bias[c]) * scale."""

import torch
import torch.nn as nn

BATCH = 64
CHANNELS = 256
LENGTH = 1024
SCALE = 1.5


class Model(nn.Module):
    def __init__(self, channels: int, scale: float):
        super().__init__()
        self.bias = nn.Parameter(0.5 * torch.randn(channels, 1))
        self.scale = float(scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x + self.bias) * self.scale


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, LENGTH)]


def get_init_inputs():
    return [CHANNELS, SCALE]


LEAP_TASK = dict(
    level=2,
    tags=["elementwise", "fused", "broadcast", "activation"],
    dtype="float32",
    atol=1e-5,
    rtol=1e-5,
    target_speedup=1.5,
    sizes={"cpu": {"BATCH": 3, "CHANNELS": 10, "LENGTH": 150}, "gpu": {"BATCH": 64, "CHANNELS": 256, "LENGTH": 1024}},
    wrapper_signature=('extern "C" __global__ void bias_tanh_scale_kernel(const float* x, const float* bias, float* y, '
                       'int n, int channels, int length, float scale)'),
    wrapper='''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, channels, scale):
        super().__init__()
        self.bias = nn.Parameter(0.5 * torch.randn(channels, 1))
        self.scale = float(scale)

    def forward(self, x):
        x = x.contiguous()
        n = x.numel()
        channels, length = x.shape[1], x.shape[2]
        y = torch.empty_like(x)
        kernels.bias_tanh_scale_kernel((n + 255) // 256, 256, x, self.bias, y, n, channels, length, self.scale)
        return y
''',
)
