"""Adaptive 2-D average pooling of 50x50 feature maps to 7x7 (uneven, overlapping bins)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Adaptive average pooling to a fixed output size."""

    def __init__(self, output_size: int):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(output_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, channels, H, W) -> (batch, channels, output_size, output_size)."""
        return self.pool(x)


batch_size = 128
channels = 256
height = 50
width = 50
output_size = 7

CPU_SHAPES = {"batch_size": 2, "channels": 4, "height": 17, "width": 17, "output_size": 5}


def get_inputs():
    x = torch.randn(batch_size, channels, height, width)
    return [x]


def get_init_inputs():
    return [output_size]
