"""Matrix multiplication with a transposed left operand: C = A.T @ B with A stored as (K, M)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Computes A.T @ B where A is stored K-major as (K, M)."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        """A: (K, M), B: (K, N) -> (M, N)."""
        return torch.matmul(A.T, B)


M = 2048
K = 4096
N = 3072

CPU_SHAPES = {"M": 16, "K": 32, "N": 24}


def get_inputs():
    A = torch.randn(K, M)
    B = torch.randn(K, N)
    return [A, B]


def get_init_inputs():
    return []
