"""ConvTranspose3d (2x upsample of a volume), per-channel bias add, then hardswish."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """y = hardswish(conv_transpose3d(x) + bias[c])."""

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.conv_t = nn.ConvTranspose3d(
            in_channels, out_channels, 3, stride=2, padding=1, output_padding=1
        )
        self.bias = nn.Parameter(0.1 * torch.randn(out_channels, 1, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, in_channels, D, H, W) -> (batch, out_channels, 2D, 2H, 2W)."""
        return F.hardswish(self.conv_t(x) + self.bias)


batch_size = 32
in_channels = 32
out_channels = 16
depth = 16
height = 32
width = 32

CPU_SHAPES = {
    "batch_size": 2, "in_channels": 3, "out_channels": 4, "depth": 2, "height": 4, "width": 4,
}


def get_inputs():
    x = torch.randn(batch_size, in_channels, depth, height, width)
    return [x]


def get_init_inputs():
    return [in_channels, out_channels]
