"""Linear layer, then GELU, then multiplication by a constant scale."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """y = scale * GELU(x W^T + b)."""

    def __init__(self, in_features: int, out_features: int, scale: float):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, in_features) -> (batch, out_features)."""
        return F.gelu(self.linear(x)) * self.scale


batch_size = 4096
in_features = 4096
out_features = 4096
scale = 0.5

CPU_SHAPES = {"batch_size": 4, "in_features": 32, "out_features": 48}


def get_inputs():
    x = torch.randn(batch_size, in_features)
    return [x]


def get_init_inputs():
    return [in_features, out_features, scale]
