"""MobileNetV2 inverted residual block: 1x1 expand, depthwise 3x3, 1x1 project, residual add."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class FrozenBatchNorm2d(nn.Module):
    """Inference-mode BatchNorm2d with fixed (randomized) running statistics and affine params.

    training=False is passed explicitly, so the module's train/eval flag does not matter.
    """

    def __init__(self, num_features: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(num_features))
        self.bias = nn.Parameter(0.1 * torch.randn(num_features))
        self.register_buffer("running_mean", 0.1 * torch.randn(num_features))
        self.register_buffer("running_var", 0.5 + torch.rand(num_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.batch_norm(
            x, self.running_mean, self.running_var, self.weight, self.bias,
            training=False, eps=self.eps,
        )


class Model(nn.Module):
    """out = x + BN(pw_project(ReLU6(BN(dw3x3(ReLU6(BN(pw_expand(x))))))))."""

    def __init__(self, channels: int, expand_ratio: int):
        super().__init__()
        hidden = channels * expand_ratio
        self.expand = nn.Conv2d(channels, hidden, 1, bias=False)
        self.bn1 = FrozenBatchNorm2d(hidden)
        self.depthwise = nn.Conv2d(hidden, hidden, 3, padding=1, groups=hidden, bias=False)
        self.bn2 = FrozenBatchNorm2d(hidden)
        self.project = nn.Conv2d(hidden, channels, 1, bias=False)
        self.bn3 = FrozenBatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, channels, H, W) -> same shape."""
        h = F.relu6(self.bn1(self.expand(x)))
        h = F.relu6(self.bn2(self.depthwise(h)))
        return x + self.bn3(self.project(h))


batch_size = 64
channels = 64
height = 56
width = 56
expand_ratio = 6

CPU_SHAPES = {"batch_size": 2, "channels": 4, "height": 8, "width": 8, "expand_ratio": 2}


def get_inputs():
    x = torch.randn(batch_size, channels, height, width)
    return [x]


def get_init_inputs():
    return [channels, expand_ratio]
