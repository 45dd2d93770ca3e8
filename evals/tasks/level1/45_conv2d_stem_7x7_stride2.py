"""ResNet-style stem convolution: 7x7 kernel, stride 2, padding 3, 3 -> 64 channels, 224x224."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """A large-kernel strided Conv2d without bias on few input channels."""

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 7, stride=2, padding=3, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, in_channels, H, W) -> (batch, out_channels, H / 2, W / 2)."""
        return self.conv(x)


batch_size = 64
in_channels = 3
out_channels = 64
height = 224
width = 224

CPU_SHAPES = {"batch_size": 2, "out_channels": 4, "height": 16, "width": 16}


def get_inputs():
    x = torch.randn(batch_size, in_channels, height, width)
    return [x]


def get_init_inputs():
    return [in_channels, out_channels]
