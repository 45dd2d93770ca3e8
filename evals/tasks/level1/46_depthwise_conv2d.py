"""Depthwise 2-D convolution (groups = channels), 3x3 kernel, padding 1."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Per-channel 3x3 convolution, as in MobileNet blocks."""

    def __init__(self, channels: int, kernel_size: int):
        super().__init__()
        self.conv = nn.Conv2d(
            channels, channels, kernel_size, padding=kernel_size // 2, groups=channels
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, channels, H, W) -> same shape."""
        return self.conv(x)


batch_size = 16
channels = 128
height = 256
width = 256
kernel_size = 3

CPU_SHAPES = {"batch_size": 2, "channels": 4, "height": 12, "width": 12}


def get_inputs():
    x = torch.randn(batch_size, channels, height, width)
    return [x]


def get_init_inputs():
    return [channels, kernel_size]
