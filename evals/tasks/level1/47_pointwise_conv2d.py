"""Pointwise (1x1) 2-D convolution, 256 -> 512 channels: a GEMM over the pixel dimension."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """1x1 Conv2d with bias."""

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, in_channels, H, W) -> (batch, out_channels, H, W)."""
        return self.conv(x)


batch_size = 32
in_channels = 256
out_channels = 512
height = 64
width = 64

CPU_SHAPES = {"batch_size": 2, "in_channels": 8, "out_channels": 12, "height": 8, "width": 8}


def get_inputs():
    x = torch.randn(batch_size, in_channels, height, width)
    return [x]


def get_init_inputs():
    return [in_channels, out_channels]
