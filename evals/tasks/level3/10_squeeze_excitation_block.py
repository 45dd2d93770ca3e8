"""Residual conv unit with squeeze-and-excitation channel gating."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """h = ReLU(conv3x3(x)); s = sigmoid(fc2(ReLU(fc1(mean_hw(h))))); out = ReLU(x + h * s)."""

    def __init__(self, channels: int, reduction: int):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)
        self.fc1 = nn.Linear(channels, channels // reduction)
        self.fc2 = nn.Linear(channels // reduction, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, channels, H, W) -> same shape."""
        h = torch.relu(self.conv(x))
        s = h.mean(dim=(2, 3))
        s = torch.sigmoid(self.fc2(torch.relu(self.fc1(s))))
        return torch.relu(x + h * s[:, :, None, None])


batch_size = 64
channels = 128
height = 56
width = 56
reduction = 16

CPU_SHAPES = {"batch_size": 2, "channels": 8, "height": 8, "width": 8, "reduction": 4}


def get_inputs():
    x = torch.randn(batch_size, channels, height, width)
    return [x]


def get_init_inputs():
    return [channels, reduction]
