"""Packing: gathers the sequences (or frames) a minibatch selected from parsed chunks, vectorised."""

from __future__ import annotations

import numpy as np

from .arrays import exclusive_cumsum, expand_ranges
from .deserializer import DenseStream, StreamData
from .errors import CNTKIOError
from .minibatch import MinibatchData
from .streams import StreamInformation


class ShortStreamError(CNTKIOError):
    """A stream has fewer samples than frame mode or truncated BPTT reads from a sequence.

    ``unit`` is the index of the unit in the part; ``part`` the index of the part (set by :func:`pack`).
    """

    def __init__(self, unit: int, part: int = 0):
        super().__init__(f"unit {unit} of part {part}: a stream is shorter than the sequence")
        self.unit, self.part = unit, part


def _sample_rows(
    data: StreamData, sequences: np.ndarray, offsets: np.ndarray | None, counts: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """Rows (samples) of the chunk to take and the number of rows per unit."""
    seq_offsets = data.seq_offsets
    starts = seq_offsets[sequences]
    lengths = seq_offsets[sequences + 1] - starts
    if offsets is None or counts is None:
        return expand_ranges(starts, lengths), lengths
    short = np.flatnonzero(offsets + counts > lengths)
    if len(short):
        raise ShortStreamError(int(short[0]))
    return expand_ranges(starts + offsets, counts), counts


def _is_run(sequences: np.ndarray) -> bool:
    return (
        len(sequences) > 0
        and int(sequences[-1]) - int(sequences[0]) == len(sequences) - 1
        and bool(np.all(np.diff(sequences) == 1))
    )


def gather(
    data: StreamData, sequences: np.ndarray, offsets: np.ndarray | None = None, counts: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None, np.ndarray]:
    """Selects whole sequences, or ``counts`` samples from ``offsets`` of each, from one chunk.

    Returns (values, indices, indptr, samples per unit); whole consecutive sequences are zero-copy views.
    """
    if offsets is None and _is_run(sequences):
        first, last = int(data.seq_offsets[sequences[0]]), int(data.seq_offsets[sequences[-1] + 1])
        lengths = np.diff(data.seq_offsets[sequences[0] : sequences[-1] + 2])
        if isinstance(data, DenseStream):
            return data.values[first:last], None, None, lengths
        lo, hi = int(data.indptr[first]), int(data.indptr[last])
        return data.values[lo:hi], data.indices[lo:hi], data.indptr[first : last + 1] - lo, lengths
    rows, lengths = _sample_rows(data, sequences, offsets, counts)
    if isinstance(data, DenseStream):
        return data.values[rows], None, None, lengths
    row_starts = data.indptr[rows]
    nnz = data.indptr[rows + 1] - row_starts
    entries = expand_ranges(row_starts, nnz)
    return data.values[entries], data.indices[entries], exclusive_cumsum(nnz), lengths


Part = tuple[StreamData, np.ndarray, "np.ndarray | None", "np.ndarray | None"]


def pack(
    info: StreamInformation,
    parts: list[Part],
    order: np.ndarray | None,
    end_of_sweep: bool,
    row_lengths: np.ndarray | None = None,
    starts: np.ndarray | None = None,
) -> MinibatchData:
    """Builds a stream's MinibatchData from per-chunk parts.

    ``parts`` holds (chunk data, sequence indices, offsets, counts) per chunk; ``order`` maps the
    concatenated units back to minibatch order (None when they already are in order). With
    ``row_lengths`` consecutive units fill output rows of those lengths (truncated BPTT) and
    ``starts`` flags the units that begin a sequence.
    """
    gathered = []
    for number, part in enumerate(parts):
        try:
            gathered.append(gather(*part))
        except ShortStreamError as error:
            raise ShortStreamError(error.unit, number) from None
    lengths = np.concatenate([g[3] for g in gathered])
    values = gathered[0][0] if len(gathered) == 1 else np.concatenate([g[0] for g in gathered])
    indices = indptr = None
    if info.is_sparse:
        indices = np.concatenate([g[1] for g in gathered if g[1] is not None])
        nnz = np.concatenate([np.diff(g[2]) for g in gathered if g[2] is not None])
        if order is not None:
            sample_rows = expand_ranges(exclusive_cumsum(lengths)[:-1][order], lengths[order])
            entries = expand_ranges(exclusive_cumsum(nnz)[:-1][sample_rows], nnz[sample_rows])
            values, indices, nnz, lengths = values[entries], indices[entries], nnz[sample_rows], lengths[order]
        indptr = exclusive_cumsum(nnz)
    elif order is not None:
        sample_rows = expand_ranges(exclusive_cumsum(lengths)[:-1][order], lengths[order])
        values, lengths = values[sample_rows], lengths[order]
    sample_starts = None
    if row_lengths is not None:
        assert starts is not None
        sample_starts = np.zeros(int(lengths.sum()), dtype=bool)
        sample_starts[exclusive_cumsum(lengths)[:-1][starts & (lengths > 0)]] = True
        lengths = row_lengths
    return MinibatchData(info, values, lengths, end_of_sweep, indices=indices, indptr=indptr, starts=sample_starts)
