"""1-D convolution, kernel 3, 'same' padding, over long sequences."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Standard Conv1d with bias."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
        super().__init__()
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, in_channels, length) -> (batch, out_channels, length)."""
        return self.conv(x)


batch_size = 32
in_channels = 64
out_channels = 128
length = 16384
kernel_size = 3

CPU_SHAPES = {"batch_size": 2, "in_channels": 3, "out_channels": 4, "length": 100}


def get_inputs():
    x = torch.randn(batch_size, in_channels, length)
    return [x]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
