"""Linear layer, elementwise minimum with a constant cap, then subtraction of the same cap."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """y = min(x W^T + b, cap) - cap (all outputs <= 0)."""

    def __init__(self, in_features: int, out_features: int, cap: float):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.cap = cap

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, in_features) -> (batch, out_features)."""
        h = self.linear(x)
        return torch.clamp(h, max=self.cap) - self.cap


batch_size = 8192
in_features = 2048
out_features = 4096
cap = 0.2

CPU_SHAPES = {"batch_size": 4, "in_features": 32, "out_features": 48}


def get_inputs():
    x = torch.randn(batch_size, in_features)
    return [x]


def get_init_inputs():
    return [in_features, out_features, cap]
