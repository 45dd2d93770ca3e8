"""Bias-free linear layer, RMSNorm with a learned weight, then SiLU."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """y = SiLU(RMSNorm(x W^T))."""

    def __init__(self, in_features: int, out_features: int, eps: float = 1e-6):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=False)
        self.eps = eps
        self.norm_weight = nn.Parameter(1.0 + 0.1 * torch.randn(out_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, in_features) -> (batch, out_features)."""
        h = self.linear(x)
        h = h * torch.rsqrt(h.pow(2).mean(dim=-1, keepdim=True) + self.eps) * self.norm_weight
        return F.silu(h)


batch_size = 4096
in_features = 4096
out_features = 4096

CPU_SHAPES = {"batch_size": 4, "in_features": 32, "out_features": 40}


def get_inputs():
    x = torch.randn(batch_size, in_features)
    return [x]


def get_init_inputs():
    return [in_features, out_features]
