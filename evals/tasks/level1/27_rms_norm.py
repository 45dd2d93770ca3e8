"""RMSNorm over the hidden dimension: x / sqrt(mean(x^2) + eps) * weight."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Root-mean-square normalization (LLaMA style) with a learned per-channel weight."""

    def __init__(self, hidden: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, seq, hidden) -> same shape."""
        rms = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return x * rms * self.weight


batch_size = 16
seq_len = 2048
hidden = 4096

CPU_SHAPES = {"batch_size": 2, "seq_len": 8, "hidden": 200}


def get_inputs():
    x = torch.randn(batch_size, seq_len, hidden)
    return [x]


def get_init_inputs():
    return [hidden]
