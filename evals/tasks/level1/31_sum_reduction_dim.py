"""Sum reduction over the middle dimension of a 3-D tensor, keeping the reduced dim."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Sums over one dimension (keepdim=True)."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, dim1, dim2) -> (batch, 1, dim2) for reduce_dim = 1."""
        return torch.sum(x, dim=self.dim, keepdim=True)


batch_size = 64
dim1 = 2048
dim2 = 1024
reduce_dim = 1

CPU_SHAPES = {"batch_size": 2, "dim1": 40, "dim2": 36}


def get_inputs():
    x = torch.randn(batch_size, dim1, dim2)
    return [x]


def get_init_inputs():
    return [reduce_dim]
