"""Conv3d (valid padding), ReLU, then the mean over depth, height and width per channel."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """y[b, c] = mean_{d,h,w} ReLU(conv3d(x))[b, c, d, h, w]."""

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size=3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, in_channels, D, H, W) -> (batch, out_channels)."""
        return torch.relu(self.conv(x)).mean(dim=(2, 3, 4))


batch_size = 16
in_channels = 3
out_channels = 16
depth = 32
height = 128
width = 128

CPU_SHAPES = {"batch_size": 2, "out_channels": 4, "depth": 5, "height": 8, "width": 8}


def get_inputs():
    x = torch.randn(batch_size, in_channels, depth, height, width)
    return [x]


def get_init_inputs():
    return [in_channels, out_channels]
