"""Inclusive prefix sum (cumsum) along the last dimension of a 2-D tensor."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Cumulative sum along one dimension."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, length) -> same shape."""
        return torch.cumsum(x, dim=self.dim)


batch_size = 4096
length = 16384
scan_dim = 1

CPU_SHAPES = {"batch_size": 4, "length": 500}


def get_inputs():
    x = torch.randn(batch_size, length)
    return [x]


def get_init_inputs():
    return [scan_dim]
