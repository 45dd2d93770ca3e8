"""Linear layer, division by a constant, then GELU."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """y = GELU((x W^T + b) / divisor)."""

    def __init__(self, in_features: int, out_features: int, divisor: float):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.divisor = divisor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, in_features) -> (batch, out_features)."""
        return F.gelu(self.linear(x) / self.divisor)


batch_size = 4096
in_features = 8192
out_features = 2048
divisor = 4.0

CPU_SHAPES = {"batch_size": 4, "in_features": 48, "out_features": 32}


def get_inputs():
    x = torch.randn(batch_size, in_features)
    return [x]


def get_init_inputs():
    return [in_features, out_features, divisor]
