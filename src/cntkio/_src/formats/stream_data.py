"""Data that user code gives, as protocol streams (:class:`~cntkio.DenseStream`/:class:`~cntkio.SparseStream`):
the one converter of it, and its checks.

* :func:`convert` takes CNTK's forms of one stream: *sample mode* an array ``(num_sequences, *shape)`` or a CSR
  matrix ``(num_sequences, dim)``; *sequence mode* a list with one array ``(length, *shape)`` or CSR matrix
  ``(length, dim)`` per sequence; or cntkio's flat form, a ``DenseStream``/``SparseStream``. It serves the
  ``UserDeserializer`` adapter (``formats/user.py``), ``MinibatchSourceFromData`` and ``RecordDeserializer`` (which
  first brings its decoders' looser forms to these).
* The checks, shared by every caller: the values' dtype against the stream's under a NumPy casting rule
  (:func:`check_cast`), CSR structure and sparse indices in ``[0, dim)`` (:func:`bad_index`), and sparse data made
  canonical — int32 indices sorted within each sample, duplicates summed (:func:`canonical_sparse`).
* :func:`slot_columns` checks any deserializer's chunk data where the chunk cache copies it into its slots (the
  dtype exactly the stream's, indices narrowed to int32 only when they fit).

Every error is a :class:`UserDataError` naming the data's source, chunk and stream (and the sequence or sample).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from cntkio._src.common.arrays import exclusive_cumsum, issparse, scipy_sparse
from cntkio._src.common.errors import CNTKIOError
from cntkio._src.common.streams import StreamInformation
from cntkio._src.formats.protocol import DenseStream, SparseStream, StreamData

__all__ = [
    "UserDataError",
    "Where",
    "bad_index",
    "canonical_sparse",
    "check_cast",
    "convert",
    "describe",
    "is_csr",
    "sample_width",
    "slot_columns",
]

SPARSE_INDEX_LIMIT = 2**31  # column indices are stored as int32


class UserDataError(CNTKIOError, ValueError):
    """Data a user plug-in returned breaks its contract. Names the plug-in (``source``), the ``chunk_id`` and the
    ``stream`` where known; ``reason`` is the message without them."""

    def __init__(self, reason: str, source: str = "", chunk_id: int | None = None, stream: str | None = None):
        self.reason, self.source, self.chunk_id, self.stream = reason, source, chunk_id, stream
        where = source
        if chunk_id is not None:
            where += f", chunk {chunk_id}"
        if stream is not None:
            where += f", stream '{stream}'"
        super().__init__(f"{where}: {reason}" if where else reason)

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.reason, self.source, self.chunk_id, self.stream)


@dataclasses.dataclass(frozen=True)
class Where:
    """Where data comes from, for error messages."""

    source: str
    chunk_id: int | None
    stream: str

    def error(self, message: str) -> UserDataError:
        return UserDataError(message, source=self.source, chunk_id=self.chunk_id, stream=self.stream)


def describe(value: Any) -> str:
    """What a value is, for messages."""
    if issparse(value):
        return f"a SciPy sparse matrix ({value.format}, shape {value.shape})"
    if isinstance(value, np.ndarray):
        return f"a NumPy array (shape {value.shape}, {value.dtype})"
    return f"a {type(value).__name__}"


def is_csr(value: Any) -> bool:
    return issparse(value) and value.format == "csr"


def sample_width(info: StreamInformation) -> int:
    """Values of one sample (dense), or the dimension (sparse)."""
    return int(np.prod(info.shape)) if info.shape else 1


# --- the checks --------------------------------------------------------------------------------------------------
def check_cast(
    values: np.ndarray, dtype: np.dtype[Any], casting: str, where: Where, sequence: int | None = None, hint: str = ""
) -> None:
    """Raises unless ``values`` may become ``dtype`` under the casting rule (``hint`` says how to make them)."""
    if values.dtype == dtype or np.can_cast(values.dtype, dtype, casting=casting):  # type: ignore[arg-type]
        return
    item = f"sequence {sequence}: " if sequence is not None else ""
    raise where.error(f"{item}values are {values.dtype}, the stream is {dtype}{hint}")


def _user_hint(casting: str, dtype: np.dtype[Any]) -> str:
    return (
        f"; a {casting!r} cast is not possible (cast the data with .astype(np.{dtype.name}), or see "
        "UserDeserializer.casting)"
    )


def bad_index(indices: np.ndarray, dim: int) -> tuple[int, str] | None:
    """The first of ``indices`` outside ``[0, dim)`` (its position) and why, or None when all are inside."""
    if not len(indices):
        return None
    low, high = int(indices.min()), int(indices.max())
    if low >= 0 and high < dim:
        return None
    entry = int(np.flatnonzero((indices < 0) | (indices >= dim))[0])
    bad = int(indices[entry])
    limit = " (beyond int32)" if bad >= SPARSE_INDEX_LIMIT or bad < -SPARSE_INDEX_LIMIT else ""
    return entry, f"sparse index {bad}{limit} outside [0, {dim})"


def _check_csr(values: np.ndarray, indices: np.ndarray, indptr: np.ndarray, dim: int, where: Where) -> None:
    """Checks CSR arrays (rows = samples) before anything reads them: index type and range, row pointers."""
    if indices.dtype.kind not in "iu":
        raise where.error(f"sparse indices must be integers, got {indices.dtype}")
    if not len(indptr) or int(indptr[0]) != 0:
        raise where.error("malformed CSR matrix: indptr must start at 0")
    if len(indptr) > 1 and int(np.diff(indptr).min()) < 0:
        raise where.error("malformed CSR matrix: indptr decreases")
    nnz = int(indptr[-1]) if len(indptr) else 0
    if nnz > len(indices) or nnz > len(values):
        raise where.error(f"malformed CSR matrix: indptr ends at {nnz}, beyond its {len(indices)} entries")
    found = bad_index(indices[:nnz], dim)
    if found is not None:
        entry, reason = found
        row = int(np.searchsorted(indptr, entry, side="right")) - 1
        raise where.error(f"sample {row}: {reason}")


def canonical_sparse(
    values: np.ndarray, indices: np.ndarray, indptr: np.ndarray, seq_offsets: np.ndarray, dim: int, dtype: Any
) -> SparseStream:
    """Checked CSR arrays (rows = samples, indices in range) as a stream: values of ``dtype``, int32 indices sorted
    within each sample, duplicates summed (as SciPy does; on a copy), int64 row pointers."""
    nnz = int(indptr[-1]) if len(indptr) else 0
    values, indices = values[:nnz], indices[:nnz]
    matrix = scipy_sparse().csr_matrix((values, indices, indptr), shape=(len(indptr) - 1, dim), copy=False)
    if not matrix.has_canonical_format:  # sorted and without duplicates; sum_duplicates sorts too, on a copy
        matrix = scipy_sparse().csr_matrix((values, indices, indptr), shape=matrix.shape, copy=True)
        matrix.sum_duplicates()
        values, indices, indptr = matrix.data, matrix.indices, matrix.indptr
    return SparseStream(
        values.astype(dtype, copy=False),
        indices.astype(np.int32, copy=False),
        indptr.astype(np.int64, copy=False),
        seq_offsets,
        dim,
    )


def _sparse_stream(matrix: Any, info: StreamInformation, casting: str, where: Where, seq_offsets: np.ndarray) -> Any:
    """A CSR matrix (rows = samples), checked, as a canonical stream."""
    values, indices, indptr = np.asarray(matrix.data), np.asarray(matrix.indices), np.asarray(matrix.indptr)
    _check_csr(values, indices, indptr, info.shape[0], where)
    check_cast(values, info.dtype, casting, where, hint=_user_hint(casting, info.dtype))
    return canonical_sparse(values, indices, indptr, seq_offsets, info.shape[0], info.dtype)


# --- CNTK's forms ------------------------------------------------------------------------------------------------
def convert(data: Any, info: StreamInformation, casting: str, where: Where) -> tuple[StreamData, np.ndarray]:
    """One stream of a chunk in the user's form as protocol data, and each sequence's number of samples.

    Sample mode: an ndarray ``(num_sequences, *shape)`` or a CSR matrix ``(num_sequences, dim)``, one sample per
    sequence. Sequence mode: a list (or tuple) with one ndarray ``(length, *shape)`` or CSR ``(length, dim)`` per
    sequence (vectorised except for one look at each list element; an ndarray of ``shape`` itself is a sequence of
    one sample, as CNTK read it), or, with no Python per sequence, cntkio's flat form: a
    ``DenseStream(values, seq_offsets)`` or ``SparseStream``. Values are cast to the stream's dtype when the
    ``casting`` rule allows it.
    """
    shape = info.shape
    if isinstance(data, (list, tuple)):
        return _convert_sequences(list(data), info, casting, where)
    if isinstance(data, (DenseStream, SparseStream)):
        return _convert_flat(data, info, casting, where)
    if info.is_sparse:
        if isinstance(data, np.ndarray):
            raise where.error(
                f"the stream is sparse: give a SciPy CSR matrix (num_sequences, {shape[0]}), not a dense array"
            )
        if issparse(data) and not is_csr(data):
            raise where.error(f"sparse data must be CSR, got {data.format} (convert it with .tocsr())")
        if not is_csr(data):
            raise where.error(f"expected a SciPy CSR matrix or a list of them, got {describe(data)}")
        if data.shape[1] != shape[0]:
            raise where.error(f"the CSR matrix has {data.shape[1]} columns, the stream's dimension is {shape[0]}")
        count = data.shape[0]
        stream = _sparse_stream(data, info, casting, where, np.arange(count + 1, dtype=np.int64))
        return stream, np.ones(count, dtype=np.int64)
    if issparse(data):
        raise where.error(f"the stream is dense: give a NumPy array (num_sequences, *{shape}), not a sparse matrix")
    if not isinstance(data, np.ndarray):
        raise where.error(f"expected a NumPy array or a list of them, got {describe(data)}")
    if data.shape[1:] != shape or data.ndim != len(shape) + 1:
        raise where.error(
            f"sample mode: expected an array of shape (num_sequences, {', '.join(map(str, shape))}), got {data.shape}"
        )
    check_cast(data, info.dtype, casting, where, hint=_user_hint(casting, info.dtype))
    count = data.shape[0]
    values = data.astype(info.dtype, copy=False)
    return DenseStream(values, np.arange(count + 1, dtype=np.int64)), np.ones(count, dtype=np.int64)


def _convert_flat(
    data: DenseStream | SparseStream, info: StreamInformation, casting: str, where: Where
) -> tuple[StreamData, np.ndarray]:
    """cntkio's flat form (every sample back to back, ``seq_offsets`` splitting them), checked like the others."""
    seq_offsets = np.asarray(data.seq_offsets)
    if seq_offsets.ndim != 1 or not len(seq_offsets) or seq_offsets.dtype.kind not in "iu":
        raise where.error("seq_offsets must be a 1-D integer array of num_sequences + 1 offsets")
    seq_offsets = seq_offsets.astype(np.int64, copy=False)
    lengths = np.diff(seq_offsets)
    if int(seq_offsets[0]) != 0 or (len(lengths) and int(lengths.min()) < 0):
        raise where.error("seq_offsets must start at 0 and never decrease")
    samples = int(seq_offsets[-1])
    if isinstance(data, SparseStream) != info.is_sparse:
        raise where.error(f"the stream is {info.storage_format}, got a {type(data).__name__}")
    if isinstance(data, SparseStream):
        indptr = np.asarray(data.indptr)
        if indptr.ndim != 1 or len(indptr) != samples + 1:
            raise where.error(f"indptr must hold one offset per sample plus one ({samples + 1}), got {indptr.shape}")
        try:
            matrix = scipy_sparse().csr_matrix(
                (np.asarray(data.values), np.asarray(data.indices), indptr), shape=(samples, info.shape[0]), copy=False
            )
        except ValueError as error:
            raise where.error(f"malformed CSR arrays: {error}") from None
        return _sparse_stream(matrix, info, casting, where, seq_offsets), lengths
    values = np.asarray(data.values)
    if values.shape[1:] != info.shape or len(values) != samples:
        raise where.error(f"values must be ({samples}, {', '.join(map(str, info.shape))}), got {values.shape}")
    check_cast(values, info.dtype, casting, where, hint=_user_hint(casting, info.dtype))
    return DenseStream(values.astype(info.dtype, copy=False), seq_offsets), lengths


def _convert_sequences(
    items: list[Any], info: StreamInformation, casting: str, where: Where
) -> tuple[StreamData, np.ndarray]:
    """Sequence mode: one array or CSR matrix per sequence, concatenated (one pass over the list to check it)."""
    shape, dtype = info.shape, info.dtype
    hint = _user_hint(casting, dtype)
    lengths = np.empty(len(items), dtype=np.int64)
    if info.is_sparse:
        index_types = set()
        for number, item in enumerate(items):
            if not is_csr(item):
                kind = "give CSR matrices, not dense arrays" if isinstance(item, np.ndarray) else "expected CSR"
                raise where.error(f"sequence {number}: {kind} (got {describe(item)})")
            if item.shape[1] != shape[0]:
                raise where.error(
                    f"sequence {number}: the CSR matrix has {item.shape[1]} columns, the stream's dim is {shape[0]}"
                )
            if item.dtype != dtype:
                check_cast(np.asarray(item.data), dtype, casting, where, number, hint)
            index_types.add(item.indices.dtype)
            lengths[number] = item.shape[0]
        seq_offsets = exclusive_cumsum(lengths)
        if not items:
            empty = scipy_sparse().csr_matrix((0, shape[0]), dtype=dtype)
            return _sparse_stream(empty, info, casting, where, seq_offsets), lengths
        # every row pointer, item after item: item i's are pointers[bounds[i]:bounds[i + 1]] (rows + 1 of them)
        pointers = np.concatenate([m.indptr for m in items], dtype=np.int64, casting="unsafe")
        bounds = exclusive_cumsum(lengths + 1)
        firsts, lasts = pointers[bounds[:-1]], pointers[bounds[1:] - 1]
        if len(lasts) and int((lasts - firsts).min()) < 0:
            raise where.error(f"sequence {int(np.argmin(lasts - firsts))}: malformed CSR matrix (indptr decreases)")
        spans = list(zip(firsts.tolist(), lasts.tolist()))
        values = np.concatenate([m.data[a:b] for m, (a, b) in zip(items, spans)], dtype=dtype, casting="unsafe")
        index_type = next(iter(index_types)) if len(index_types) == 1 else np.dtype(np.int64)
        indices = np.concatenate(
            [m.indices[a:b] for m, (a, b) in zip(items, spans)], dtype=index_type, casting="unsafe"
        )
        rows = np.ones(len(pointers), dtype=bool)
        rows[bounds[:-1]] = False  # each item's leading pointer
        nnz_offsets = exclusive_cumsum(lasts - firsts)
        indptr = np.zeros(int(seq_offsets[-1]) + 1, dtype=np.int64)
        indptr[1:] = pointers[rows] + np.repeat(nnz_offsets[:-1] - firsts, lengths)
        matrix = scipy_sparse().csr_matrix(
            (values, indices, indptr), shape=(int(seq_offsets[-1]), shape[0]), copy=False
        )
        return _sparse_stream(matrix, info, casting, where, seq_offsets), lengths
    for number, item in enumerate(items):
        if not isinstance(item, np.ndarray):
            kind = "the stream is dense, give NumPy arrays" if issparse(item) else "expected a NumPy array"
            raise where.error(f"sequence {number}: {kind} (got {describe(item)})")
        if item.shape == shape:  # one sample without the length axis: a sequence of one sample (as CNTK read it)
            items[number] = item = item[np.newaxis]
        if item.ndim != len(shape) + 1 or item.shape[1:] != shape:
            raise where.error(
                f"sequence {number}: expected an array (length, {', '.join(map(str, shape))}), got shape {item.shape}"
            )
        if item.dtype != dtype:
            check_cast(item, dtype, casting, where, number, hint)
        lengths[number] = item.shape[0]
    if items:
        values = np.concatenate(items, axis=0, dtype=dtype, casting="unsafe")  # each item's cast was checked above
    else:
        values = np.empty((0, *shape), dtype=dtype)
    return DenseStream(values, exclusive_cumsum(lengths)), lengths


# --- any deserializer's data, into the chunk cache -------------------------------------------------------------------
def slot_columns(
    data: StreamData, info: StreamInformation, source: str, chunk: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
    """A stream's arrays in the form the native slots take (values as rows of :func:`sample_width`, int64
    ``seq_offsets``, int32 indices and int64 ``indptr``), converted only where needed: the values must be of the
    stream's dtype; sparse indices of another integer type are narrowed when they fit int32."""
    where = Where(source, chunk, info.name)
    values = np.asarray(data.values)
    check_cast(values, info.dtype, "no", where)
    seq_offsets = np.ascontiguousarray(data.seq_offsets, dtype=np.int64)
    if isinstance(data, SparseStream):
        indices = np.asarray(data.indices)
        if indices.dtype != np.int32:
            found = bad_index(indices, SPARSE_INDEX_LIMIT)
            if found is not None:
                raise where.error(f"entry {found[0]}: {found[1]}")
            indices = indices.astype(np.int32)
        return (
            np.ascontiguousarray(values),
            seq_offsets,
            np.ascontiguousarray(indices),
            np.ascontiguousarray(data.indptr, dtype=np.int64),
        )
    width = sample_width(info)
    rows = values.reshape(len(values), -1) if values.size else values.reshape(len(values), width)
    return np.ascontiguousarray(rows), seq_offsets, None, None
