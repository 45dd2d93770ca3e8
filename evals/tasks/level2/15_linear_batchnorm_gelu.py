"""Linear layer, inference-mode BatchNorm1d over features, then GELU."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """y = GELU(BN_eval(x W^T + b)), with fixed, randomized running statistics."""

    def __init__(self, in_features: int, out_features: int, eps: float = 1e-5):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.eps = eps
        self.bn_weight = nn.Parameter(1.0 + 0.1 * torch.randn(out_features))
        self.bn_bias = nn.Parameter(0.1 * torch.randn(out_features))
        self.register_buffer("running_mean", 0.1 * torch.randn(out_features))
        self.register_buffer("running_var", 0.5 + torch.rand(out_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, in_features) -> (batch, out_features)."""
        y = F.batch_norm(
            self.linear(x), self.running_mean, self.running_var, self.bn_weight, self.bn_bias,
            training=False, eps=self.eps,
        )
        return F.gelu(y)


batch_size = 8192
in_features = 2048
out_features = 4096

CPU_SHAPES = {"batch_size": 4, "in_features": 32, "out_features": 48}


def get_inputs():
    x = torch.randn(batch_size, in_features)
    return [x]


def get_init_inputs():
    return [in_features, out_features]
