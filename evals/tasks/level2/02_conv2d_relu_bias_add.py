"""Conv2d, then ReLU, then addition of a learned per-channel bias."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """y = ReLU(conv(x)) + bias[c]."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)
        self.bias = nn.Parameter(0.1 * torch.randn(out_channels, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, in_channels, H, W) -> (batch, out_channels, H, W)."""
        return torch.relu(self.conv(x)) + self.bias


batch_size = 64
in_channels = 32
out_channels = 64
height = 128
width = 128
kernel_size = 3

CPU_SHAPES = {"batch_size": 2, "in_channels": 3, "out_channels": 4, "height": 8, "width": 8}


def get_inputs():
    x = torch.randn(batch_size, in_channels, height, width)
    return [x]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
