"""Elementwise hyperbolic tangent on a large 2-D tensor."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Applies tanh elementwise."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Elementwise; output has the shape of x."""
        return torch.tanh(x)


batch_size = 2048
dim = 65536

CPU_SHAPES = {"batch_size": 4, "dim": 500}


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return []
