"""InstanceNorm2d without affine parameters: normalize every (sample, channel) plane."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Instance normalization; each H x W plane gets zero mean and unit variance."""

    def __init__(self, num_features: int):
        super().__init__()
        self.norm = nn.InstanceNorm2d(num_features=num_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, channels, height, width) -> same shape."""
        return self.norm(x)


batch_size = 32
channels = 64
height = 256
width = 256

CPU_SHAPES = {"batch_size": 2, "channels": 4, "height": 16, "width": 16}


def get_inputs():
    x = 3.0 * torch.randn(batch_size, channels, height, width) + 1.0
    return [x]


def get_init_inputs():
    return [channels]
