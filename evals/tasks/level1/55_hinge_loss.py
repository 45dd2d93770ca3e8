"""Hinge loss with +/-1 labels: mean(clamp(1 - predictions * targets, min=0))."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Elementwise hinge loss averaged to a scalar."""

    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """predictions: (batch, dim), targets: (batch, dim) in {-1, +1} -> scalar."""
        return torch.mean(torch.clamp(1.0 - predictions * targets, min=0.0))


batch_size = 4096
dim = 32768

CPU_SHAPES = {"batch_size": 4, "dim": 500}


def get_inputs():
    predictions = torch.randn(batch_size, dim)
    targets = torch.randint(0, 2, (batch_size, dim)).float() * 2.0 - 1.0
    return [predictions, targets]


def get_init_inputs():
    return []
