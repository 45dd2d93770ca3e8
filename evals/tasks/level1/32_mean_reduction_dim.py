"""Mean reduction over the last (contiguous) dimension of a 3-D tensor."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Averages over one dimension, dropping it."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, dim1, dim2) -> (batch, dim1) for reduce_dim = 2."""
        return torch.mean(x, dim=self.dim)


batch_size = 64
dim1 = 1024
dim2 = 2048
reduce_dim = 2

CPU_SHAPES = {"batch_size": 2, "dim1": 24, "dim2": 80}


def get_inputs():
    x = torch.randn(batch_size, dim1, dim2)
    return [x]


def get_init_inputs():
    return [reduce_dim]
