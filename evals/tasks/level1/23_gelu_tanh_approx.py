"""Elementwise GELU, tanh approximation, on a large 2-D tensor."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Applies 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x**3)))."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Elementwise; output has the shape of x."""
        return F.gelu(x, approximate="tanh")


batch_size = 8192
dim = 16384

CPU_SHAPES = {"batch_size": 4, "dim": 500}


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return []
