"""A small CNN classifier: conv3x3(padding 1) -> ReLU -> 2x2 max pool -> flatten -> linear."""

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 256
IN_CHANNELS = 3
CHANNELS = 32
HEIGHT = 64
WIDTH = 64
CLASSES = 10


class Model(nn.Module):
    def __init__(self, in_channels: int, channels: int, height: int, width: int, classes: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, channels, kernel_size=3, padding=1)
        self.fc = nn.Linear(channels * (height // 2) * (width // 2), classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.max_pool2d(torch.relu(self.conv(x)), kernel_size=2, stride=2)
        return self.fc(torch.flatten(h, 1))


def get_inputs():
    return [torch.randn(BATCH, IN_CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [IN_CHANNELS, CHANNELS, HEIGHT, WIDTH, CLASSES]


LEAP_TASK = dict(
    level=3,
    tags=["convolution", "pooling", "matmul", "block"],
    dtype="float32",
    atol=5e-3,
    rtol=5e-3,
    target_speedup=0.5,
    sizes={"cpu": {"BATCH": 4, "IN_CHANNELS": 3, "CHANNELS": 8, "HEIGHT": 16, "WIDTH": 14, "CLASSES": 10},
           "gpu": {"BATCH": 256, "IN_CHANNELS": 3, "CHANNELS": 32, "HEIGHT": 64, "WIDTH": 64, "CLASSES": 10}},
)
