"""ConvTranspose2d (2x upsample), clamp into a range, then multiply by a constant."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """y = scale * clamp(conv_transpose(x), clamp_min, clamp_max)."""

    def __init__(
        self, in_channels: int, out_channels: int, clamp_min: float, clamp_max: float, scale: float
    ):
        super().__init__()
        self.conv_t = nn.ConvTranspose2d(
            in_channels, out_channels, 3, stride=2, padding=1, output_padding=1
        )
        self.clamp_min = clamp_min
        self.clamp_max = clamp_max
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, in_channels, H, W) -> (batch, out_channels, 2H, 2W)."""
        y = torch.clamp(self.conv_t(x), min=self.clamp_min, max=self.clamp_max)
        return y * self.scale


batch_size = 64
in_channels = 32
out_channels = 64
height = 64
width = 64
clamp_min = -0.25
clamp_max = 0.25
scale = 2.0

CPU_SHAPES = {"batch_size": 2, "in_channels": 3, "out_channels": 4, "height": 6, "width": 6}


def get_inputs():
    x = torch.randn(batch_size, in_channels, height, width)
    return [x]


def get_init_inputs():
    return [in_channels, out_channels, clamp_min, clamp_max, scale]
