"""Conv2d (valid padding), hardswish, then ReLU."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """y = ReLU(hardswish(conv(x)))."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, in_channels, H, W) -> (batch, out_channels, H - k + 1, W - k + 1)."""
        return torch.relu(F.hardswish(self.conv(x)))


batch_size = 64
in_channels = 16
out_channels = 32
height = 128
width = 128
kernel_size = 3

CPU_SHAPES = {"batch_size": 2, "in_channels": 3, "out_channels": 4, "height": 10, "width": 10}


def get_inputs():
    x = torch.randn(batch_size, in_channels, height, width)
    return [x]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
