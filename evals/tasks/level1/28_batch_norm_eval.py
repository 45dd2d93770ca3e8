"""Inference-mode BatchNorm2d: normalize NCHW channels with fixed running statistics."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Batch normalization in eval mode (running mean/var), with affine parameters.

    Running statistics and affine parameters are randomized at construction so the per-channel
    transform is not the identity. The forward uses training=False explicitly, so the result does
    not depend on the module's train/eval flag.
    """

    def __init__(self, num_features: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(num_features))
        self.bias = nn.Parameter(0.1 * torch.randn(num_features))
        self.register_buffer("running_mean", 0.1 * torch.randn(num_features))
        self.register_buffer("running_var", 0.5 + torch.rand(num_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, channels, height, width) -> same shape."""
        return F.batch_norm(
            x, self.running_mean, self.running_var, self.weight, self.bias,
            training=False, eps=self.eps,
        )


batch_size = 32
channels = 64
height = 256
width = 256

CPU_SHAPES = {"batch_size": 2, "channels": 4, "height": 16, "width": 16}


def get_inputs():
    x = torch.randn(batch_size, channels, height, width)
    return [x]


def get_init_inputs():
    return [channels]
