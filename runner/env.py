"""What this machine can run candidates on."""

from __future__ import annotations

from functools import lru_cache


@lru_cache(maxsize=1)
def cuda_available() -> bool:
    """True when torch sees a CUDA device."""
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # a broken torch install means no CUDA here
        return False
