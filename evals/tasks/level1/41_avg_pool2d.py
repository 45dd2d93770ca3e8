"""2-D average pooling, 4x4 window, stride 2, padding 1 (zero padding counted)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Average pooling with an overlapping window; padded zeros count toward the mean."""

    def __init__(self, kernel_size: int, stride: int, padding: int):
        super().__init__()
        self.pool = nn.AvgPool2d(kernel_size=kernel_size, stride=stride, padding=padding)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, channels, H, W) -> (batch, channels, H_out, W_out)."""
        return self.pool(x)


batch_size = 32
channels = 64
height = 256
width = 256
kernel_size = 4
stride = 2
padding = 1

CPU_SHAPES = {"batch_size": 2, "channels": 4, "height": 16, "width": 18}


def get_inputs():
    x = torch.randn(batch_size, channels, height, width)
    return [x]


def get_init_inputs():
    return [kernel_size, stride, padding]
