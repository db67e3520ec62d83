"""Vectorised helpers on offset arrays shared by the corpus, the order, the cursor and MinibatchData, and SciPy's
sparse module loaded on first use."""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Any

import numpy as np


def issparse(value: Any) -> bool:
    """``scipy.sparse.issparse`` without importing SciPy (~0.3 s): a SciPy matrix exists only once SciPy is loaded."""
    module = sys.modules.get("scipy.sparse")
    return module is not None and bool(module.issparse(value))


def scipy_sparse() -> ModuleType:
    """``scipy.sparse``, imported when first needed."""
    import scipy.sparse

    module: ModuleType = scipy.sparse
    return module


def exclusive_cumsum(lengths: np.ndarray) -> np.ndarray:
    """Offsets ``[0, l0, l0+l1, ...]`` (length ``len(lengths) + 1``, int64)."""
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return offsets


def segment_sums(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Sums of ``values[starts[i]:starts[i + 1]]`` (the last segment runs to the end) as int64, without an
    int64 copy of ``values`` when the total fits their own type."""
    if values.dtype.itemsize < 8 and int(values.sum(dtype=np.int64)) <= np.iinfo(values.dtype).max:
        return np.add.reduceat(values, starts, dtype=values.dtype).astype(np.int64)
    return np.add.reduceat(values, starts, dtype=np.int64)


def narrow_lengths(lengths: np.ndarray) -> np.ndarray:
    """Sequence lengths as int32 when they fit (4 bytes a sequence), else as they are."""
    if lengths.dtype != np.int32 and (not len(lengths) or int(lengths.max()) < 2**31):
        return lengths.astype(np.int32)
    return lengths
