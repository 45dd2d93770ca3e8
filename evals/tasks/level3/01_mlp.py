"""Multi-layer perceptron: Linear-ReLU stacks of configurable widths, then an output Linear."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """MLP input_size -> hidden_sizes[0] -> ... -> output_size with ReLU between layers."""

    def __init__(self, input_size: int, hidden_sizes: list, output_size: int):
        super().__init__()
        layers = []
        prev = input_size
        for width in hidden_sizes:
            layers.append(nn.Linear(prev, width))
            layers.append(nn.ReLU())
            prev = width
        layers.append(nn.Linear(prev, output_size))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, input_size) -> (batch, output_size)."""
        return self.net(x)


batch_size = 2048
input_size = 4096
hidden_sizes = [4096, 2048]
output_size = 1000

CPU_SHAPES = {"batch_size": 4, "input_size": 32, "hidden_sizes": [48, 24], "output_size": 10}


def get_inputs():
    x = torch.randn(batch_size, input_size)
    return [x]


def get_init_inputs():
    return [input_size, hidden_sizes, output_size]
