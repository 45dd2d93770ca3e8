"""GRU layer written with Linear ops and unrolled over a short sequence; returns the final state."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """A single-layer GRU (PyTorch gate convention: reset, update, new)."""

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        self.x2h = nn.Linear(input_size, 3 * hidden_size)
        self.h2h = nn.Linear(hidden_size, 3 * hidden_size)

    def forward(self, x: torch.Tensor, h0: torch.Tensor) -> torch.Tensor:
        """x: (batch, seq_len, input_size), h0: (batch, hidden) -> (batch, hidden)."""
        h = h0
        for t in range(x.shape[1]):
            xr, xz, xn = self.x2h(x[:, t]).chunk(3, dim=1)
            hr, hz, hn = self.h2h(h).chunk(3, dim=1)
            r = torch.sigmoid(xr + hr)
            z = torch.sigmoid(xz + hz)
            n = torch.tanh(xn + r * hn)
            h = (1.0 - z) * n + z * h
        return h


batch_size = 1024
seq_len = 16
input_size = 512
hidden_size = 512

CPU_SHAPES = {"batch_size": 2, "seq_len": 4, "input_size": 8, "hidden_size": 8}


def get_inputs():
    x = torch.randn(batch_size, seq_len, input_size)
    h0 = torch.randn(batch_size, hidden_size)
    return [x, h0]


def get_init_inputs():
    return [input_size, hidden_size]
