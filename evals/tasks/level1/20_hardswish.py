"""Elementwise hardswish x * relu6(x + 3) / 6 on a 4-D activation tensor."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Applies hardswish elementwise to an NCHW tensor."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Elementwise; output has the shape of x."""
        return F.hardswish(x)


batch_size = 16
channels = 64
height = 256
width = 256

CPU_SHAPES = {"batch_size": 2, "channels": 3, "height": 20, "width": 20}


def get_inputs():
    x = torch.randn(batch_size, channels, height, width)
    return [x]


def get_init_inputs():
    return []
