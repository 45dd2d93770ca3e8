"""Conv2d, subtract a constant, tanh, subtract another constant, then 2x2 average pooling."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """y = avgpool2x2(tanh(conv(x) - sub1) - sub2)."""

    def __init__(self, in_channels: int, out_channels: int, sub1: float, sub2: float):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3)
        self.sub1 = sub1
        self.sub2 = sub2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, in_channels, H, W) -> (batch, out_channels, (H - 2) // 2, (W - 2) // 2)."""
        y = torch.tanh(self.conv(x) - self.sub1) - self.sub2
        return F.avg_pool2d(y, 2)


batch_size = 64
in_channels = 16
out_channels = 64
height = 128
width = 128
sub1 = 0.3
sub2 = 0.1

CPU_SHAPES = {"batch_size": 2, "in_channels": 3, "out_channels": 4, "height": 10, "width": 10}


def get_inputs():
    x = torch.randn(batch_size, in_channels, height, width)
    return [x]


def get_init_inputs():
    return [in_channels, out_channels, sub1, sub2]
