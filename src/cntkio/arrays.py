"""Vectorised helpers on offset arrays shared by the timeline, the packer and MinibatchData."""

from __future__ import annotations

import numpy as np


def exclusive_cumsum(lengths: np.ndarray) -> np.ndarray:
    """Offsets ``[0, l0, l0+l1, ...]`` (length ``len(lengths) + 1``, int64)."""
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return offsets


def expand_ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(s, s + n)`` for every (s, n), without a Python loop."""
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    shift = np.repeat(starts - exclusive_cumsum(lengths)[:-1], lengths)
    return np.arange(total, dtype=np.int64) + shift
