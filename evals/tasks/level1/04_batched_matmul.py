"""Batched matrix multiplication C[b] = A[b] @ B[b] over a batch of independent products."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Batched matrix multiply of (batch, M, K) by (batch, K, N)."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        """A: (batch, M, K), B: (batch, K, N) -> (batch, M, N)."""
        return torch.bmm(A, B)


batch_size = 128
M = 512
K = 1024
N = 512

CPU_SHAPES = {"batch_size": 3, "M": 8, "K": 16, "N": 8}


def get_inputs():
    A = torch.randn(batch_size, M, K)
    B = torch.randn(batch_size, K, N)
    return [A, B]


def get_init_inputs():
    return []
