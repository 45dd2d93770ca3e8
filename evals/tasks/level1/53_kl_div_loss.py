"""KL divergence between two row-wise probability distributions, 'batchmean' reduction."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """KL(targets || predictions) summed over rows and averaged over the batch."""

    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """predictions, targets: (batch, dim) probability rows -> scalar."""
        return F.kl_div(torch.log(predictions), targets, reduction="batchmean")


batch_size = 8192
dim = 16384

CPU_SHAPES = {"batch_size": 4, "dim": 500}


def get_inputs():
    predictions = torch.softmax(torch.randn(batch_size, dim), dim=-1)
    targets = torch.softmax(torch.randn(batch_size, dim), dim=-1)
    return [predictions, targets]


def get_init_inputs():
    return []
