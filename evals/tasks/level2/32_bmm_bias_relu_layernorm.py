"""Batched matmul of two inputs, bias add, ReLU, then LayerNorm over the last dimension."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """y = LayerNorm(ReLU(A @ B + bias))."""

    def __init__(self, n: int, eps: float = 1e-5):
        super().__init__()
        self.n = n
        self.eps = eps
        self.bias = nn.Parameter(0.1 * torch.randn(n))
        self.ln_weight = nn.Parameter(1.0 + 0.1 * torch.randn(n))
        self.ln_bias = nn.Parameter(0.1 * torch.randn(n))

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        """A: (batch, M, K), B: (batch, K, N) -> (batch, M, N)."""
        h = torch.relu(torch.bmm(A, B) + self.bias)
        return F.layer_norm(h, (self.n,), self.ln_weight, self.ln_bias, self.eps)


batch_size = 64
M = 512
K = 512
N = 1024

CPU_SHAPES = {"batch_size": 2, "M": 8, "K": 16, "N": 40}


def get_inputs():
    A = torch.randn(batch_size, M, K)
    B = torch.randn(batch_size, K, N)
    return [A, B]


def get_init_inputs():
    return [N]
