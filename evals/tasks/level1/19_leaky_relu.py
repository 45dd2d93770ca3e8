"""Elementwise leaky ReLU with a configurable negative slope."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Applies x if x >= 0 else negative_slope * x."""

    def __init__(self, negative_slope: float):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Elementwise; output has the shape of x."""
        return F.leaky_relu(x, negative_slope=self.negative_slope)


batch_size = 4096
dim = 32768
negative_slope = 0.05

CPU_SHAPES = {"batch_size": 4, "dim": 500}


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return [negative_slope]
