"""GroupNorm over an NCHW tensor: statistics per (sample, group of channels), per-channel affine."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Group normalization with randomized per-channel weight and bias."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5):
        super().__init__()
        self.num_groups = num_groups
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(num_channels))
        self.bias = nn.Parameter(0.1 * torch.randn(num_channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, channels, height, width) -> same shape."""
        return F.group_norm(x, self.num_groups, self.weight, self.bias, self.eps)


batch_size = 32
channels = 128
num_groups = 8
height = 128
width = 128

CPU_SHAPES = {"batch_size": 2, "channels": 8, "num_groups": 4, "height": 12, "width": 12}


def get_inputs():
    x = torch.randn(batch_size, channels, height, width)
    return [x]


def get_init_inputs():
    return [num_groups, channels]
