"""ConvTranspose2d (2x upsample), softmax over channels, per-channel bias add, then tanh."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """y = tanh(softmax_c(conv_transpose(x)) + bias[c])."""

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.conv_t = nn.ConvTranspose2d(
            in_channels, out_channels, 3, stride=2, padding=1, output_padding=1
        )
        self.bias = nn.Parameter(0.1 * torch.randn(out_channels, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, in_channels, H, W) -> (batch, out_channels, 2H, 2W)."""
        y = torch.softmax(self.conv_t(x), dim=1)
        return torch.tanh(y + self.bias)


batch_size = 64
in_channels = 32
out_channels = 64
height = 64
width = 64

CPU_SHAPES = {"batch_size": 2, "in_channels": 3, "out_channels": 4, "height": 5, "width": 5}


def get_inputs():
    x = torch.randn(batch_size, in_channels, height, width)
    return [x]


def get_init_inputs():
    return [in_channels, out_channels]
