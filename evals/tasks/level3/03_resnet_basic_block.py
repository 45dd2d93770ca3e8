"""ResNet basic block with a strided 1x1 projection shortcut (inference-mode BatchNorm)."""

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
    """out = ReLU(BN(conv3x3(ReLU(BN(conv3x3_s(x))))) + BN(conv1x1_s(x)))."""

    def __init__(self, in_channels: int, out_channels: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, bias=False)
        self.bn1 = FrozenBatchNorm2d(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, padding=1, bias=False)
        self.bn2 = FrozenBatchNorm2d(out_channels)
        self.shortcut = nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False)
        self.bn_shortcut = FrozenBatchNorm2d(out_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, in_channels, H, W) -> (batch, out_channels, H / stride, W / stride)."""
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + self.bn_shortcut(self.shortcut(x)))


batch_size = 32
in_channels = 64
out_channels = 128
height = 112
width = 112
stride = 2

CPU_SHAPES = {"batch_size": 2, "in_channels": 4, "out_channels": 8, "height": 8, "width": 8}


def get_inputs():
    x = torch.randn(batch_size, in_channels, height, width)
    return [x]


def get_init_inputs():
    return [in_channels, out_channels, stride]
