"""Multi-head self-attention (nn.MultiheadAttention) with a residual add and post-LayerNorm."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """out = LayerNorm(x + MHA(x, x, x)), batch-first, no dropout."""

    def __init__(self, embed_dim: int, num_heads: int):
        super().__init__()
        self.attn = nn.MultiheadAttention(embed_dim, num_heads, batch_first=True)
        self.norm = nn.LayerNorm(embed_dim)
        nn.init.normal_(self.norm.weight, mean=1.0, std=0.1)
        nn.init.normal_(self.norm.bias, std=0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, seq_len, embed_dim) -> same shape."""
        attn_out, _ = self.attn(x, x, x, need_weights=False)
        return self.norm(x + attn_out)


batch_size = 16
seq_len = 512
embed_dim = 1024
num_heads = 16

CPU_SHAPES = {"batch_size": 2, "seq_len": 8, "embed_dim": 16, "num_heads": 2}


def get_inputs():
    x = torch.randn(batch_size, seq_len, embed_dim)
    return [x]


def get_init_inputs():
    return [embed_dim, num_heads]
