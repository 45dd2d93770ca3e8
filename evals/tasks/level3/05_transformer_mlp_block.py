"""Pre-LayerNorm transformer MLP block: x + fc2(GELU(fc1(LayerNorm(x))))."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """The feed-forward half of a transformer layer, with its residual connection."""

    def __init__(self, hidden: int, mlp_hidden: int):
        super().__init__()
        self.norm = nn.LayerNorm(hidden)
        nn.init.normal_(self.norm.weight, mean=1.0, std=0.1)
        nn.init.normal_(self.norm.bias, std=0.1)
        self.fc1 = nn.Linear(hidden, mlp_hidden)
        self.fc2 = nn.Linear(mlp_hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, seq_len, hidden) -> same shape."""
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


batch_size = 8
seq_len = 1024
hidden = 1024
mlp_hidden = 4096

CPU_SHAPES = {"batch_size": 2, "seq_len": 8, "hidden": 32, "mlp_hidden": 64}


def get_inputs():
    x = torch.randn(batch_size, seq_len, hidden)
    return [x]


def get_init_inputs():
    return [hidden, mlp_hidden]
