"""2-D max pooling over NCHW input: kernel 3, stride 2, padding 1 (padding never wins the max)."""

import torch
import torch.nn as nn

BATCH = 32
CHANNELS = 64
HEIGHT = 128
WIDTH = 128
KERNEL_SIZE = 3
STRIDE = 2
PADDING = 1


class Model(nn.Module):
    def __init__(self, kernel_size: int, stride: int, padding: int):
        super().__init__()
        self.pool = nn.MaxPool2d(kernel_size=kernel_size, stride=stride, padding=padding)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [KERNEL_SIZE, STRIDE, PADDING]


LEAP_TASK = dict(
    level=1,
    tags=["pooling", "stencil"],
    dtype="float32",
    atol=0.0,
    rtol=0.0,
    target_speedup=1.0,
    sizes={"cpu": {"BATCH": 2, "CHANNELS": 3, "HEIGHT": 25, "WIDTH": 30},
           "gpu": {"BATCH": 32, "CHANNELS": 64, "HEIGHT": 128, "WIDTH": 128}},
    wrapper_signature=('extern "C" __global__ void maxpool2d_kernel(const float* x, float* y, int planes, int h, '
                       'int w, int oh, int ow, int k, int stride, int pad)'),
    wrapper='''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, kernel_size, stride, padding):
        super().__init__()
        self.k, self.stride, self.pad = kernel_size, stride, padding

    def forward(self, x):
        x = x.contiguous()
        b, c, h, w = x.shape
        oh = (h + 2 * self.pad - self.k) // self.stride + 1
        ow = (w + 2 * self.pad - self.k) // self.stride + 1
        y = torch.empty(b, c, oh, ow, dtype=x.dtype, device=x.device)
        total = b * c * oh * ow
        kernels.maxpool2d_kernel((total + 255) // 256, 256, x, y, b * c, h, w, oh, ow, self.k, self.stride, self.pad)
        return y
''',
)
