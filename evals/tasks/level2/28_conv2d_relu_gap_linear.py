"""Conv2d, ReLU, global average pooling, then a linear classifier head."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """logits = Linear(mean_{h,w} ReLU(conv(x)))."""

    def __init__(self, in_channels: int, out_channels: int, num_classes: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3, padding=1)
        self.fc = nn.Linear(out_channels, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, in_channels, H, W) -> (batch, num_classes)."""
        h = torch.relu(self.conv(x))
        h = h.mean(dim=(2, 3))
        return self.fc(h)


batch_size = 128
in_channels = 3
out_channels = 64
height = 224
width = 224
num_classes = 1000

CPU_SHAPES = {"batch_size": 2, "out_channels": 8, "height": 12, "width": 12, "num_classes": 10}


def get_inputs():
    x = torch.randn(batch_size, in_channels, height, width)
    return [x]


def get_init_inputs():
    return [in_channels, out_channels, num_classes]
