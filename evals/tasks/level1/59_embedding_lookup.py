"""Embedding table lookup (row gather) for a batch of token ids."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """nn.Embedding: output[b, s] = weight[ids[b, s]]."""

    def __init__(self, num_embeddings: int, embedding_dim: int):
        super().__init__()
        self.embedding = nn.Embedding(num_embeddings, embedding_dim)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """ids: (batch, seq_len) int64 -> (batch, seq_len, embedding_dim)."""
        return self.embedding(ids)


batch_size = 32
seq_len = 4096
num_embeddings = 131072
embedding_dim = 1024

CPU_SHAPES = {"batch_size": 2, "seq_len": 24, "num_embeddings": 100, "embedding_dim": 40}


def get_inputs():
    ids = torch.randint(0, num_embeddings, (batch_size, seq_len))
    return [ids]


def get_init_inputs():
    return [num_embeddings, embedding_dim]
