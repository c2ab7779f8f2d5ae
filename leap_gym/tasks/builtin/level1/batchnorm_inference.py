"""Inference-mode batch norm over NCHW input: y = (x - running_mean) / sqrt(running_var + eps) * weight + bias."""

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 32
CHANNELS = 64
HEIGHT = 128
WIDTH = 128


class Model(nn.Module):
    def __init__(self, channels: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.2 * torch.randn(channels))
        self.bias = nn.Parameter(0.2 * torch.randn(channels))
        self.register_buffer("running_mean", 0.5 * torch.randn(channels))
        self.register_buffer("running_var", 0.5 + torch.rand(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                            training=False, eps=self.eps)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [CHANNELS]


LEAP_TASK = dict(
    level=1,
    tags=["normalization", "elementwise", "broadcast"],
    dtype="float32",
    atol=1e-5,
    rtol=1e-5,
    target_speedup=1.0,
    sizes={"cpu": {"BATCH": 2, "CHANNELS": 6, "HEIGHT": 17, "WIDTH": 23},
           "gpu": {"BATCH": 32, "CHANNELS": 64, "HEIGHT": 128, "WIDTH": 128}},
    wrapper_signature=('extern "C" __global__ void batchnorm_infer_kernel(const float* x, const float* mean, '
                       'const float* var, const float* weight, const float* bias, float* y, int n, int channels, '
                       'int hw, float eps)'),
    wrapper='''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, channels, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.2 * torch.randn(channels))
        self.bias = nn.Parameter(0.2 * torch.randn(channels))
        self.register_buffer("running_mean", 0.5 * torch.randn(channels))
        self.register_buffer("running_var", 0.5 + torch.rand(channels))

    def forward(self, x):
        x = x.contiguous()
        n = x.numel()
        channels = x.shape[1]
        hw = x.shape[2] * x.shape[3]
        y = torch.empty_like(x)
        kernels.batchnorm_infer_kernel((n + 255) // 256, 256, x, self.running_mean, self.running_var,
                                       self.weight, self.bias, y, n, channels, hw, self.eps)
        return y
''',
)
