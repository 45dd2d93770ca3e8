"""Min reduction over the leading (strided) dimension of a 2-D tensor: a column-wise minimum."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Takes the minimum over one dimension, dropping it."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (rows, cols) -> (cols,) for reduce_dim = 0."""
        return torch.amin(x, dim=self.dim)


rows = 4096
cols = 32768
reduce_dim = 0

CPU_SHAPES = {"rows": 50, "cols": 70}


def get_inputs():
    x = torch.randn(rows, cols)
    return [x]


def get_init_inputs():
    return [reduce_dim]
