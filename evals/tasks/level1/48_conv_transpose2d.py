"""Transposed 2-D convolution (2x upsampling): kernel 4, stride 2, padding 1, 64 -> 32 channels."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """ConvTranspose2d with bias that doubles the spatial resolution."""

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.conv_t = nn.ConvTranspose2d(in_channels, out_channels, 4, stride=2, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, in_channels, H, W) -> (batch, out_channels, 2H, 2W)."""
        return self.conv_t(x)


batch_size = 16
in_channels = 64
out_channels = 32
height = 128
width = 128

CPU_SHAPES = {"batch_size": 2, "in_channels": 3, "out_channels": 4, "height": 8, "width": 8}


def get_inputs():
    x = torch.randn(batch_size, in_channels, height, width)
    return [x]


def get_init_inputs():
    return [in_channels, out_channels]
