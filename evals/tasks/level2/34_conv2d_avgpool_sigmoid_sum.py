"""Conv2d, 2x2 average pooling, sigmoid, then a sum over channels and space per sample."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """y[b] = sum_{c,h,w} sigmoid(avgpool2x2(conv(x)))[b, c, h, w]."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, in_channels, H, W) -> (batch,)."""
        y = torch.sigmoid(F.avg_pool2d(self.conv(x), 2))
        return y.sum(dim=(1, 2, 3))


batch_size = 64
in_channels = 16
out_channels = 64
height = 128
width = 128
kernel_size = 3

CPU_SHAPES = {"batch_size": 2, "in_channels": 3, "out_channels": 4, "height": 8, "width": 8}


def get_inputs():
    x = torch.randn(batch_size, in_channels, height, width)
    return [x]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
