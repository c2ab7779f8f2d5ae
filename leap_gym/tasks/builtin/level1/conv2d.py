"""2-D convolution (nn.Conv2d, 3x3 kernel, stride 1, padding 1, with bias) over NCHW input."""

import torch
import torch.nn as nn

BATCH = 16
IN_CHANNELS = 64
OUT_CHANNELS = 128
HEIGHT = 64
WIDTH = 64


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def get_inputs():
    return [torch.randn(BATCH, IN_CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [IN_CHANNELS, OUT_CHANNELS]


LEAP_TASK = dict(
    level=1,
    tags=["convolution", "stencil"],
    dtype="float32",
    atol=5e-3,
    rtol=5e-3,
    target_speedup=0.5,
    sizes={"cpu": {"BATCH": 2, "IN_CHANNELS": 4, "OUT_CHANNELS": 8, "HEIGHT": 20, "WIDTH": 18},
           "gpu": {"BATCH": 16, "IN_CHANNELS": 64, "OUT_CHANNELS": 128, "HEIGHT": 64, "WIDTH": 64}},
    wrapper_signature=('extern "C" __global__ void conv2d_3x3_kernel(const float* x, const float* weight, '
                       'const float* bias, float* y, int batch, int cin, int cout, int h, int w)'),
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
        y = torch.empty(batch, cout, h, w, dtype=x.dtype, device=x.device)
        grid = ((w + 15) // 16, (h + 15) // 16, batch * cout)
        kernels.conv2d_3x3_kernel(grid, (16, 16), x, self.conv.weight, self.conv.bias, y, batch, cin, cout, h, w)
        return y
''',
)
