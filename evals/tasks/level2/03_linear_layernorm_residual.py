"""Square linear layer, LayerNorm of its output, plus a residual connection to the input."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """y = LayerNorm(x W^T + b) + x."""

    def __init__(self, features: int, eps: float = 1e-5):
        super().__init__()
        self.linear = nn.Linear(features, features)
        self.features = features
        self.eps = eps
        self.ln_weight = nn.Parameter(1.0 + 0.1 * torch.randn(features))
        self.ln_bias = nn.Parameter(0.1 * torch.randn(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, features) -> (batch, features)."""
        h = F.layer_norm(self.linear(x), (self.features,), self.ln_weight, self.ln_bias, self.eps)
        return h + x


batch_size = 4096
features = 4096

CPU_SHAPES = {"batch_size": 4, "features": 40}


def get_inputs():
    x = torch.randn(batch_size, features)
    return [x]


def get_init_inputs():
    return [features]
