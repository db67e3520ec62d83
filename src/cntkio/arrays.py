"""Vectorised helpers on offset arrays shared by the corpus, the order, the cursor and MinibatchData."""

from __future__ import annotations

import numpy as np


def exclusive_cumsum(lengths: np.ndarray) -> np.ndarray:
    """Offsets ``[0, l0, l0+l1, ...]`` (length ``len(lengths) + 1``, int64)."""
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return offsets
