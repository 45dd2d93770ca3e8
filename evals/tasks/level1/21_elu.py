"""Elementwise ELU with a configurable alpha."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Applies x if x > 0 else alpha * (exp(x) - 1)."""

    def __init__(self, alpha: float):
        super().__init__()
        self.alpha = alpha

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Elementwise; output has the shape of x."""
        return F.elu(x, alpha=self.alpha)


batch_size = 4096
dim = 32768
alpha = 1.5

CPU_SHAPES = {"batch_size": 4, "dim": 500}


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return [alpha]
