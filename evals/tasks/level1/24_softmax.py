"""Row-wise softmax over a vocabulary-sized last dimension (32000)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Softmax over the last dimension of a (batch, dim) tensor."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, dim) -> (batch, dim), each row summing to 1."""
        return torch.softmax(x, dim=-1)


batch_size = 4096
dim = 32000

CPU_SHAPES = {"batch_size": 4, "dim": 1000}


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return []
