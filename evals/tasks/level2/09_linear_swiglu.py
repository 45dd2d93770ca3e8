"""SwiGLU gating: two bias-free projections combined as SiLU(x W_gate^T) * (x W_up^T)."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """The gated first half of a LLaMA-style MLP (without the down projection)."""

    def __init__(self, hidden: int, intermediate: int):
        super().__init__()
        self.gate = nn.Linear(hidden, intermediate, bias=False)
        self.up = nn.Linear(hidden, intermediate, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (tokens, hidden) -> (tokens, intermediate)."""
        return F.silu(self.gate(x)) * self.up(x)


num_tokens = 2048
hidden = 2048
intermediate = 5632

CPU_SHAPES = {"num_tokens": 4, "hidden": 32, "intermediate": 88}


def get_inputs():
    x = torch.randn(num_tokens, hidden)
    return [x]


def get_init_inputs():
    return [hidden, intermediate]
