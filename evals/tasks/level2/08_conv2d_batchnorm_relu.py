"""Conv2d without bias, inference-mode BatchNorm, ReLU: the classic conv-bn-relu block."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """y = ReLU(BN_eval(conv(x))), with fixed, randomized running statistics.

    BatchNorm uses training=False explicitly, so the result does not depend on the train/eval flag.
    """

    def __init__(self, in_channels: int, out_channels: int, eps: float = 1e-5):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3, padding=1, bias=False)
        self.eps = eps
        self.bn_weight = nn.Parameter(1.0 + 0.1 * torch.randn(out_channels))
        self.bn_bias = nn.Parameter(0.1 * torch.randn(out_channels))
        self.register_buffer("running_mean", 0.1 * torch.randn(out_channels))
        self.register_buffer("running_var", 0.5 + torch.rand(out_channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, in_channels, H, W) -> (batch, out_channels, H, W)."""
        y = F.batch_norm(
            self.conv(x), self.running_mean, self.running_var, self.bn_weight, self.bn_bias,
            training=False, eps=self.eps,
        )
        return torch.relu(y)


batch_size = 32
in_channels = 64
out_channels = 128
height = 112
width = 112

CPU_SHAPES = {"batch_size": 2, "in_channels": 3, "out_channels": 4, "height": 8, "width": 8}


def get_inputs():
    x = torch.randn(batch_size, in_channels, height, width)
    return [x]


def get_init_inputs():
    return [in_channels, out_channels]
