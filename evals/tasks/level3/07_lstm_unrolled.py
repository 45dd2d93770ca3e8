"""LSTM layer built from Linear ops, unrolled over a short sequence; returns all hidden states."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Single-layer LSTM: gates = x_t W_x^T + b + h W_h^T, split as input/forget/cell/output."""

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        self.x2h = nn.Linear(input_size, 4 * hidden_size)
        self.h2h = nn.Linear(hidden_size, 4 * hidden_size, bias=False)

    def forward(self, x: torch.Tensor, h0: torch.Tensor, c0: torch.Tensor) -> torch.Tensor:
        """x: (batch, seq_len, input_size), h0, c0: (batch, hidden) -> (batch, seq_len, hidden)."""
        h, c = h0, c0
        outputs = []
        for t in range(x.shape[1]):
            gates = self.x2h(x[:, t]) + self.h2h(h)
            i, f, g, o = gates.chunk(4, dim=1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
            outputs.append(h)
        return torch.stack(outputs, dim=1)


batch_size = 512
seq_len = 16
input_size = 512
hidden_size = 512

CPU_SHAPES = {"batch_size": 2, "seq_len": 4, "input_size": 8, "hidden_size": 8}


def get_inputs():
    x = torch.randn(batch_size, seq_len, input_size)
    h0 = torch.randn(batch_size, hidden_size)
    c0 = torch.randn(batch_size, hidden_size)
    return [x, h0, c0]


def get_init_inputs():
    return [input_size, hidden_size]
