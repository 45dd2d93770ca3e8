"""Rectangular matrix multiplication C = A @ B with A (M, K) and B (K, N), K the largest."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Multiplies an (M, K) matrix by a (K, N) matrix."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        """A: (M, K), B: (K, N) -> (M, N)."""
        return torch.matmul(A, B)


M = 2048
K = 8192
N = 4096

CPU_SHAPES = {"M": 16, "K": 48, "N": 24}


def get_inputs():
    A = torch.randn(M, K)
    B = torch.randn(K, N)
    return [A, B]


def get_init_inputs():
    return []
