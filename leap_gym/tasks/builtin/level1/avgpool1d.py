"""1-D average pooling over (batch, channels, length): kernel 4, stride 2, padding 1, padded zeros counted."""

import torch
import torch.nn as nn

BATCH = 64
CHANNELS = 128
LENGTH = 8192
KERNEL_SIZE = 4
STRIDE = 2
PADDING = 1


class Model(nn.Module):
    def __init__(self, kernel_size: int, stride: int, padding: int):
        super().__init__()
        self.pool = nn.AvgPool1d(kernel_size=kernel_size, stride=stride, padding=padding)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, LENGTH)]


def get_init_inputs():
    return [KERNEL_SIZE, STRIDE, PADDING]


LEAP_TASK = dict(
    level=1,
    tags=["pooling", "stencil"],
    dtype="float32",
    atol=1e-6,
    rtol=1e-5,
    target_speedup=1.0,
    sizes={"cpu": {"BATCH": 2, "CHANNELS": 5, "LENGTH": 301},
           "gpu": {"BATCH": 64, "CHANNELS": 128, "LENGTH": 8192}},
    wrapper_signature=('extern "C" __global__ void avgpool1d_kernel(const float* x, float* y, int rows, int length, '
                       'int out_length, int k, int stride, int pad)'),
    wrapper='''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, kernel_size, stride, padding):
        super().__init__()
        self.k, self.stride, self.pad = kernel_size, stride, padding

    def forward(self, x):
        x = x.contiguous()
        b, c, length = x.shape
        out_length = (length + 2 * self.pad - self.k) // self.stride + 1
        y = torch.empty(b, c, out_length, dtype=x.dtype, device=x.device)
        total = b * c * out_length
        kernels.avgpool1d_kernel((total + 255) // 256, 256, x, y, b * c, length, out_length, self.k, self.stride,
                                 self.pad)
        return y
''',
)
