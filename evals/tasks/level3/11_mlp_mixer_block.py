"""MLP-Mixer block: token-mixing MLP across patches, then channel-mixing MLP (pre-LN, residual)."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """One Mixer layer on a (batch, tokens, channels) patch embedding."""

    def __init__(self, num_tokens: int, channels: int, token_hidden: int, channel_hidden: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(channels)
        self.token_fc1 = nn.Linear(num_tokens, token_hidden)
        self.token_fc2 = nn.Linear(token_hidden, num_tokens)
        self.norm2 = nn.LayerNorm(channels)
        self.channel_fc1 = nn.Linear(channels, channel_hidden)
        self.channel_fc2 = nn.Linear(channel_hidden, channels)
        for norm in (self.norm1, self.norm2):
            nn.init.normal_(norm.weight, mean=1.0, std=0.1)
            nn.init.normal_(norm.bias, std=0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, num_tokens, channels) -> same shape."""
        y = self.norm1(x).transpose(1, 2)
        y = self.token_fc2(F.gelu(self.token_fc1(y)))
        x = x + y.transpose(1, 2)
        y = self.channel_fc2(F.gelu(self.channel_fc1(self.norm2(x))))
        return x + y


batch_size = 64
num_tokens = 256
channels = 512
token_hidden = 256
channel_hidden = 2048

CPU_SHAPES = {
    "batch_size": 2, "num_tokens": 8, "channels": 16, "token_hidden": 8, "channel_hidden": 32,
}


def get_inputs():
    x = torch.randn(batch_size, num_tokens, channels)
    return [x]


def get_init_inputs():
    return [num_tokens, channels, token_hidden, channel_hidden]
