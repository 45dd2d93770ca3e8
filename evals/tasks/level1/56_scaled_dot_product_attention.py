"""Scaled dot-product attention softmax(Q K^T / sqrt(d)) V, non-causal, no mask."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Multi-head attention core on pre-projected (batch, heads, seq, head_dim) tensors."""

    def __init__(self):
        super().__init__()

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """q, k, v: (batch, heads, seq_len, head_dim) -> (batch, heads, seq_len, head_dim)."""
        return F.scaled_dot_product_attention(q, k, v)


batch_size = 16
num_heads = 16
seq_len = 1024
head_dim = 64

CPU_SHAPES = {"batch_size": 1, "num_heads": 2, "seq_len": 20, "head_dim": 16}


def get_inputs():
    q = torch.randn(batch_size, num_heads, seq_len, head_dim)
    k = torch.randn(batch_size, num_heads, seq_len, head_dim)
    v = torch.randn(batch_size, num_heads, seq_len, head_dim)
    return [q, k, v]


def get_init_inputs():
    return []
