"""Conv2d, 2x2 max pooling, hardtanh, then a sum over channels."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """y = sum_c hardtanh(maxpool2x2(conv(x)))[:, c], kept as one channel."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.pool = nn.MaxPool2d(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, in_channels, H, W) -> (batch, 1, (H - k + 1) // 2, (W - k + 1) // 2)."""
        y = F.hardtanh(self.pool(self.conv(x)), min_val=-0.5, max_val=0.5)
        return y.sum(dim=1, keepdim=True)


batch_size = 64
in_channels = 16
out_channels = 32
height = 128
width = 128
kernel_size = 3

CPU_SHAPES = {"batch_size": 2, "in_channels": 3, "out_channels": 4, "height": 10, "width": 10}


def get_inputs():
    x = torch.randn(batch_size, in_channels, height, width)
    return [x]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
