"""Causal (autoregressive) scaled dot-product attention with head_dim 128."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Attention where query i attends only to keys 0..i."""

    def __init__(self):
        super().__init__()

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """q, k, v: (batch, heads, seq_len, head_dim) -> (batch, heads, seq_len, head_dim)."""
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


batch_size = 8
num_heads = 16
seq_len = 2048
head_dim = 128

CPU_SHAPES = {"batch_size": 1, "num_heads": 2, "seq_len": 24, "head_dim": 16}


def get_inputs():
    q = torch.randn(batch_size, num_heads, seq_len, head_dim)
    k = torch.randn(batch_size, num_heads, seq_len, head_dim)
    v = torch.randn(batch_size, num_heads, seq_len, head_dim)
    return [q, k, v]


def get_init_inputs():
    return []
