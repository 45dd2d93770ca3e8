"""Divide a whole tensor by its Frobenius norm (a global reduction followed by a broadcast)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """x / ||x||_F over all elements."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, channels, H, W) -> same shape."""
        return x / torch.linalg.vector_norm(x)


batch_size = 16
channels = 64
height = 256
width = 256

CPU_SHAPES = {"batch_size": 2, "channels": 4, "height": 16, "width": 16}


def get_inputs():
    x = torch.randn(batch_size, channels, height, width)
    return [x]


def get_init_inputs():
    return []
