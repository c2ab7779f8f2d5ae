"""3x3 convolution (padding 1, with bias), ReLU, then 2x2 max pooling with stride 2, over NCHW input."""

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 16
IN_CHANNELS = 32
OUT_CHANNELS = 64
HEIGHT = 128
WIDTH = 128


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.max_pool2d(torch.relu(self.conv(x)), kernel_size=2, stride=2)


def get_inputs():
    return [torch.randn(BATCH, IN_CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [IN_CHANNELS, OUT_CHANNELS]


LEAP_TASK = dict(
    level=2,
    tags=["convolution", "fused", "pooling", "activation"],
    dtype="float32",
    atol=5e-3,
    rtol=5e-3,
    target_speedup=0.5,
    sizes={"cpu": {"BATCH": 2, "IN_CHANNELS": 3, "OUT_CHANNELS": 6, "HEIGHT": 22, "WIDTH": 17},
           "gpu": {"BATCH": 16, "IN_CHANNELS": 32, "OUT_CHANNELS": 64, "HEIGHT": 128, "WIDTH": 128}},
    wrapper_signature=('extern "C" __global__ void conv_relu_pool_kernel(const float* x, const float* weight, '
                       'const float* bias, float* y, int batch, int cin, int cout, int h, int w, int ph, int pw)'),
    wrapper='''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1)

    def forward(self, x):
        x = x.contiguous()
        batch, cin, h, w = x.shape
        cout = self.conv.weight.shape[0]
        ph, pw = h // 2, w // 2
        y = torch.empty(batch, cout, ph, pw, dtype=x.dtype, device=x.device)
        total = batch * cout * ph * pw
        kernels.conv_relu_pool_kernel((total + 127) // 128, 128, x, self.conv.weight, self.conv.bias, y,
                                      batch, cin, cout, h, w, ph, pw)
        return y
''',
)
