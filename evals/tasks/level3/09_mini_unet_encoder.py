"""U-Net-style encoder: three (double conv3x3-ReLU, maxpool) stages and a bottleneck double conv."""

import torch
import torch.nn as nn


def double_conv(in_channels: int, out_channels: int) -> nn.Sequential:
    """Two 3x3 same-padding convolutions, each followed by ReLU."""
    return nn.Sequential(
        nn.Conv2d(in_channels, out_channels, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(out_channels, out_channels, 3, padding=1),
        nn.ReLU(),
    )


class Model(nn.Module):
    """Contracting path of a U-Net; channels double and resolution halves at every stage."""

    def __init__(self, in_channels: int, base_channels: int):
        super().__init__()
        c = base_channels
        self.down1 = double_conv(in_channels, c)
        self.down2 = double_conv(c, 2 * c)
        self.down3 = double_conv(2 * c, 4 * c)
        self.bottleneck = double_conv(4 * c, 8 * c)
        self.pool = nn.MaxPool2d(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, in_channels, H, W) -> (batch, 8 * base_channels, H / 8, W / 8)."""
        x = self.pool(self.down1(x))
        x = self.pool(self.down2(x))
        x = self.pool(self.down3(x))
        return self.bottleneck(x)


batch_size = 16
in_channels = 3
base_channels = 32
height = 256
width = 256

CPU_SHAPES = {"batch_size": 2, "base_channels": 2, "height": 16, "width": 16}


def get_inputs():
    x = torch.randn(batch_size, in_channels, height, width)
    return [x]


def get_init_inputs():
    return [in_channels, base_channels]
