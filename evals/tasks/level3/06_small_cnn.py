"""Small image classifier: three conv-ReLU-maxpool stages, then a two-layer MLP head."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """LeNet/AlexNet-flavoured CNN for square images whose side is divisible by 8."""

    def __init__(
        self, in_channels: int, channels: list, image_size: int, fc_hidden: int, num_classes: int
    ):
        super().__init__()
        layers = []
        prev = in_channels
        for c in channels:
            layers += [nn.Conv2d(prev, c, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2)]
            prev = c
        self.features = nn.Sequential(*layers)
        side = image_size // (2 ** len(channels))
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(prev * side * side, fc_hidden),
            nn.ReLU(),
            nn.Linear(fc_hidden, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, in_channels, image_size, image_size) -> (batch, num_classes)."""
        return self.classifier(self.features(x))


batch_size = 256
in_channels = 3
channels = [32, 64, 128]
image_size = 64
fc_hidden = 256
num_classes = 10

CPU_SHAPES = {"batch_size": 2, "channels": [4, 8, 8], "image_size": 16, "fc_hidden": 16}


def get_inputs():
    x = torch.randn(batch_size, in_channels, image_size, image_size)
    return [x]


def get_init_inputs():
    return [in_channels, channels, image_size, fc_hidden, num_classes]
