"""Max reduction (values only) over the middle dimension of a 3-D tensor."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Takes the maximum over one dimension, dropping it."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, dim1, dim2) -> (batch, dim2) for reduce_dim = 1."""
        return torch.max(x, dim=self.dim).values


batch_size = 128
dim1 = 4096
dim2 = 256
reduce_dim = 1

CPU_SHAPES = {"batch_size": 2, "dim1": 64, "dim2": 24}


def get_inputs():
    x = torch.randn(batch_size, dim1, dim2)
    return [x]


def get_init_inputs():
    return [reduce_dim]
