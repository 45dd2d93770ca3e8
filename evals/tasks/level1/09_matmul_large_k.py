"""Matrix multiplication with a huge inner dimension (K = 524288) and a small output."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Multiplies (M, K) by (K, N) where K dwarfs M and N (split-K territory)."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        """A: (M, K), B: (K, N) -> (M, N)."""
        return torch.matmul(A, B)


M = 256
N = 256
K = 524288

CPU_SHAPES = {"M": 8, "N": 8, "K": 400}


def get_inputs():
    A = torch.randn(M, K)
    B = torch.randn(K, N)
    return [A, B]


def get_init_inputs():
    return []
