"""DenseNet dense block: each BN-ReLU-conv3x3 layer reads the concat of all earlier maps."""

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
    """num_layers layers, each adding growth_rate channels; returns the full concatenation."""

    def __init__(self, in_channels: int, growth_rate: int, num_layers: int):
        super().__init__()
        self.layers = nn.ModuleList()
        for i in range(num_layers):
            c = in_channels + i * growth_rate
            self.layers.append(
                nn.Sequential(
                    FrozenBatchNorm2d(c),
                    nn.ReLU(),
                    nn.Conv2d(c, growth_rate, 3, padding=1, bias=False),
                )
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, C, H, W) -> (batch, C + num_layers * growth_rate, H, W)."""
        features = [x]
        for layer in self.layers:
            features.append(layer(torch.cat(features, dim=1)))
        return torch.cat(features, dim=1)


batch_size = 32
in_channels = 64
growth_rate = 32
num_layers = 4
height = 56
width = 56

CPU_SHAPES = {
    "batch_size": 2, "in_channels": 4, "growth_rate": 4, "num_layers": 3, "height": 8, "width": 8,
}


def get_inputs():
    x = torch.randn(batch_size, in_channels, height, width)
    return [x]


def get_init_inputs():
    return [in_channels, growth_rate, num_layers]
