"""3-D tensor times matrix: (batch, M, K) @ (K, L), the shared matrix broadcast over the batch."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Multiplies every (M, K) slice of a 3-D tensor by the same (K, L) matrix."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        """A: (batch, M, K), B: (K, L) -> (batch, M, L)."""
        return torch.matmul(A, B)


batch_size = 16
M = 1024
K = 2048
L = 1024

CPU_SHAPES = {"batch_size": 2, "M": 12, "K": 16, "L": 8}


def get_inputs():
    A = torch.randn(batch_size, M, K)
    B = torch.randn(K, L)
    return [A, B]


def get_init_inputs():
    return []
