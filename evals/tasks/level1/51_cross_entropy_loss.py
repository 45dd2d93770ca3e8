"""Cross-entropy loss over a 32000-way vocabulary with integer class targets (mean reduction)."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Softmax cross-entropy from logits and class indices."""

    def __init__(self):
        super().__init__()

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """logits: (batch, num_classes), targets: (batch,) int64 -> scalar."""
        return F.cross_entropy(logits, targets)


batch_size = 4096
num_classes = 32000

CPU_SHAPES = {"batch_size": 8, "num_classes": 500}


def get_inputs():
    logits = 2.0 * torch.randn(batch_size, num_classes)
    targets = torch.randint(0, num_classes, (batch_size,))
    return [logits, targets]


def get_init_inputs():
    return []
