"""Linear projection to 8192 classes followed by a row-wise softmax."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """y = softmax(x W^T + b, dim=1)."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, in_features) -> (batch, out_features) probability rows."""
        return torch.softmax(self.linear(x), dim=1)


batch_size = 4096
in_features = 2048
out_features = 8192

CPU_SHAPES = {"batch_size": 4, "in_features": 32, "out_features": 100}


def get_inputs():
    x = torch.randn(batch_size, in_features)
    return [x]


def get_init_inputs():
    return [in_features, out_features]
