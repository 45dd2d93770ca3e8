"""Attention scores: batched Q @ K^T, scaling by 1/sqrt(d), then softmax over keys."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """P = softmax(scale * Q K^T, dim=-1) (the probabilities only; no V)."""

    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """q, k: (batch, seq_len, head_dim) -> (batch, seq_len, seq_len)."""
        scores = torch.bmm(q, k.transpose(1, 2)) * self.scale
        return torch.softmax(scores, dim=-1)


batch_size = 256
seq_len = 512
head_dim = 64

CPU_SHAPES = {"batch_size": 2, "seq_len": 20, "head_dim": 8}


def get_inputs():
    q = torch.randn(batch_size, seq_len, head_dim)
    k = torch.randn(batch_size, seq_len, head_dim)
    return [q, k]


def get_init_inputs():
    return [head_dim ** -0.5]
