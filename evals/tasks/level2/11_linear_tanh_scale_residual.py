"""Square linear layer, tanh, scaling, then a residual add: x + scale * tanh(x W^T + b)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """A gated residual update."""

    def __init__(self, features: int, scale: float):
        super().__init__()
        self.linear = nn.Linear(features, features)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, features) -> (batch, features)."""
        return x + self.scale * torch.tanh(self.linear(x))


batch_size = 8192
features = 2048
scale = 0.75

CPU_SHAPES = {"batch_size": 4, "features": 40}


def get_inputs():
    x = torch.randn(batch_size, features)
    return [x]


def get_init_inputs():
    return [features, scale]
