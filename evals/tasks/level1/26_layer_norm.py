"""LayerNorm over the hidden dimension of a (batch, seq, hidden) activation, with affine params."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Layer normalization over the last dimension with a learned weight and bias.

    The affine parameters are randomized (not the ones/zeros default) so that a kernel that
    skips them cannot pass a correctness check.
    """

    def __init__(self, hidden: int, eps: float = 1e-5):
        super().__init__()
        self.hidden = hidden
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden))
        self.bias = nn.Parameter(0.1 * torch.randn(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, seq, hidden) -> same shape."""
        return F.layer_norm(x, (self.hidden,), self.weight, self.bias, self.eps)


batch_size = 16
seq_len = 2048
hidden = 4096

CPU_SHAPES = {"batch_size": 2, "seq_len": 8, "hidden": 200}


def get_inputs():
    x = 2.0 * torch.randn(batch_size, seq_len, hidden) + 0.5
    return [x]


def get_init_inputs():
    return [hidden]
