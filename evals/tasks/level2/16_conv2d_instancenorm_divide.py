"""Conv2d, InstanceNorm2d (no affine), then division by a constant."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """y = InstanceNorm(conv(x)) / divisor."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, divisor: float):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.norm = nn.InstanceNorm2d(out_channels)
        self.divisor = divisor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, in_channels, H, W) -> (batch, out_channels, H - k + 1, W - k + 1)."""
        return self.norm(self.conv(x)) / self.divisor


batch_size = 64
in_channels = 16
out_channels = 64
height = 128
width = 128
kernel_size = 3
divisor = 2.0

CPU_SHAPES = {"batch_size": 2, "in_channels": 3, "out_channels": 4, "height": 10, "width": 10}


def get_inputs():
    x = torch.randn(batch_size, in_channels, height, width)
    return [x]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, divisor]
