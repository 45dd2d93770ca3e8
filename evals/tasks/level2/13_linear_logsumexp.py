"""Linear layer followed by a row-wise logsumexp."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """y = log(sum_j exp((x W^T + b)[:, j]))."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, in_features) -> (batch, 1)."""
        return torch.logsumexp(self.linear(x), dim=1, keepdim=True)


batch_size = 4096
in_features = 4096
out_features = 8192

CPU_SHAPES = {"batch_size": 4, "in_features": 32, "out_features": 64}


def get_inputs():
    x = torch.randn(batch_size, in_features)
    return [x]


def get_init_inputs():
    return [in_features, out_features]
