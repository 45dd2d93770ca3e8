"""VGG-like net: three stages of two conv3x3-ReLU layers and a maxpool, then GAP + classifier."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Plain deep conv stack with global average pooling and a linear head."""

    def __init__(self, in_channels: int, channels: list, num_classes: int):
        super().__init__()
        layers = []
        prev = in_channels
        for c in channels:
            layers += [
                nn.Conv2d(prev, c, 3, padding=1), nn.ReLU(),
                nn.Conv2d(c, c, 3, padding=1), nn.ReLU(),
                nn.MaxPool2d(2),
            ]
            prev = c
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(prev, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, in_channels, H, W) -> (batch, num_classes)."""
        h = self.features(x)
        return self.fc(h.mean(dim=(2, 3)))


batch_size = 16
in_channels = 3
channels = [64, 128, 256]
height = 128
width = 128
num_classes = 1000

CPU_SHAPES = {
    "batch_size": 2, "channels": [4, 8, 8], "height": 16, "width": 16, "num_classes": 10,
}


def get_inputs():
    x = torch.randn(batch_size, in_channels, height, width)
    return [x]


def get_init_inputs():
    return [in_channels, channels, num_classes]
