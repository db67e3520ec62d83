"""Writing CTF text: ``sequence_to_cntk_text_format`` (as in ``cntk.io``); its output reads back bit-exact."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from cntkio._src.common.arrays import issparse, scipy_sparse


def _format_value(value: Any) -> str:
    text = str(value)
    if not np.isfinite(float(value)):
        raise ValueError(f"CTF cannot represent the value {text}")
    return text


def _format_dense(value: Any) -> str:
    """A dense value as CNTK writes it: integral values without a fraction (``1``, not ``1.0``; up to 2**53),
    others as ``str()`` of their dtype (shortest text that reads back to the same value); -0.0 keeps its sign."""
    number = float(value)
    if not np.isfinite(number):
        raise ValueError(f"CTF cannot represent the value {value}")
    if number.is_integer() and abs(number) < 2**53 and not (number == 0 and np.signbit(number)):
        return str(int(number))
    return str(value)


def _check_tensor(alias: str, value: Any) -> Any:
    """The value of an alias as an array, a SciPy sparse matrix or a list of ``{index: value}`` dicts."""
    if issparse(value):
        return scipy_sparse().csr_matrix(value)
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, Mapping) for v in value):
        return value
    if isinstance(value, (str, bytes, Mapping)) or value is None:
        raise ValueError(f"alias '{alias}': expected a tensor (array, sparse matrix or list of dicts), got {value!r}")
    array = np.asarray(value)
    if array.dtype.kind not in "biuf" or array.ndim == 0:
        raise ValueError(
            f"alias '{alias}': expected a numeric tensor with a sequence axis, got {type(value).__name__} "
            f"of dtype {array.dtype} and shape {array.shape}"
        )
    return array


def _sample_text(tensor: Any, step: int) -> str:
    if issparse(tensor):  # (a CSR matrix: _check_tensor made it one)
        row = tensor[step]
        row.sum_duplicates()
        return " ".join(f"{i}:{_format_value(v)}" for i, v in zip(row.indices.tolist(), row.data))
    sample = tensor[step]
    if isinstance(sample, Mapping):
        return " ".join(f"{int(i)}:{_format_value(v)}" for i, v in sorted(sample.items()))
    return " ".join(_format_dense(v) for v in np.atleast_1d(np.asarray(sample)).ravel(order="C"))


def sequence_to_cntk_text_format(seq_idx: int, alias_tensor_map: Mapping[str, Any]) -> str:
    """One sequence as CTF lines ``"{seq_idx}\\t|alias v v |alias2 ..."`` without a trailing newline.

    Values per alias: a dense array ``(len, ...)`` (written in C order as CNTK does: integral values as
    ``1``, others with ``str()`` of their dtype), a list of ``{index: value}`` dicts, or a SciPy sparse
    matrix (one row per sample). Aliases come in sorted order; an alias whose sequence is shorter is left
    out of the later lines. A value that is not a tensor raises ``ValueError``.

    Example::

        sequence_to_cntk_text_format(7, {"x": np.array([[1, 0.5]])})  # '7\t|x 1 0.5'
    """
    tensors = {alias: _check_tensor(alias, value) for alias, value in sorted(alias_tensor_map.items())}
    lengths = {alias: value.shape[0] if hasattr(value, "shape") else len(value) for alias, value in tensors.items()}
    lines = []
    for step in range(max(lengths.values(), default=0)):
        parts = [f"{alias} {_sample_text(tensor, step)}" for alias, tensor in tensors.items() if step < lengths[alias]]
        lines.append(f"{seq_idx}\t|" + " |".join(parts))
    return "\n".join(lines)
