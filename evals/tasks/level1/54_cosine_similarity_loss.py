"""Cosine-similarity loss: mean over rows of 1 - cos(predictions_i, targets_i)."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Row-wise cosine similarity turned into a scalar loss."""

    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """predictions, targets: (batch, dim) -> scalar."""
        cos = F.cosine_similarity(predictions, targets, dim=1)
        return torch.mean(1.0 - cos)


batch_size = 32768
dim = 4096

CPU_SHAPES = {"batch_size": 8, "dim": 300}


def get_inputs():
    predictions = torch.randn(batch_size, dim)
    targets = predictions + torch.randn(batch_size, dim)
    return [predictions, targets]


def get_init_inputs():
    return []
