"""Linear layer, GroupNorm over groups of output features, then hardtanh."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """y = hardtanh(GroupNorm(x W^T + b)) on a (batch, features) activation."""

    def __init__(self, in_features: int, out_features: int, num_groups: int, eps: float = 1e-5):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.num_groups = num_groups
        self.eps = eps
        self.gn_weight = nn.Parameter(1.0 + 0.1 * torch.randn(out_features))
        self.gn_bias = nn.Parameter(0.1 * torch.randn(out_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, in_features) -> (batch, out_features)."""
        h = F.group_norm(self.linear(x), self.num_groups, self.gn_weight, self.gn_bias, self.eps)
        return F.hardtanh(h, min_val=-2.0, max_val=2.0)


batch_size = 8192
in_features = 2048
out_features = 4096
num_groups = 16

CPU_SHAPES = {"batch_size": 4, "in_features": 32, "out_features": 48, "num_groups": 4}


def get_inputs():
    x = torch.randn(batch_size, in_features)
    return [x]


def get_init_inputs():
    return [in_features, out_features, num_groups]
