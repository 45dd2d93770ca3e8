"""Same-channel 3x3 Conv2d with a residual connection, then ReLU: y = ReLU(conv(x) + x)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """A minimal residual unit."""

    def __init__(self, channels: int):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, channels, H, W) -> same shape."""
        return torch.relu(self.conv(x) + x)


batch_size = 32
channels = 64
height = 128
width = 128

CPU_SHAPES = {"batch_size": 2, "channels": 4, "height": 8, "width": 8}


def get_inputs():
    x = torch.randn(batch_size, channels, height, width)
    return [x]


def get_init_inputs():
    return [channels]
