"""Argmin over the middle dimension of a 3-D tensor (int64 indices)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Returns the index of the minimum along one dimension."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, dim1, dim2) -> (batch, dim2) int64 for reduce_dim = 1."""
        return torch.argmin(x, dim=self.dim)


batch_size = 128
dim1 = 1024
dim2 = 1024
reduce_dim = 1

CPU_SHAPES = {"batch_size": 2, "dim1": 50, "dim2": 30}


def get_inputs():
    x = torch.randn(batch_size, dim1, dim2)
    return [x]


def get_init_inputs():
    return [reduce_dim]
