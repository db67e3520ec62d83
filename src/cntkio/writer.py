"""Writing CTF text: ``sequence_to_cntk_text_format`` (as in ``cntk.io``); its output reads back bit-exact."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import scipy.sparse


def _format_value(value: Any) -> str:
    text = str(value)
    if not np.isfinite(float(value)):
        raise ValueError(f"CTF cannot represent the value {text}")
    return text


def _sample_text(tensor: Any, step: int) -> str:
    if isinstance(tensor, scipy.sparse.csr_matrix):
        row = tensor[step]
        row.sum_duplicates()
        return " ".join(f"{i}:{_format_value(v)}" for i, v in zip(row.indices.tolist(), row.data))
    sample = tensor[step]
    if isinstance(sample, Mapping):
        return " ".join(f"{int(i)}:{_format_value(v)}" for i, v in sorted(sample.items()))
    return " ".join(_format_value(v) for v in np.atleast_1d(np.asarray(sample)).ravel(order="C"))


def sequence_to_cntk_text_format(seq_idx: int, alias_tensor_map: Mapping[str, Any]) -> str:
    """One sequence as CTF lines ``"{seq_idx}\\t|alias v v |alias2 ..."`` without a trailing newline.

    Values per alias: a dense array ``(len, ...)`` (written in C order with ``str()`` of its dtype),
    a list of ``{index: value}`` dicts, or a SciPy sparse matrix (one row per sample). Aliases come
    in sorted order; an alias whose sequence is shorter is left out of the later lines.
    """
    tensors = {
        alias: scipy.sparse.csr_matrix(value) if scipy.sparse.issparse(value) else value
        for alias, value in sorted(alias_tensor_map.items())
    }
    lengths = {alias: value.shape[0] if hasattr(value, "shape") else len(value) for alias, value in tensors.items()}
    lines = []
    for step in range(max(lengths.values(), default=0)):
        parts = [f"{alias} {_sample_text(tensor, step)}" for alias, tensor in tensors.items() if step < lengths[alias]]
        lines.append(f"{seq_idx}\t|" + " |".join(parts))
    return "\n".join(lines)
