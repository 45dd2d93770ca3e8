"""Reverse (suffix) cumulative sum along the last dimension: out[i] = sum(x[i:])."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Suffix sums along one dimension, written with flip + cumsum + flip."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, length) -> same shape."""
        return torch.cumsum(x.flip(self.dim), dim=self.dim).flip(self.dim)


batch_size = 4096
length = 16384
scan_dim = 1

CPU_SHAPES = {"batch_size": 4, "length": 500}


def get_inputs():
    x = torch.randn(batch_size, length)
    return [x]


def get_init_inputs():
    return [scan_dim]
