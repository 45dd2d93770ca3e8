"""Matrix-vector multiplication y = A @ x with A (M, K) and x a (K, 1) column."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Multiplies a large matrix by a single column vector (memory-bound GEMV)."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """A: (M, K), x: (K, 1) -> (M, 1)."""
        return torch.matmul(A, x)


M = 16384
K = 16384

CPU_SHAPES = {"M": 48, "K": 64}


def get_inputs():
    A = torch.randn(M, K)
    x = torch.randn(K, 1)
    return [A, x]


def get_init_inputs():
    return []
