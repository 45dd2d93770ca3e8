"""Pre-LN transformer encoder layer: fused-QKV self-attention and a GELU MLP, both residual."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """x = x + proj(SDPA(qkv(LN1(x)))); x = x + fc2(GELU(fc1(LN2(x))))."""

    def __init__(self, d_model: int, num_heads: int, mlp_hidden: int):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = d_model // num_heads
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc1 = nn.Linear(d_model, mlp_hidden)
        self.fc2 = nn.Linear(mlp_hidden, d_model)
        for norm in (self.ln1, self.ln2):
            nn.init.normal_(norm.weight, mean=1.0, std=0.1)
            nn.init.normal_(norm.bias, std=0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, seq_len, d_model) -> same shape."""
        b, s, d = x.shape
        qkv = self.qkv(self.ln1(x)).view(b, s, 3, self.num_heads, self.head_dim)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        attn = F.scaled_dot_product_attention(q, k, v)
        x = x + self.proj(attn.transpose(1, 2).reshape(b, s, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


batch_size = 8
seq_len = 512
d_model = 768
num_heads = 12
mlp_hidden = 3072

CPU_SHAPES = {"batch_size": 2, "seq_len": 8, "d_model": 16, "num_heads": 2, "mlp_hidden": 32}


def get_inputs():
    x = torch.randn(batch_size, seq_len, d_model)
    return [x]


def get_init_inputs():
    return [d_model, num_heads, mlp_hidden]
