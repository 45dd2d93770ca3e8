"""Product of two upper-triangular matrices, keeping the upper triangle: triu(A @ B)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Multiplies two upper-triangular N x N matrices (half of the work is structural zeros)."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        """A: (N, N) upper triangular, B: (N, N) upper triangular -> (N, N) upper triangular."""
        return torch.triu(torch.matmul(A, B))


N = 4096

CPU_SHAPES = {"N": 40}


def get_inputs():
    A = torch.triu(torch.randn(N, N))
    B = torch.triu(torch.randn(N, N))
    return [A, B]


def get_init_inputs():
    return []
