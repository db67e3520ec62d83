"""A minibatch stream as the arrays a model takes, in NumPy, for any framework (:mod:`cntkio.torch`,
:mod:`cntkio.jax`): padded values or token ids of a fixed or natural shape with their mask, one value per sequence.

Every function works on whole arrays (no per-sequence Python) and raises a ``ValueError`` naming the stream when the
data does not fit the layout.
"""

from __future__ import annotations

import numpy as np

from cntkio._src.assemble.minibatch import MinibatchData

__all__ = ["mask", "one_hot_ids", "one_per_sequence", "padded_ids", "padded_values"]


def one_hot_ids(data: MinibatchData, layout: str) -> np.ndarray:
    """The column of every sample of a one-hot sparse stream, int64 (the value is not kept)."""
    name = data.info.name
    if not data.is_sparse:
        raise ValueError(f"stream '{name}' is dense: layout {layout!r} is for one-hot sparse streams")
    assert data.indptr is not None and data.indices is not None
    entries = np.diff(data.indptr)
    if len(entries) and (entries != 1).any():
        sample = int(np.flatnonzero(entries != 1)[0])
        raise ValueError(
            f"stream '{name}': layout {layout!r} needs one entry per sample (one-hot); sample {sample} of this "
            f"minibatch has {int(entries[sample])} — use 'csr' or 'padded' for this stream"
        )
    return data.indices.astype(np.int64)


def one_per_sequence(data: MinibatchData, values: np.ndarray) -> np.ndarray:
    """``values`` (one per sample) when every sequence has exactly one sample."""
    lengths = data.sequence_lengths
    if len(lengths) and (lengths != 1).any():
        sequence = int(np.flatnonzero(lengths != 1)[0])
        raise ValueError(
            f"stream '{data.info.name}': layout 'per_sequence' needs one sample per sequence; sequence {sequence} "
            f"of this minibatch has {int(lengths[sequence])}"
        )
    return values


def _shape(data: MinibatchData, rows: int | None, steps: int | None) -> tuple[int, int]:
    rows = data.num_sequences if rows is None else rows
    steps = data.max_length if steps is None else steps
    if rows < data.num_sequences or steps < data.max_length:
        raise ValueError(
            f"stream '{data.info.name}': {data.num_sequences} sequences of up to {data.max_length} samples do not fit "
            f"a padded shape of ({rows}, {steps})"
        )
    return rows, steps


def padded_ids(data: MinibatchData, pad_id: int = 0, rows: int | None = None, steps: int | None = None) -> np.ndarray:
    """Token ids of a one-hot stream, int64 ``[rows, steps]`` (default: sequences, longest), padded with ``pad_id``."""
    ids = one_hot_ids(data, "token_ids")
    rows, steps = _shape(data, rows, steps)
    out = np.full((rows, steps), pad_id, dtype=np.int64)
    sequence, step = data.sample_positions()
    out[sequence, step] = ids
    return out


def padded_values(data: MinibatchData, rows: int | None = None, steps: int | None = None) -> np.ndarray:
    """The stream's values ``[rows, steps, *shape]`` (sparse streams densified), zero padding."""
    rows, steps = _shape(data, rows, steps)
    if (rows, steps) == (data.num_sequences, data.max_length):
        return data.asarray()
    out = np.zeros((rows, steps, *data.sample_shape), dtype=data.values.dtype)
    out[: data.num_sequences, : data.max_length] = data.asarray()
    return out


def mask(data: MinibatchData, rows: int | None = None, steps: int | None = None) -> np.ndarray:
    """bool ``[rows, steps]``: True where a sequence has a sample."""
    rows, steps = _shape(data, rows, steps)
    lengths = np.zeros(rows, dtype=np.int64)
    lengths[: data.num_sequences] = data.sequence_lengths
    return np.arange(steps) < lengths[:, None]
