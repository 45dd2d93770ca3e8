"""Diagonal matrix times dense matrix: diag(a) @ B, i.e. a row scaling of B."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Builds the diagonal matrix of a vector and multiplies it into a dense matrix."""

    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        """a: (N,), B: (N, M) -> (N, M)."""
        return torch.diag(a) @ B


N = 4096
M = 8192

CPU_SHAPES = {"N": 32, "M": 40}


def get_inputs():
    a = torch.randn(N)
    B = torch.randn(N, M)
    return [a, B]


def get_init_inputs():
    return []
