"""User-defined sources (``cntk.io`` §8): :class:`UserDeserializer`, :class:`MinibatchSourceFromData` and
:class:`UserMinibatchSource`.

* :class:`UserDeserializer` is CNTK's plug-in API (``stream_infos``, ``num_chunks``, ``get_chunk`` returning NumPy
  arrays, SciPy CSR matrices or lists of them) adapted onto cntkio's :class:`~cntkio.Deserializer` protocol, so it
  reads through :class:`~cntkio.MinibatchSource` with every packing mode, randomization, partitions and checkpoints,
  and, unlike CNTK, composes with other deserializers by sequence key.
* :class:`MinibatchSourceFromData` walks in-memory arrays in order, as CNTK's did.
* :class:`UserMinibatchSource` is the base of a reader written entirely by the user.

CNTK's method names are kept: a subclass's ``get_chunk`` (and ``next_minibatch``) is wrapped when the class is
created, so callers get the converted, checked data (the normalised call) while the user writes CNTK's code.
"""

from __future__ import annotations

import abc
import dataclasses
import functools
import math
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import cached_property
from typing import Any, ClassVar

import numpy as np
import scipy.sparse

from cntkio._src.api.source import FULL_DATA_SWEEP, INFINITELY_REPEAT
from cntkio._src.assemble.minibatch import Minibatch, MinibatchData
from cntkio._src.common.arrays import exclusive_cumsum
from cntkio._src.common.errors import CNTKIOError, ConfigError
from cntkio._src.common.streams import MAX_SAMPLE_VALUES, Record, StreamInformation
from cntkio._src.formats.protocol import ChunkIndex, DenseStream, Deserializer, SequenceIndex, SparseStream, StreamData

__all__ = ["MinibatchSourceFromData", "UserDataError", "UserDeserializer", "UserMinibatchSource"]

_SPARSE_INDEX_LIMIT = 2**31  # column indices are stored as int32


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


# --- wrapping the user's methods --------------------------------------------------------------------------------
_nesting = threading.local()  # per method name: depth of the user's own implementations running on this thread


class _Inside:
    """Marks the user's implementation of ``name`` as running on this thread (re-entrant)."""

    def __init__(self, name: str):
        self.name = name

    def __enter__(self) -> None:
        setattr(_nesting, self.name, getattr(_nesting, self.name, 0) + 1)

    def __exit__(self, *exc_info: object) -> None:
        setattr(_nesting, self.name, getattr(_nesting, self.name) - 1)


def _inside(name: str) -> bool:
    return bool(getattr(_nesting, name, 0))


def _wrap_methods(cls: type, adapters: Mapping[str, Callable[[Callable[..., Any]], Callable[..., Any]]]) -> None:
    """Replaces each method of ``adapters`` that ``cls`` itself defines by its adapted version."""
    for name, adapt in adapters.items():
        raw = cls.__dict__.get(name)
        if callable(raw) and not getattr(raw, "_cntkio_adapted", False):
            method = functools.wraps(raw)(adapt(raw))
            method._cntkio_adapted = True  # type: ignore[attr-defined]
            setattr(cls, name, method)


# --- converting the user's data ---------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class _Where:
    """Where data comes from, for error messages."""

    source: str
    chunk_id: int | None
    stream: str

    def error(self, message: str) -> UserDataError:
        return UserDataError(message, source=self.source, chunk_id=self.chunk_id, stream=self.stream)


def _describe(value: Any) -> str:
    if scipy.sparse.issparse(value):
        return f"a SciPy sparse matrix ({value.format}, shape {value.shape})"
    if isinstance(value, np.ndarray):
        return f"a NumPy array (shape {value.shape}, {value.dtype})"
    return f"a {type(value).__name__}"


def _is_csr(value: Any) -> bool:
    return bool(scipy.sparse.issparse(value) and value.format == "csr")


def _cast(values: np.ndarray, dtype: np.dtype[Any], casting: str, where: _Where, sequence: int | None = None) -> None:
    """Raises unless ``values`` may become ``dtype`` under the casting rule."""
    if values.dtype == dtype or np.can_cast(values.dtype, dtype, casting=casting):  # type: ignore[arg-type]
        return
    item = f"sequence {sequence}: " if sequence is not None else ""
    raise where.error(
        f"{item}values are {values.dtype}, the stream is {dtype}; a {casting!r} cast is not possible "
        f"(cast the data with .astype(np.{dtype.name}), or see UserDeserializer.casting)"
    )


def _check_sparse(values: np.ndarray, indices: np.ndarray, indptr: np.ndarray, dim: int, where: _Where) -> None:
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
    if nnz == 0:
        return
    used = indices[:nnz]
    low, high = int(used.min()), int(used.max())
    if low >= 0 and high < dim:
        return
    entry = int(np.argmin(used)) if low < 0 else int(np.argmax(used))
    row = int(np.searchsorted(indptr, entry, side="right")) - 1
    bad = int(used[entry])
    limit = " (beyond int32)" if bad >= _SPARSE_INDEX_LIMIT or bad < -_SPARSE_INDEX_LIMIT else ""
    raise where.error(f"sample {row}: sparse index {bad}{limit} outside [0, {dim})")


def _sparse_stream(
    matrix: Any, info: StreamInformation, casting: str, where: _Where, seq_offsets: np.ndarray
) -> SparseStream:
    """A checked CSR matrix (rows = samples) as a stream: int32 indices, sorted, duplicates summed (as SciPy)."""
    dim = info.shape[0]
    values, indices, indptr = np.asarray(matrix.data), np.asarray(matrix.indices), np.asarray(matrix.indptr)
    _check_sparse(values, indices, indptr, dim, where)
    _cast(values, info.dtype, casting, where)
    nnz = int(indptr[-1])
    if not matrix.has_canonical_format:  # sorted and without duplicates; sum_duplicates sorts too, on a copy
        matrix = scipy.sparse.csr_matrix((values[:nnz], indices[:nnz], indptr), shape=matrix.shape, copy=True)
        matrix.sum_duplicates()
        values, indices, indptr = matrix.data, matrix.indices, matrix.indptr
        nnz = int(indptr[-1])
    return SparseStream(
        values[:nnz].astype(info.dtype, copy=False),
        indices[:nnz].astype(np.int32, copy=False),
        indptr.astype(np.int64, copy=False),
        seq_offsets,
        dim,
    )


def _convert(data: Any, info: StreamInformation, casting: str, where: _Where) -> tuple[StreamData, np.ndarray]:
    """One stream of a chunk in the user's form as protocol data, and each sequence's number of samples.

    Sample mode: an ndarray ``(num_sequences, *shape)`` or a CSR matrix ``(num_sequences, dim)``, one sample per
    sequence. Sequence mode: a list (or tuple) with one ndarray ``(length, *shape)`` or CSR ``(length, dim)`` per
    sequence (vectorised except for one look at each list element), or, with no Python per sequence, cntkio's
    flat form: a ``DenseStream(values, seq_offsets)`` or ``SparseStream``.
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
        if scipy.sparse.issparse(data) and not _is_csr(data):
            raise where.error(f"sparse data must be CSR, got {data.format} (convert it with .tocsr())")
        if not _is_csr(data):
            raise where.error(f"expected a SciPy CSR matrix or a list of them, got {_describe(data)}")
        if data.shape[1] != shape[0]:
            raise where.error(f"the CSR matrix has {data.shape[1]} columns, the stream's dimension is {shape[0]}")
        count = data.shape[0]
        stream = _sparse_stream(data, info, casting, where, np.arange(count + 1, dtype=np.int64))
        return stream, np.ones(count, dtype=np.int64)
    if scipy.sparse.issparse(data):
        raise where.error(f"the stream is dense: give a NumPy array (num_sequences, *{shape}), not a sparse matrix")
    if not isinstance(data, np.ndarray):
        raise where.error(f"expected a NumPy array or a list of them, got {_describe(data)}")
    if data.shape[1:] != shape or data.ndim != len(shape) + 1:
        raise where.error(
            f"sample mode: expected an array of shape (num_sequences, {', '.join(map(str, shape))}), got {data.shape}"
        )
    _cast(data, info.dtype, casting, where)
    count = data.shape[0]
    values = data.astype(info.dtype, copy=False)
    return DenseStream(values, np.arange(count + 1, dtype=np.int64)), np.ones(count, dtype=np.int64)


def _convert_flat(
    data: DenseStream | SparseStream, info: StreamInformation, casting: str, where: _Where
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
            matrix = scipy.sparse.csr_matrix(
                (np.asarray(data.values), np.asarray(data.indices), indptr), shape=(samples, info.shape[0]), copy=False
            )
        except ValueError as error:
            raise where.error(f"malformed CSR arrays: {error}") from None
        return _sparse_stream(matrix, info, casting, where, seq_offsets), lengths
    values = np.asarray(data.values)
    if values.shape[1:] != info.shape or len(values) != samples:
        raise where.error(f"values must be ({samples}, {', '.join(map(str, info.shape))}), got {values.shape}")
    _cast(values, info.dtype, casting, where)
    return DenseStream(values.astype(info.dtype, copy=False), seq_offsets), lengths


def _convert_sequences(
    items: list[Any], info: StreamInformation, casting: str, where: _Where
) -> tuple[StreamData, np.ndarray]:
    """Sequence mode: one array or CSR matrix per sequence, concatenated (one pass over the list to check it)."""
    shape, dtype = info.shape, info.dtype
    lengths = np.empty(len(items), dtype=np.int64)
    if info.is_sparse:
        index_types = set()
        for number, item in enumerate(items):
            if not _is_csr(item):
                kind = "give CSR matrices, not dense arrays" if isinstance(item, np.ndarray) else "expected CSR"
                raise where.error(f"sequence {number}: {kind} (got {_describe(item)})")
            if item.shape[1] != shape[0]:
                raise where.error(
                    f"sequence {number}: the CSR matrix has {item.shape[1]} columns, the stream's dim is {shape[0]}"
                )
            if item.dtype != dtype:
                _cast(np.asarray(item.data), dtype, casting, where, number)
            index_types.add(item.indices.dtype)
            lengths[number] = item.shape[0]
        seq_offsets = exclusive_cumsum(lengths)
        if not items:
            empty = scipy.sparse.csr_matrix((0, shape[0]), dtype=dtype)
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
        matrix = scipy.sparse.csr_matrix((values, indices, indptr), shape=(int(seq_offsets[-1]), shape[0]), copy=False)
        return _sparse_stream(matrix, info, casting, where, seq_offsets), lengths
    for number, item in enumerate(items):
        if not isinstance(item, np.ndarray):
            kind = "the stream is dense, give NumPy arrays" if scipy.sparse.issparse(item) else "expected a NumPy array"
            raise where.error(f"sequence {number}: {kind} (got {_describe(item)})")
        if item.ndim != len(shape) + 1 or item.shape[1:] != shape:
            raise where.error(
                f"sequence {number}: expected an array (length, {', '.join(map(str, shape))}), got shape {item.shape}"
            )
        if item.dtype != dtype:
            _cast(item, dtype, casting, where, number)
        lengths[number] = item.shape[0]
    if items:
        values = np.concatenate(items, axis=0, dtype=dtype, casting="unsafe")  # each item's cast was checked above
    else:
        values = np.empty((0, *shape), dtype=dtype)
    return DenseStream(values, exclusive_cumsum(lengths)), lengths


def _normalise_infos(infos: Any, source: str) -> list[StreamInformation]:
    """Checks a plug-in's stream descriptions; dtypes given as types (``np.float32``) and int shapes are normalised."""
    if not isinstance(infos, (list, tuple)) or not infos:
        raise ConfigError(f"{source}: stream_infos() must return a non-empty list of StreamInformation")
    result: list[StreamInformation] = []
    names: set[str] = set()
    for info in infos:
        if not isinstance(info, StreamInformation):
            raise ConfigError(f"{source}: stream_infos() must return StreamInformation, got {type(info).__name__}")
        if info.name in names:
            raise ConfigError(f"{source}: two streams are named '{info.name}'")
        names.add(info.name)
        if info.storage_format not in ("dense", "sparse"):
            raise ConfigError(f"{source}: stream '{info.name}': storage_format must be 'dense' or 'sparse'")
        try:
            dtype = np.dtype(info.dtype)
        except TypeError:
            raise ConfigError(f"{source}: stream '{info.name}': {info.dtype!r} is not a NumPy dtype") from None
        raw_shape = info.shape
        shape = (raw_shape,) if isinstance(raw_shape, (int, np.integer)) else tuple(raw_shape)
        if any(isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d <= 0 for d in shape):
            raise ConfigError(f"{source}: stream '{info.name}': shape must hold positive integers, got {raw_shape!r}")
        shape = tuple(int(d) for d in shape)
        if info.is_sparse and len(shape) != 1:
            raise ConfigError(f"{source}: sparse stream '{info.name}' needs a 1-D shape (dim,), got {shape}")
        if math.prod(shape) > MAX_SAMPLE_VALUES:
            raise ConfigError(f"{source}: stream '{info.name}': more than {MAX_SAMPLE_VALUES} values per sample")
        if not isinstance(info.dtype, np.dtype) or shape != info.shape:
            info = dataclasses.replace(info, dtype=dtype, shape=shape)
        result.append(info)
    return result


# --- UserDeserializer -------------------------------------------------------------------------------------------
def _adapt_get_chunk(raw: Callable[..., Any]) -> Callable[..., Any]:
    def get_chunk(self: UserDeserializer, chunk_id: int) -> Any:
        if _inside("get_chunk"):  # a user's get_chunk calling super().get_chunk, or delegating: the user's data
            return raw(self, chunk_id)
        with _Inside("get_chunk"):
            data = raw(self, chunk_id)
        return self._checked_chunk(int(chunk_id), data)

    return get_chunk


def _adapt_stream_infos(raw: Callable[..., Any]) -> Callable[..., Any]:
    def stream_infos(self: UserDeserializer) -> Any:
        if _inside("stream_infos"):
            return raw(self)
        cached: list[StreamInformation] | None = self.__dict__.get("_cntkio_infos")
        if cached is None:
            with _Inside("stream_infos"):
                infos = raw(self)
            cached = self.__dict__["_cntkio_infos"] = _normalise_infos(infos, self.source_name)
        return list(cached)

    return stream_infos


class UserDeserializer(Deserializer):
    """A data format in a few lines of Python (``cntk.io.UserDeserializer``), read through ``MinibatchSource``.

    Implement ``stream_infos()``, ``num_chunks()`` and ``get_chunk(chunk_id)``, which returns
    ``{stream name: data}``: in *sample mode* a NumPy array ``(num_sequences, *shape)`` or a SciPy CSR matrix
    ``(num_sequences, dim)`` (row i = sequence i, of one sample); in *sequence mode* a list with one array
    ``(length, *shape)`` or CSR matrix ``(length, dim)`` per sequence. Every stream of a chunk has the same number of
    sequences. ``get_chunk`` must be stateless: the same chunk id always gives the same data, from any thread.

    *The index.* CNTK's API gives no index, so the first time it is needed (constructing a ``MinibatchSource``)
    ``get_chunk`` is called once per chunk, in order, and each sequence's length is taken: its samples in the
    ``defines_mb_size`` stream if there is one, else the most samples any stream has. That is a full pass over the
    data before the first minibatch (then chunks are read again as the reader needs them). Override
    :meth:`chunk_index` to give keys and lengths without reading chunks.

    *Keys.* A sequence's key is its number in the deserializer (chunk after chunk, from 0), so a composite joins it
    with a CTF file whose sequence ids are those numbers. Give other keys (integers or strings, e.g. file names) by
    overriding :meth:`chunk_keys`.

    *Checks.* Every chunk is checked before anything reads it; a violation raises :class:`UserDataError` naming the
    chunk and the stream: a missing or extra stream, streams with different sequence counts, a sequence with no
    samples, data of the wrong kind (CSR for a dense stream or the reverse; sparse data must be CSR), a wrong sample
    shape or CSR width, sparse indices that are not integers, negative or ``>= dim`` (any integer type is accepted and
    stored as int32; indices are sorted and duplicates summed, on a copy), and a dtype the :attr:`casting` rule
    refuses. Values are cast to the stream's dtype only when NumPy's ``casting`` rule allows it: ``"safe"`` (the
    default) makes only lossless casts (``int8``/``uint8``/``int16``/``float16``/``bool`` to ``float32``), so
    ``float64`` data for a ``float32`` stream is an error; set ``casting = "same_kind"`` on the class to round it, or
    ``"no"`` to demand the exact dtype.

    *A chunk that changes between calls* is detected when its number of sequences, any sequence's length (as
    indexed), or any stream's total number of samples or stored sparse entries differs from an earlier call (the
    index pass, or the first load when :meth:`chunk_index` is overridden). Values, and keys (read once, by the
    index), are not compared.

    ``get_chunk`` is wrapped when the subclass is created: callers (the reader) get the checked chunk as
    :class:`~cntkio.DenseStream`/:class:`~cntkio.SparseStream`, while inside any ``get_chunk`` (``super()``
    calls, one plug-in delegating to another) ``get_chunk`` returns the user's data as given.

    Example::

        class Constant(UserDeserializer):
            def stream_infos(self):
                return [StreamInformation("x", 0, "dense", np.float32, (2,))]

            def num_chunks(self):
                return 4

            def get_chunk(self, chunk_id):  # 10 sequences of one sample, every value = the chunk id
                return {"x": np.full((10, 2), chunk_id, dtype=np.float32)}

        source = MinibatchSource([Constant(), CTFDeserializer("labels.ctf", streams)])  # joined by sequence number
    """

    #: NumPy casting rule for values whose dtype is not the stream's: "no", "safe" (lossless only) or "same_kind".
    casting: ClassVar[str] = "safe"

    def __init_subclass__(cls, **kwargs: Any):
        super().__init_subclass__(**kwargs)
        _wrap_methods(cls, {"get_chunk": _adapt_get_chunk, "stream_infos": _adapt_stream_infos})

    @abc.abstractmethod
    def stream_infos(self) -> list[StreamInformation]:
        """The streams, a non-empty list of :class:`~cntkio.StreamInformation`."""

    @abc.abstractmethod
    def num_chunks(self) -> int:
        """Number of chunks (> 0)."""

    @abc.abstractmethod
    def get_chunk(self, chunk_id: int) -> dict[str, Any]:
        """``{stream name: data}`` of a chunk: arrays/CSR (sample mode) or lists of them (sequence mode)."""

    def chunk_keys(self, chunk_id: int) -> Sequence[Any] | np.ndarray | None:
        """Keys of the sequences of a chunk (integers or strings, one per sequence), or None (the default) for their
        numbers in the deserializer. Called once per chunk, while the index is built."""
        del chunk_id
        return None

    def chunk_index(self, chunk_id: int) -> ChunkIndex:
        """Keys and lengths of a chunk's sequences. The default reads the chunk (see the class doc); override it to
        give them without reading (lengths: int64 samples per sequence, as :meth:`get_chunk` will return them)."""
        lengths = self._scan(chunk_id)
        keys = self.chunk_keys(chunk_id)
        if keys is None:
            first = self._first_sequence(chunk_id)
            keys = np.arange(first, first + len(lengths), dtype=np.int64)
        elif len(keys) != len(lengths):
            raise UserDataError(
                f"chunk_keys() gave {len(keys)} keys for {len(lengths)} sequences",
                source=self.source_name,
                chunk_id=chunk_id,
            )
        return ChunkIndex(chunk_id, keys, lengths)

    def sequence_index(self) -> SequenceIndex:
        """The index (built once, see the class doc)."""
        index: SequenceIndex | None = self.__dict__.get("_cntkio_user_index")
        if index is not None:
            return index
        chunks = self.num_chunks()
        if isinstance(chunks, bool) or not isinstance(chunks, (int, np.integer)) or chunks < 1:
            raise ConfigError(f"{self.source_name}: num_chunks() must be an integer > 0, got {chunks!r}")
        self.__dict__["_cntkio_indexing"] = True
        try:
            index = super().sequence_index()
        finally:
            self.__dict__["_cntkio_indexing"] = False
            self.__dict__.pop("_cntkio_counts", None)
            self.__dict__.pop("_cntkio_prefix", None)
        self.__dict__["_cntkio_user_index"] = index
        return index

    # --- the adapter --------------------------------------------------------------------------------------------
    def _user_chunk(self, chunk_id: int) -> Any:
        """The user's data of a chunk, as ``get_chunk`` returns it."""
        with _Inside("get_chunk"):
            return self.get_chunk(chunk_id)

    def _scan(self, chunk_id: int) -> np.ndarray:
        """Reads and checks a chunk for the index: each sequence's length."""
        streams, lengths = self._convert_chunk(chunk_id, self._user_chunk(chunk_id))
        self._check_signature(chunk_id, streams)
        self.__dict__.setdefault("_cntkio_counts", {})[chunk_id] = len(lengths)
        return lengths

    def _first_sequence(self, chunk_id: int) -> int:
        """Number of the first sequence of a chunk: the sequences of the chunks before it (read if not yet)."""
        counts: dict[int, int] = self.__dict__.setdefault("_cntkio_counts", {})
        prefix: list[int] = self.__dict__.setdefault("_cntkio_prefix", [0])
        while len(prefix) <= chunk_id:
            before = len(prefix) - 1
            count = counts.get(before)
            prefix.append(prefix[-1] + (count if count is not None else len(self._scan(before))))
        return prefix[chunk_id]

    def _convert_chunk(self, chunk_id: int, data: Any) -> tuple[dict[str, StreamData], np.ndarray]:
        """Checks and converts a chunk; returns it and each sequence's length."""
        source = self.source_name
        infos = self.stream_infos()
        if not isinstance(data, Mapping):
            raise UserDataError(
                f"get_chunk() must return a dict of stream name -> data, got {type(data).__name__}",
                source=source,
                chunk_id=chunk_id,
            )
        names = [info.name for info in infos]
        missing = [n for n in names if n not in data]
        extra = [str(n) for n in data if n not in names]
        if missing or extra:
            parts = ([f"no stream {', '.join(map(repr, missing))}"] if missing else []) + (
                [f"unknown stream {', '.join(map(repr, extra))}"] if extra else []
            )
            raise UserDataError(
                f"get_chunk() returned {' and '.join(parts)}; the streams are {', '.join(map(repr, names))}",
                source=source,
                chunk_id=chunk_id,
                stream=(missing or extra)[0],
            )
        streams: dict[str, StreamData] = {}
        counts: list[np.ndarray] = []
        for info in infos:
            stream, lengths = _convert(data[info.name], info, self.casting, _Where(source, chunk_id, info.name))
            if counts and len(lengths) != len(counts[0]):
                raise UserDataError(
                    f"stream '{info.name}' has {len(lengths)} sequences, stream '{infos[0].name}' has "
                    f"{len(counts[0])}; every stream of a chunk must have the same number of sequences",
                    source=source,
                    chunk_id=chunk_id,
                    stream=info.name,
                )
            streams[info.name] = stream
            counts.append(lengths)
        defining = [n for n, info in enumerate(infos) if info.defines_mb_size]
        lengths = counts[defining[0]] if defining else np.maximum.reduce(counts)
        if len(lengths) and int(lengths.min()) < 1:
            bad = int(np.argmin(lengths))
            which = f"stream '{infos[defining[0]].name}' (defines_mb_size)" if defining else "any stream"
            raise UserDataError(f"sequence {bad} has no samples in {which}", source=source, chunk_id=chunk_id)
        return streams, lengths

    def _checked_chunk(self, chunk_id: int, data: Any) -> dict[str, StreamData]:
        """The adapted ``get_chunk``: converted, checked, and compared with the index and with earlier calls."""
        streams, lengths = self._convert_chunk(chunk_id, data)
        index: SequenceIndex | None = self.__dict__.get("_cntkio_user_index")
        if index is not None and not self.__dict__.get("_cntkio_indexing"):
            self._check_index(chunk_id, lengths, index)
        self._check_signature(chunk_id, streams)
        return streams

    def _check_index(self, chunk_id: int, lengths: np.ndarray, index: SequenceIndex) -> None:
        """The chunk has the sequences and lengths the index has."""
        source, starts = self.source_name, index.chunk_starts
        if not 0 <= chunk_id < len(starts) - 1:
            raise UserDataError(f"no such chunk (there are {len(starts) - 1})", source, chunk_id)
        a, b = int(starts[chunk_id]), int(starts[chunk_id + 1])
        if len(lengths) != b - a:
            raise UserDataError(
                f"the chunk now has {len(lengths)} sequences, the index has {b - a}; {_SAME}", source, chunk_id
            )
        expected = index.lengths[a:b]
        if not np.array_equal(lengths, expected):
            bad = int(np.flatnonzero(lengths != expected)[0])
            raise UserDataError(
                f"sequence {bad} now has {int(lengths[bad])} samples, the index has {int(expected[bad])}; {_SAME}",
                source,
                chunk_id,
            )

    def _check_signature(self, chunk_id: int, streams: dict[str, StreamData]) -> None:
        """Each stream has as many samples and stored values as at the chunk's first read (16 bytes a stream and
        chunk are kept)."""
        table: np.ndarray | None = self.__dict__.get("_cntkio_signatures")
        if table is None:  # per chunk and stream: samples and stored values, -1 until the chunk is read
            table = self.__dict__.setdefault(
                "_cntkio_signatures", np.full((int(self.num_chunks()), len(streams), 2), -1, dtype=np.int64)
            )
        if not 0 <= chunk_id < len(table):
            raise UserDataError(f"no such chunk (there are {len(table)})", self.source_name, chunk_id)
        signature = [(int(s.seq_offsets[-1]), len(s.values)) for s in streams.values()]
        seen = table[chunk_id]
        if seen[0, 0] < 0:
            seen[:] = signature
            return
        for name, (samples, stored), (was_samples, was_stored) in zip(streams, signature, seen.tolist()):
            if samples != was_samples or stored != was_stored:
                raise UserDataError(
                    f"the stream now has {samples} samples and {stored} stored values, an earlier call gave "
                    f"{was_samples} and {was_stored}; {_SAME}",
                    self.source_name,
                    chunk_id,
                    name,
                )


_SAME = "get_chunk must return the same data for a chunk every time (and as chunk_index describes it)"


# --- UserMinibatchSource ----------------------------------------------------------------------------------------
_SIZE_NAMES = ("minibatch_size_in_samples", "num_samples")
_USER_ORDER = ("number_of_workers", "worker_rank", "device")
_SOURCE_ORDER = ("input_map", "device", "num_data_partitions", "partition_index")
_ALIASES = {"num_data_partitions": "number_of_workers", "partition_index": "worker_rank"}


def _parse_call(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[int, int, int, Any, Mapping[Any, Any] | None]:
    """``next_minibatch`` arguments in either convention: ``MinibatchSource``'s ``(size, input_map=None,
    device=None, num_data_partitions=None, partition_index=None)`` or ``UserMinibatchSource``'s ``(num_samples,
    number_of_workers, worker_rank, device=None)``. Returns (size, workers, rank, device, input_map)."""
    given: dict[str, Any] = {}

    def put(name: str, value: Any) -> None:
        canonical = _ALIASES.get(name, "size" if name in _SIZE_NAMES else name)
        if canonical in given:
            raise TypeError(f"next_minibatch() got two values for '{canonical}' ({name})")
        given[canonical] = value

    if args:
        put("num_samples", args[0])
        rest = args[1:]
        user_style = bool(rest) and isinstance(rest[0], (int, np.integer)) and not isinstance(rest[0], bool)
        order = _USER_ORDER if user_style else _SOURCE_ORDER
        if len(rest) > len(order):
            raise TypeError(f"next_minibatch() takes at most {len(order) + 1} positional arguments")
        for name, value in zip(order, rest):
            put(name, value)
    for name, value in kwargs.items():
        if name not in (*_SIZE_NAMES, *_USER_ORDER, *_SOURCE_ORDER):
            raise TypeError(f"next_minibatch() got an unexpected keyword argument '{name}'")
        put(name, value)
    if "size" not in given:
        raise TypeError("next_minibatch() needs the minibatch size (minibatch_size_in_samples)")
    size = given["size"]
    workers = 1 if given.get("number_of_workers") is None else given["number_of_workers"]
    rank = 0 if given.get("worker_rank") is None else given["worker_rank"]
    for name, value in (("minibatch size", size), ("number of workers", workers), ("worker rank", rank)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"the {name} must be an integer, got {value!r}")
    if size <= 0:
        raise ValueError(f"minibatch_size_in_samples must be positive, got {size}")
    if workers < 1 or not 0 <= rank < workers:
        raise ValueError(f"invalid worker rank {rank} of {workers} workers")
    return int(size), int(workers), int(rank), given.get("device"), given.get("input_map")


def _adapt_next_minibatch(raw: Callable[..., Any]) -> Callable[..., Any]:
    def next_minibatch(self: UserMinibatchSource, *args: Any, **kwargs: Any) -> Any:
        size, workers, rank, device, input_map = _parse_call(args, kwargs)
        result = raw(self, size, workers, rank, device)
        if not isinstance(result, Mapping):
            raise TypeError(
                f"{type(self).__name__}.next_minibatch must return a dict of StreamInformation -> MinibatchData, "
                f"got {type(result).__name__}"
            )
        if not result:
            return {}
        if type(result) is dict:  # name lookup (mb["features"]) as MinibatchSource's minibatches have
            result = Minibatch(result)
        if input_map is None:
            return result
        mapped = Minibatch({key: _lookup(result, stream) for key, stream in input_map.items()})
        if hasattr(result, "provenance"):
            mapped.provenance = result.provenance
        return mapped

    return next_minibatch


def _lookup(minibatch: Mapping[Any, Any], stream: Any) -> Any:
    if stream in minibatch:
        return minibatch[stream]
    name = stream if isinstance(stream, str) else getattr(stream, "name", None)
    found = [data for info, data in minibatch.items() if getattr(info, "name", info) == name]
    if len(found) != 1:
        raise KeyError(f"expected exactly one stream named {name!r} in the minibatch, found {len(found)}")
    return found[0]


class UserMinibatchSource(abc.ABC):
    """Base of a reader written entirely in Python (``cntk.io.UserMinibatchSource``).

    Implement ``stream_infos()`` and ``next_minibatch(num_samples, number_of_workers, worker_rank, device=None)``
    returning ``{StreamInformation: MinibatchData}`` (``{}`` at the end). Callers may use either calling convention
    (``source.next_minibatch(64)``, ``next_minibatch(64, 2, 1)``, or ``MinibatchSource``'s ``input_map=``,
    ``num_data_partitions=``, ``partition_index=``): the method is wrapped when the subclass is created, so it is
    always called as ``(num_samples, number_of_workers, worker_rank, device)``, checked, and a plain dict it returns
    becomes a :class:`~cntkio.minibatch.Minibatch` (indexable by stream name). For checkpoints override
    :meth:`get_checkpoint_state` and :meth:`restore_from_checkpoint`.

    Example::

        class Counter(UserMinibatchSource):
            def __init__(self):
                self.info, self.next = StreamInformation("n", 0, "dense", np.dtype(np.int64), (1,)), 0

            def stream_infos(self):
                return [self.info]

            def next_minibatch(self, num_samples, number_of_workers, worker_rank, device=None):
                values = np.arange(self.next, self.next + num_samples)[worker_rank::number_of_workers, None]
                self.next += num_samples
                return {self.info: MinibatchData(self.info, values, np.ones(len(values)), False)}

            def get_checkpoint_state(self):
                return {"next": self.next}

            def restore_from_checkpoint(self, state):
                self.next = state["next"]

        Counter().next_minibatch(8)["n"].asarray()
    """

    def __init__(self) -> None:  # noqa: B027 (not abstract: CNTK's subclasses call it)
        """Nothing to set up (subclasses may call it, as CNTK's required)."""

    def __init_subclass__(cls, **kwargs: Any):
        super().__init_subclass__(**kwargs)
        _wrap_methods(cls, {"next_minibatch": _adapt_next_minibatch})

    @abc.abstractmethod
    def stream_infos(self) -> list[StreamInformation]:
        """The streams this source produces."""

    @abc.abstractmethod
    def next_minibatch(
        self, num_samples: int, number_of_workers: int, worker_rank: int, device: Any = None
    ) -> Mapping[Any, Any]:
        """``{StreamInformation: MinibatchData}`` of about ``num_samples`` samples for worker ``worker_rank`` of
        ``number_of_workers``, or ``{}`` when the source is exhausted."""

    @cached_property
    def streams(self) -> Record:
        """A :class:`~cntkio.Record` from stream name to :class:`~cntkio.StreamInformation`."""
        return Record({info.name: info for info in self.stream_infos()})

    def stream_info(self, name: str) -> StreamInformation:
        """The stream named ``name``; a KeyError unless exactly one stream has that name."""
        matches = [info for info in self.stream_infos() if info.name == name]
        if len(matches) != 1:
            raise KeyError(f"expected exactly one stream named {name!r}, found {len(matches)}")
        return matches[0]

    def __getitem__(self, name: str) -> StreamInformation:
        return self.stream_info(name)

    def get_checkpoint_state(self) -> dict[str, Any]:
        """A dict with string keys describing the position; ``{}`` unless overridden."""
        return {}

    def restore_from_checkpoint(self, state: Mapping[str, Any]) -> None:
        """Continues from a state of :meth:`get_checkpoint_state`; the default accepts only an empty state."""
        if state:
            raise NotImplementedError(
                f"{type(self).__name__} cannot restore a checkpoint: implement restore_from_checkpoint(state)"
            )

    @property
    def current_position(self) -> dict[str, Any]:
        """Alias of :meth:`get_checkpoint_state` / :meth:`restore_from_checkpoint`."""
        return self.get_checkpoint_state()

    @current_position.setter
    def current_position(self, state: Mapping[str, Any]) -> None:
        self.restore_from_checkpoint(state)

    def is_infinite(self) -> bool:
        """Whether the source never ends; False unless overridden."""
        return False

    def iter_minibatches(self, minibatch_size_in_samples: int, **kwargs: Any) -> Iterator[Mapping[Any, Any]]:
        """Yields minibatches until the source returns ``{}``."""
        while minibatch := self.next_minibatch(minibatch_size_in_samples, **kwargs):
            yield minibatch


# --- MinibatchSourceFromData ------------------------------------------------------------------------------------
class _ItemProvenance:
    """``sequence_keys`` of a minibatch of :class:`MinibatchSourceFromData`: ``(source, item number)``."""

    def __init__(self, source: str, items: np.ndarray):
        self.items = items
        self._source = source

    @property
    def keys(self) -> list[tuple[str, Any]]:
        return [(self._source, item) for item in self.items.tolist()]

    def keys_in(self, deserializer: int) -> list[tuple[str, Any]]:
        del deserializer
        return self.keys

    @property
    def sources(self) -> list[str]:
        return [self._source]


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """``concatenate([arange(s, s + n) for s, n in zip(starts, lengths)])``, vectorised."""
    offsets = exclusive_cumsum(lengths)
    return np.repeat(starts - offsets[:-1], lengths) + np.arange(int(offsets[-1]), dtype=np.int64)


def _is_sequence_type(kind: Any) -> bool:
    """CNTK's typed form ``(data, Sequence[Tensor[...]])``: a type with a sequence axis besides the batch axis."""
    axes = getattr(kind, "dynamic_axes", None)
    return axes is not None and len(axes) > 1


class MinibatchSourceFromData(UserMinibatchSource):
    """In-memory data as a source (``cntk.io.MinibatchSourceFromData``): no randomization; items are read in order
    and the source wraps around at the end.

    ``data_streams`` maps stream names to data: a NumPy array ``(num_items, *shape)`` or a SciPy CSR matrix
    ``(num_items, dim)`` (sample mode: every item one sample), or a list of arrays ``(length, *shape)`` / CSR
    matrices ``(length, dim)`` (sequence mode: item i a sequence); CNTK's ``(data, type)`` pairs are accepted (a
    type with a sequence axis makes an array's rows sequences). Every stream has the same number of items; a
    stream's dtype and sample shape are its data's (other list elements are cast only losslessly).

    Each minibatch holds whole items, at least one, and stops before the largest of the streams' summed lengths
    would pass the request or ``max_samples`` (``FULL_DATA_SWEEP``: one pass over the items); it never wraps around
    inside a minibatch (the minibatch ending the data has ``end_of_sweep``). Distributed, worker r of N reads
    ``items[begin + r:end + r:N]`` of the minibatch ``items[begin:end]`` all workers step over (CNTK's rule). The
    checkpoint is ``{'cursor', 'total_num_samples'}``. Sample-mode arrays are read in place (pass a copy to change
    them meanwhile); sequence-mode lists are concatenated once; minibatches are fresh arrays. ``sequence_keys``
    are item numbers.

    Example::

        source = MinibatchSourceFromData({"x": np.arange(15, dtype=np.float32).reshape(5, 3)}, max_samples=5)
        source.next_minibatch(3)[source.streams.x].asarray()  # items 0-2, then 3-4, then {}
        words = [np.ones((3, 10), np.float32), np.ones((2, 10), np.float32)]  # two sequences
        source = MinibatchSourceFromData({"words": words, "label": np.eye(2, dtype=np.float32)})
    """

    def __init__(self, data_streams: Mapping[str, Any], max_samples: int = INFINITELY_REPEAT):
        super().__init__()
        if not isinstance(data_streams, Mapping) or not data_streams:
            raise ConfigError("at least one stream must be given, as {name: data} or {name: (data, type)}")
        source = type(self).__name__
        self._infos: list[StreamInformation] = []
        self._data: list[StreamData] = []
        per_stream: list[np.ndarray] = []
        self._sequence_mode: list[bool] = []  # per stream: items are sequences (else samples: no sequence axis)
        for number, (name, given) in enumerate(data_streams.items()):
            value, sequences = given, isinstance(given, (list, tuple))
            if isinstance(given, tuple):
                if len(given) != 2:
                    raise ConfigError(f"stream '{name}': a tuple must be (data, type)")
                value, kind = given
                sequences = isinstance(value, (list, tuple)) or _is_sequence_type(kind)
                if sequences and isinstance(value, np.ndarray):
                    value = list(value)
            info = self._infer_stream(str(name), number, value, sequences)
            where = _Where(source, None, info.name)
            stream, lengths = _convert(list(value) if sequences else value, info, "safe", where)
            self._infos.append(info)
            self._data.append(stream)
            self._sequence_mode.append(bool(sequences))
            per_stream.append(lengths)
        counts = {info.name: len(lengths) for info, lengths in zip(self._infos, per_stream)}
        if len(set(counts.values())) != 1:
            raise ConfigError(f"every stream must have the same number of items, got {counts}")
        self.num_items = len(per_stream[0])
        self._stream_lengths = per_stream
        self._cumulative = [exclusive_cumsum(lengths) for lengths in per_stream]
        sweep = max(int(c[-1]) for c in self._cumulative)
        self.sweep_size = sweep
        self._max_samples = max_samples
        if max_samples == FULL_DATA_SWEEP:
            self._limit: float = sweep
        elif max_samples is None or max_samples == INFINITELY_REPEAT or max_samples == math.inf:
            self._limit = math.inf
        elif isinstance(max_samples, bool) or not isinstance(max_samples, (int, np.integer)) or max_samples < 0:
            raise ConfigError(f"max_samples must be an integer >= 0, got {max_samples!r}")
        else:
            self._limit = int(max_samples)
        self._cursor = 0
        self._total_num_samples = 0

    @staticmethod
    def _infer_stream(name: str, number: int, value: Any, sequences: bool) -> StreamInformation:
        """The stream of some data: sparse when it is CSR; its dtype and sample shape (of the first item)."""
        if sequences:
            items = list(value)
            if not items:
                raise ConfigError(f"stream '{name}': the data is empty")
            first = items[0]
            if not (isinstance(first, np.ndarray) or _is_csr(first)):
                raise ConfigError(
                    f"stream '{name}': sequences must be NumPy arrays or CSR matrices, got {_describe(first)}"
                )
            if first.ndim < 1:
                raise ConfigError(f"stream '{name}': a sequence must be an array (length, *shape), got a scalar")
            sample_shape = tuple(first.shape[1:])
        else:
            first = value
            if not (isinstance(first, np.ndarray) or _is_csr(first)):
                raise ConfigError(
                    f"stream '{name}': data must be a NumPy array, a SciPy CSR matrix or a list of them, "
                    f"got {_describe(first)}"
                )
            if first.ndim < 1 or first.shape[0] == 0:
                raise ConfigError(f"stream '{name}': the data is empty")
            sample_shape = tuple(first.shape[1:])
        sparse = _is_csr(first)
        dtype = np.dtype(first.dtype)
        return StreamInformation(name, number, "sparse" if sparse else "dense", dtype, sample_shape)

    def stream_infos(self) -> list[StreamInformation]:
        return list(self._infos)

    def is_infinite(self) -> bool:
        """True unless ``max_samples`` is set."""
        return self._limit == math.inf

    def next_minibatch(
        self, num_samples: int, number_of_workers: int = 1, worker_rank: int = 0, device: Any = None
    ) -> Minibatch | dict[Any, Any]:
        """The next items (see the class doc), or ``{}`` once ``max_samples`` samples were delivered."""
        del device  # arrays are returned on the host
        if self._total_num_samples >= self._limit:
            return {}
        begin, count = self._cursor, self.num_items
        budget = min(num_samples, self._limit - self._total_num_samples)
        end = count
        for cumulative in self._cumulative:  # the largest end whose summed length fits, in every stream
            target = int(cumulative[begin]) + min(int(cumulative[-1]), budget)
            end = min(end, int(np.searchsorted(cumulative, target, side="right")) - 1)
        end = max(end, begin + 1)  # at least one item
        taken = max(int(c[end] - c[begin]) for c in self._cumulative)
        self._total_num_samples += taken
        at_end = end == count
        self._cursor = 0 if at_end else end
        end_of_sweep = at_end or self._total_num_samples >= self._limit
        items = np.arange(begin + worker_rank, min(end + worker_rank, count), number_of_workers, dtype=np.int64)
        result = Minibatch()
        provenance = _ItemProvenance(type(self).__name__, items)
        result.provenance = provenance  # type: ignore[assignment]
        for info, stream, lengths, sequences in zip(self._infos, self._data, self._stream_lengths, self._sequence_mode):
            data = self._gather(info, stream, items, lengths[items], end_of_sweep)
            data.provenance = provenance
            data.sequence_axis = sequences
            result[info] = data
        return result

    @staticmethod
    def _gather(
        info: StreamInformation, stream: StreamData, items: np.ndarray, lengths: np.ndarray, end_of_sweep: bool
    ) -> MinibatchData:
        """The samples of some items as fresh buffers."""
        rows = _ranges(stream.seq_offsets[items], lengths)
        if isinstance(stream, DenseStream):
            return MinibatchData(info, stream.values[rows], lengths, end_of_sweep)
        row_nnz = stream.indptr[rows + 1] - stream.indptr[rows]
        entries = _ranges(stream.indptr[rows], row_nnz)
        return MinibatchData(
            info,
            stream.values[entries],
            lengths,
            end_of_sweep,
            indices=stream.indices[entries],
            indptr=exclusive_cumsum(row_nnz),
        )

    def get_checkpoint_state(self) -> dict[str, Any]:
        """``{'cursor': next item, 'total_num_samples': samples delivered}`` (CNTK's form)."""
        return {"cursor": self._cursor, "total_num_samples": self._total_num_samples}

    def restore_from_checkpoint(self, state: Mapping[str, Any]) -> None:
        """Continues from a state of :meth:`get_checkpoint_state`; a malformed one is a ``ValueError``."""
        if not isinstance(state, Mapping) or not {"cursor", "total_num_samples"} <= set(state):
            raise ConfigError(f"checkpoint: expected {{'cursor', 'total_num_samples'}}, got {state!r}")
        cursor, total = state["cursor"], state["total_num_samples"]
        for name, value in (("cursor", cursor), ("total_num_samples", total)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
                raise ConfigError(f"checkpoint: {name} must be an integer >= 0, got {value!r}")
        if cursor >= self.num_items:
            raise ConfigError(f"checkpoint: cursor {cursor} is beyond the {self.num_items} items")
        self._cursor, self._total_num_samples = int(cursor), int(total)
