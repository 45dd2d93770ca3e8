"""Mean squared error between predictions and targets, reduced to a scalar."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """MSE loss: mean((predictions - targets) ** 2)."""

    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """predictions, targets: (batch, dim) -> scalar."""
        return torch.mean((predictions - targets) ** 2)


batch_size = 4096
dim = 32768

CPU_SHAPES = {"batch_size": 4, "dim": 500}


def get_inputs():
    predictions = torch.randn(batch_size, dim)
    targets = torch.randn(batch_size, dim)
    return [predictions, targets]


def get_init_inputs():
    return []
