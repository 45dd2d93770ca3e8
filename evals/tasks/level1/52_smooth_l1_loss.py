"""Smooth L1 (Huber-like) loss with beta = 1, mean reduction."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Quadratic for |diff| < beta, linear beyond; averaged to a scalar."""

    def __init__(self, beta: float):
        super().__init__()
        self.beta = beta

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """predictions, targets: (batch, dim) -> scalar."""
        return F.smooth_l1_loss(predictions, targets, beta=self.beta)


batch_size = 8192
dim = 8192
beta = 1.0

CPU_SHAPES = {"batch_size": 4, "dim": 500}


def get_inputs():
    predictions = torch.randn(batch_size, dim)
    targets = torch.randn(batch_size, dim)
    return [predictions, targets]


def get_init_inputs():
    return [beta]
