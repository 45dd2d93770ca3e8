"""Linear layer, swish x * sigmoid(x), scaling, then clamping into [-1, 1]."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """y = clamp(scale * swish(x W^T + b), -1, 1)."""

    def __init__(self, in_features: int, out_features: int, scale: float):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, in_features) -> (batch, out_features)."""
        h = self.linear(x)
        h = h * torch.sigmoid(h)
        return torch.clamp(h * self.scale, min=-1.0, max=1.0)


batch_size = 4096
in_features = 4096
out_features = 2048
scale = 3.0

CPU_SHAPES = {"batch_size": 4, "in_features": 32, "out_features": 48}


def get_inputs():
    x = torch.randn(batch_size, in_features)
    return [x]


def get_init_inputs():
    return [in_features, out_features, scale]
