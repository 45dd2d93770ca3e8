"""Argmax over the last dimension of a 2-D tensor (int64 indices)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Returns the index of the maximum along one dimension."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, dim) -> (batch,) int64 for reduce_dim = 1."""
        return torch.argmax(x, dim=self.dim)


batch_size = 8192
dim = 16384
reduce_dim = 1

CPU_SHAPES = {"batch_size": 8, "dim": 300}


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return [reduce_dim]
