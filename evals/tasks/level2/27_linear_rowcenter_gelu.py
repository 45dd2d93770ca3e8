"""Linear layer, subtraction of each row's mean, then GELU."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """h = x W^T + b; y = GELU(h - mean_j h[:, j])."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, in_features) -> (batch, out_features)."""
        h = self.linear(x)
        return F.gelu(h - h.mean(dim=1, keepdim=True))


batch_size = 4096
in_features = 4096
out_features = 4096

CPU_SHAPES = {"batch_size": 4, "in_features": 32, "out_features": 40}


def get_inputs():
    x = torch.randn(batch_size, in_features)
    return [x]


def get_init_inputs():
    return [in_features, out_features]
