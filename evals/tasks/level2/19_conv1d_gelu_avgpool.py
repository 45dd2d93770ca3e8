"""Conv1d (kernel 5, same padding), GELU, then non-overlapping 1-D average pooling by 4."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """y = AvgPool1d_4(GELU(conv1d(x)))."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, pool: int):
        super().__init__()
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)
        self.pool = nn.AvgPool1d(pool)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, in_channels, length) -> (batch, out_channels, length // pool)."""
        return self.pool(F.gelu(self.conv(x)))


batch_size = 32
in_channels = 64
out_channels = 128
length = 16384
kernel_size = 5
pool = 4

CPU_SHAPES = {"batch_size": 2, "in_channels": 3, "out_channels": 4, "length": 64}


def get_inputs():
    x = torch.randn(batch_size, in_channels, length)
    return [x]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, pool]
