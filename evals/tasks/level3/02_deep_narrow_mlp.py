"""Deep, narrow MLP: many 256-wide Linear-GELU layers on a large batch (launch-bound in eager)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """depth hidden layers of width `width` with GELU, then a classifier Linear."""

    def __init__(self, width: int, depth: int, num_classes: int):
        super().__init__()
        layers = []
        for _ in range(depth):
            layers.append(nn.Linear(width, width))
            layers.append(nn.GELU())
        layers.append(nn.Linear(width, num_classes))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, width) -> (batch, num_classes)."""
        return self.net(x)


batch_size = 16384
width = 256
depth = 16
num_classes = 10

CPU_SHAPES = {"batch_size": 4, "width": 32, "depth": 4}


def get_inputs():
    x = torch.randn(batch_size, width)
    return [x]


def get_init_inputs():
    return [width, depth, num_classes]
