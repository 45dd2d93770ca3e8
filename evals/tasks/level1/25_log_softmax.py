"""Row-wise log-softmax over a GPT-2-vocabulary-sized last dimension (50257)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Log-softmax over the last dimension of a (batch, dim) tensor."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, dim) -> (batch, dim) log-probabilities."""
        return torch.log_softmax(x, dim=-1)


batch_size = 2048
dim = 50257

CPU_SHAPES = {"batch_size": 4, "dim": 999}


def get_inputs():
    x = 3.0 * torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return []
