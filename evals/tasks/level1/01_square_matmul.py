"""Square matrix multiplication C = A @ B with A and B both N x N."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Multiplies two square matrices."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        """A: (N, N), B: (N, N) -> (N, N)."""
        return torch.matmul(A, B)


N = 4096

CPU_SHAPES = {"N": 32}


def get_inputs():
    A = torch.randn(N, N)
    B = torch.randn(N, N)
    return [A, B]


def get_init_inputs():
    return []
