"""Matrix multiplication with a transposed right operand: C = A @ B.T with B stored as (N, K)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Computes A @ B.T, the layout of a linear layer's weight."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        """A: (M, K), B: (N, K) -> (M, N)."""
        return torch.matmul(A, B.T)


M = 2048
K = 4096
N = 3072

CPU_SHAPES = {"M": 16, "K": 32, "N": 24}


def get_inputs():
    A = torch.randn(M, K)
    B = torch.randn(N, K)
    return [A, B]


def get_init_inputs():
    return []
