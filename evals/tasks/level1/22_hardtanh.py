"""Elementwise hardtanh: clamp x into [min_val, max_val]."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Clamps every element into a fixed range."""

    def __init__(self, min_val: float, max_val: float):
        super().__init__()
        self.min_val = min_val
        self.max_val = max_val

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Elementwise; output has the shape of x."""
        return F.hardtanh(x, min_val=self.min_val, max_val=self.max_val)


batch_size = 4096
dim = 32768
min_val = -0.75
max_val = 1.25

CPU_SHAPES = {"batch_size": 4, "dim": 500}


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return [min_val, max_val]
