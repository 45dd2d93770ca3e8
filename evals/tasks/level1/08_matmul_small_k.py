"""Matrix multiplication with a tiny inner dimension (K = 32): output-bandwidth bound."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Multiplies (M, K) by (K, N) where K is very small and M, N are large."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        """A: (M, K), B: (K, N) -> (M, N)."""
        return torch.matmul(A, B)


M = 16384
N = 16384
K = 32

CPU_SHAPES = {"M": 40, "N": 48, "K": 4}


def get_inputs():
    A = torch.randn(M, K)
    B = torch.randn(K, N)
    return [A, B]


def get_init_inputs():
    return []
