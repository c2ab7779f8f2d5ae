"""1-D convolution (nn.Conv1d with bias, stride 1, no padding) over (batch, in_channels, length)."""

import torch
import torch.nn as nn

BATCH = 32
IN_CHANNELS = 64
OUT_CHANNELS = 128
LENGTH = 4096
KERNEL_SIZE = 7


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
        super().__init__()
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def get_inputs():
    return [torch.randn(BATCH, IN_CHANNELS, LENGTH)]


def get_init_inputs():
    return [IN_CHANNELS, OUT_CHANNELS, KERNEL_SIZE]


LEAP_TASK = dict(
    level=1,
    tags=["convolution"],
    dtype="float32",
    atol=5e-3,
    rtol=5e-3,
    target_speedup=0.5,
    sizes={"cpu": {"BATCH": 2, "IN_CHANNELS": 8, "OUT_CHANNELS": 16, "LENGTH": 200, "KERNEL_SIZE": 5},
           "gpu": {"BATCH": 32, "IN_CHANNELS": 64, "OUT_CHANNELS": 128, "LENGTH": 4096, "KERNEL_SIZE": 7}},
    wrapper_signature=('extern "C" __global__ void conv1d_kernel(const float* x, const float* weight, '
                       'const float* bias, float* y, int batch, int cin, int cout, int length, int k, int out_length)'),
    wrapper='''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size)

    def forward(self, x):
        x = x.contiguous()
        batch, cin, length = x.shape
        cout, _, k = self.conv.weight.shape
        out_length = length - k + 1
        y = torch.empty(batch, cout, out_length, dtype=x.dtype, device=x.device)
        grid = ((out_length + 127) // 128, cout, batch)
        kernels.conv1d_kernel(grid, 128, x, self.conv.weight, self.conv.bias, y, batch, cin, cout, length, k,
                              out_length)
        return y
''',
)
