"""Linear layer, leaky ReLU, sum over features, then multiplication by a constant."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """y[b] = scale * sum_j leaky_relu(x W^T + b)[b, j]."""

    def __init__(self, in_features: int, out_features: int, negative_slope: float, scale: float):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.negative_slope = negative_slope
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, in_features) -> (batch,)."""
        h = F.leaky_relu(self.linear(x), negative_slope=self.negative_slope)
        return h.sum(dim=1) * self.scale


batch_size = 8192
in_features = 4096
out_features = 2048
negative_slope = 0.1
scale = 0.5

CPU_SHAPES = {"batch_size": 4, "in_features": 32, "out_features": 48}


def get_inputs():
    x = torch.randn(batch_size, in_features)
    return [x]


def get_init_inputs():
    return [in_features, out_features, negative_slope, scale]
