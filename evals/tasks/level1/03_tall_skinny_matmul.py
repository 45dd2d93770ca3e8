"""Tall-skinny matrix multiplication: a very tall (M, K) matrix times a small (K, N) matrix."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Multiplies a tall, narrow matrix by a small square-ish matrix (M >> K, N)."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        """A: (M, K), B: (K, N) -> (M, N)."""
        return torch.matmul(A, B)


M = 262144
K = 256
N = 256

CPU_SHAPES = {"M": 200, "K": 16, "N": 16}


def get_inputs():
    A = torch.randn(M, K)
    B = torch.randn(K, N)
    return [A, B]


def get_init_inputs():
    return []
