"""Linear layer, sigmoid, then a sum over the feature dimension."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """y = sum_j sigmoid(x W^T + b)[:, j], kept as a column."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, in_features) -> (batch, 1)."""
        return torch.sigmoid(self.linear(x)).sum(dim=1, keepdim=True)


batch_size = 8192
in_features = 4096
out_features = 2048

CPU_SHAPES = {"batch_size": 4, "in_features": 32, "out_features": 48}


def get_inputs():
    x = torch.randn(batch_size, in_features)
    return [x]


def get_init_inputs():
    return [in_features, out_features]
