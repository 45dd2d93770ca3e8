"""Conv2d (valid padding), GroupNorm, then the mean over (C, H, W) per sample."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """y[b] = mean(GroupNorm(conv(x))[b])."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, num_groups: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.norm = nn.GroupNorm(num_groups, out_channels)
        with torch.no_grad():
            self.norm.weight.copy_(1.0 + 0.1 * torch.randn(out_channels))
            self.norm.bias.copy_(0.1 * torch.randn(out_channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, in_channels, H, W) -> (batch,)."""
        return self.norm(self.conv(x)).mean(dim=(1, 2, 3))


batch_size = 128
in_channels = 16
out_channels = 64
height = 128
width = 128
kernel_size = 3
num_groups = 8

CPU_SHAPES = {
    "batch_size": 2, "in_channels": 3, "out_channels": 8, "height": 10, "width": 10,
    "num_groups": 4,
}


def get_inputs():
    x = torch.randn(batch_size, in_channels, height, width)
    return [x]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, num_groups]
