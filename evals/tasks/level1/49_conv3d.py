"""3-D convolution over a video-like volume, 3x3x3 kernel, padding 1, 16 -> 32 channels."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Standard Conv3d with bias."""

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size=3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, in_channels, D, H, W) -> (batch, out_channels, D, H, W)."""
        return self.conv(x)


batch_size = 8
in_channels = 16
out_channels = 32
depth = 32
height = 64
width = 64

CPU_SHAPES = {
    "batch_size": 2, "in_channels": 3, "out_channels": 4, "depth": 4, "height": 8, "width": 8,
}


def get_inputs():
    x = torch.randn(batch_size, in_channels, depth, height, width)
    return [x]


def get_init_inputs():
    return [in_channels, out_channels]
