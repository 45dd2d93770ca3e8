"""Elementwise softplus log(1 + exp(x)) on a large 2-D tensor."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Applies softplus with beta=1 and the default linear threshold of 20."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Elementwise; output has the shape of x."""
        return F.softplus(x)


batch_size = 4096
dim = 32768

CPU_SHAPES = {"batch_size": 4, "dim": 500}


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return []
