"""CNTK's plug-in API (``cntk.io.UserDeserializer``) and the adapter that reads a plug-in as a deserializer.

The user's class is left as written: its ``get_chunk`` returns what the user wrote wherever it is called (inside the
plug-in too). Whoever reads the plug-in (``MinibatchSource``, through :func:`~cntkio._src.formats.protocol.
flatten_deserializers`) reads :meth:`UserDeserializer.as_deserializer`, a :class:`UserDeserializerAdapter` built
around it, which meets the :class:`~cntkio.Deserializer` protocol: it indexes the plug-in, converts and checks every
chunk (``formats/stream_data.py``) and compares it with the index and with earlier calls.
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import math
import os
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, TypeVar

import numpy as np

from cntkio._src.common.errors import ConfigError
from cntkio._src.common.streams import MAX_SAMPLE_VALUES, StreamInformation
from cntkio._src.formats.identity import index_identity
from cntkio._src.formats.protocol import ChunkIndex, Deserializer, SequenceIndex, StreamData
from cntkio._src.formats.stream_data import UserDataError, Where, convert

__all__ = ["UserDeserializer", "UserDeserializerAdapter"]

_SAME = "get_chunk must return the same data for a chunk every time (and as chunk_index describes it)"


class UserDeserializer(abc.ABC):
    """A data format in a few lines of Python (``cntk.io.UserDeserializer``), read through ``MinibatchSource``.

    Implement ``stream_infos()``, ``num_chunks()`` and ``get_chunk(chunk_id)``, which returns
    ``{stream name: data}``: in *sample mode* a NumPy array ``(num_sequences, *shape)`` or a SciPy CSR matrix
    ``(num_sequences, dim)`` (row i = sequence i, of one sample); in *sequence mode* a list with one array
    ``(length, *shape)`` or CSR matrix ``(length, dim)`` per sequence; or cntkio's flat form, a
    :class:`~cntkio.DenseStream`/:class:`~cntkio.SparseStream` (every sample back to back, no Python per sequence).
    Every stream of a chunk has the same number of sequences; in sequence mode an array of the sample shape itself
    is a sequence of one sample (as CNTK read it). A sparse stream declared ``(1, dim)`` (as CNTK's tests declare
    them) is a ``(dim,)`` stream, its data CSR matrices ``dim`` wide; minibatches give the declared shape back
    (:attr:`~cntkio.StreamInformation.sample_shape`). ``get_chunk`` must be stateless: the same chunk id always
    gives the same data.

    *Threads.* The reader loads chunks on background threads, but, as CNTK promised (``get_chunk`` runs on its
    prefetch thread), a plug-in's methods are called one at a time: every call into one plug-in object
    (``get_chunk``, ``get_chunk_of_sweep``, ``stream_infos``, ``num_chunks``, ``chunk_index``, ``chunk_keys``,
    ``identity``, ``close``) holds a lock of that object, whichever sources and threads read it. So CNTK-era code
    that seeds the global ``random`` module in ``get_chunk`` (``random.seed(chunk_id)``), or shares a file handle
    or a pandas object between calls, reads correctly. Calls into *different* plug-in objects may still overlap,
    so plug-ins that share global state with each other (two objects both seeding ``random``) should draw from
    their own generator (``random.Random(chunk_id)``, ``np.random.default_rng(chunk_id)``). A plug-in whose
    methods may run concurrently sets ``thread_safe = True`` on its class: its calls then overlap (several chunks
    parse at once, which pays when ``get_chunk`` releases the GIL: I/O, NumPy, native decoders).

    Your methods are never replaced: ``get_chunk`` returns what you wrote wherever it is called. A
    ``MinibatchSource`` reads the plug-in through :meth:`as_deserializer`, an adapter that meets the
    :class:`~cntkio.Deserializer` protocol (one per source).

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

    The class attributes of :class:`~cntkio.Deserializer` (``broadcast``, ``sweep_dependent`` with
    ``get_chunk_of_sweep(chunk_id, sweep)``, ``duplicate_key_copy``, ``supports_frame_mode``) apply to a plug-in
    too; ``identity()``, if defined, adds to what identifies the data in checkpoints (e.g. ``{"options":
    {"version": 3}}``).

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
    #: False (the default, CNTK's promise): the plug-in's methods are called one at a time (see *Threads*); True:
    #: they may be called from several threads at once.
    thread_safe: ClassVar[bool] = False
    #: As :class:`~cntkio.Deserializer`'s.
    duplicate_key_copy: ClassVar[str] = "first"
    broadcast: ClassVar[bool] = False
    sweep_dependent: ClassVar[bool] = False
    supports_frame_mode: ClassVar[bool] = True

    @abc.abstractmethod
    def stream_infos(self) -> list[StreamInformation]:
        """The streams, a non-empty list of :class:`~cntkio.StreamInformation`."""

    @abc.abstractmethod
    def num_chunks(self) -> int:
        """Number of chunks (> 0)."""

    @abc.abstractmethod
    def get_chunk(self, chunk_id: int) -> Mapping[str, Any]:
        """``{stream name: data}`` of a chunk: arrays/CSR (sample mode) or lists of them (sequence mode)."""

    def chunk_keys(self, chunk_id: int) -> Sequence[Any] | np.ndarray | None:
        """Keys of the sequences of a chunk (integers or strings, one per sequence), or None (the default) for their
        numbers in the deserializer. Called once per chunk, while the index is built."""
        del chunk_id
        return None

    def chunk_index(self, chunk_id: int) -> ChunkIndex | None:
        """Keys and lengths of a chunk's sequences, when the plug-in knows them without reading the chunk (lengths:
        int64 samples per sequence, as :meth:`get_chunk` will return them); None (the default): the index reads the
        chunk (see the class doc)."""
        del chunk_id
        return None

    @property
    def source_name(self) -> str:
        """Names the plug-in in messages and provenance (its ``filename``, else its class name)."""
        return str(getattr(self, "filename", type(self).__name__))

    def as_deserializer(self) -> UserDeserializerAdapter:
        """This plug-in as a :class:`~cntkio.Deserializer` (what ``MinibatchSource`` reads): a new adapter, which
        indexes the plug-in when first asked and converts and checks every chunk."""
        return UserDeserializerAdapter(self)


_T = TypeVar("_T")
_LOCKS: weakref.WeakKeyDictionary[Any, threading.RLock] = weakref.WeakKeyDictionary()  # plug-in -> its lock
_LOCKS_GUARD = threading.Lock()
_FORKS = [0]  # processes forked from this one's ancestors: locks taken before a fork are not used after it


def _after_fork_in_child() -> None:
    """A forked child (a DataLoader worker) inherits every lock as it was, perhaps held by a parse thread that does
    not exist here: fresh locks for every plug-in and adapter (an adapter sees the count change)."""
    global _LOCKS, _LOCKS_GUARD
    _LOCKS = weakref.WeakKeyDictionary()
    _LOCKS_GUARD = threading.Lock()
    _FORKS[0] += 1


os.register_at_fork(after_in_child=_after_fork_in_child)

# What the adapters of one plug-in object share, so a new source (each DataLoader pass, each worker) does not read
# the whole plug-in again to index it: its index, and its chunks' signatures (samples and stored values per stream).
_INDEXES: weakref.WeakKeyDictionary[Any, SequenceIndex] = weakref.WeakKeyDictionary()
_SIGNATURES: weakref.WeakKeyDictionary[Any, np.ndarray] = weakref.WeakKeyDictionary()


def _shared(table: weakref.WeakKeyDictionary[Any, _T], user: Any) -> _T | None:
    try:
        return table.get(user)
    except TypeError:  # (a plug-in that cannot be weakly referenced or hashed keeps its own)
        return None


def _share(table: weakref.WeakKeyDictionary[Any, _T], user: Any, value: _T) -> None:
    with contextlib.suppress(TypeError):
        table[user] = value


def plugin_lock(user: Any) -> threading.RLock:
    """The lock serialising the calls into one plug-in object (shared by every adapter of it; a plug-in that cannot
    be weakly referenced or hashed gets a lock of its own adapter)."""
    with _LOCKS_GUARD:
        try:
            lock = _LOCKS.get(user)
            if lock is None:
                lock = _LOCKS[user] = threading.RLock()
        except TypeError:
            lock = threading.RLock()
        return lock


class UserDeserializerAdapter(Deserializer):
    """A :class:`UserDeserializer` as a :class:`~cntkio.Deserializer`: its streams normalised and checked, its index
    (built once: :meth:`UserDeserializer.chunk_index`, else a pass over the chunks), and each chunk converted,
    checked and compared with the index and with earlier calls. The plug-in is ``user``; it is never changed.
    Every call into it goes through :meth:`_call`: one at a time unless the plug-in is ``thread_safe``."""

    def __init__(self, user: UserDeserializer):
        self.user = user
        self.casting = str(user.casting)
        self._lock: threading.RLock | None = None
        self._index_lock = threading.RLock()  # the index is built once
        self._take_locks()
        self._infos: list[StreamInformation] | None = None
        self._index: SequenceIndex | None = None
        self._indexing = False
        self._counts: dict[int, int] = {}  # while indexing: sequences of the chunks scanned
        self._prefix = [0]  # while indexing: first sequence of chunks 0, 1, ...
        self._signatures: np.ndarray | None = None  # per chunk and stream: samples and stored values (-1: not read)

    def _take_locks(self) -> None:
        """The plug-in's lock (none if it is ``thread_safe``) and an index lock, taken in this process."""
        self._lock = None if bool(self.user.thread_safe) else plugin_lock(self.user)
        self._index_lock = threading.RLock()
        self._forks = _FORKS[0]

    def _call(self, method: Callable[..., _T], *args: Any) -> _T:
        """A call into the plug-in, holding its lock unless it is ``thread_safe``."""
        if self._forks != _FORKS[0]:  # a forked child: the inherited locks may be held by threads it lacks
            self._take_locks()
        if self._lock is None:
            return method(*args)
        with self._lock:
            return method(*args)

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (DataLoader workers) without its locks; the copy takes its plug-in copy's lock."""
        state = dict(self.__dict__)
        del state["_lock"], state["_index_lock"], state["_forks"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._take_locks()

    # --- what the plug-in says of itself ------------------------------------------------------------------------
    @property
    def source_name(self) -> str:
        return self.user.source_name

    @property
    def duplicate_key_copy(self) -> str:  # type: ignore[override]
        return str(self.user.duplicate_key_copy)

    @property
    def broadcast(self) -> bool:  # type: ignore[override]
        return bool(self.user.broadcast)

    @property
    def sweep_dependent(self) -> bool:  # type: ignore[override]
        return bool(self.user.sweep_dependent)

    @property
    def supports_frame_mode(self) -> bool:  # type: ignore[override]
        return bool(self.user.supports_frame_mode)

    def identity(self) -> dict[str, Any]:
        """The plug-in's class and the index, and what the plug-in's own ``identity()`` adds."""
        cls = type(self.user)
        kind = cls.__name__ if cls.__module__.startswith("cntkio.") else f"{cls.__module__}.{cls.__qualname__}"
        identity = {"kind": kind, "index": index_identity(self)}
        extra = getattr(self.user, "identity", None)
        return {**identity, **self._call(extra)} if callable(extra) else identity

    def close(self) -> None:
        close = getattr(self.user, "close", None)
        if callable(close):
            self._call(close)

    # --- the protocol -------------------------------------------------------------------------------------------
    def stream_infos(self) -> list[StreamInformation]:
        if self._infos is None:
            self._infos = _normalise_infos(self._call(self.user.stream_infos), self.source_name)
        return list(self._infos)

    def num_chunks(self) -> int:
        chunks = self._call(self.user.num_chunks)
        if isinstance(chunks, bool) or not isinstance(chunks, (int, np.integer)) or chunks < 1:
            raise ConfigError(f"{self.source_name}: num_chunks() must be an integer > 0, got {chunks!r}")
        return int(chunks)

    def chunk_index(self, chunk_id: int) -> ChunkIndex:
        given = self._call(self.user.chunk_index, chunk_id)
        if given is not None:
            return given
        lengths = self._scan(chunk_id)
        keys = self._call(self.user.chunk_keys, chunk_id)
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
        """The index (built once per plug-in object, see :class:`UserDeserializer`)."""
        if self._index is not None:
            return self._index
        shared = _shared(_INDEXES, self.user)
        if shared is not None:
            self._index = shared
            return shared
        if self._forks != _FORKS[0]:
            self._take_locks()
        with self._index_lock:
            if self._index is not None:
                return self._index
            chunks = self.num_chunks()  # (checked before anything is read)
            self._indexing = True
            try:
                index = SequenceIndex.from_chunks([self.chunk_index(c) for c in range(chunks)], self.source_name)
            finally:
                self._indexing = False
                self._counts, self._prefix = {}, [0]
            self._index = index
            _share(_INDEXES, self.user, index)
            return index

    def get_chunk(self, chunk_id: int) -> dict[str, StreamData]:
        """The plug-in's chunk converted, checked, and compared with the index and with earlier calls."""
        return self._checked_chunk(int(chunk_id), self._call(self.user.get_chunk, chunk_id))

    def get_chunk_of_sweep(self, chunk_id: int, sweep: int) -> dict[str, StreamData]:
        of_sweep = getattr(self.user, "get_chunk_of_sweep", None)
        if not self.sweep_dependent or not callable(of_sweep):
            return self.get_chunk(chunk_id)
        return self._checked_chunk(int(chunk_id), self._call(of_sweep, chunk_id, sweep))

    # --- converting and checking --------------------------------------------------------------------------------
    def _scan(self, chunk_id: int) -> np.ndarray:
        """Reads and checks a chunk for the index: each sequence's length."""
        streams, lengths = self._convert_chunk(chunk_id, self._call(self.user.get_chunk, chunk_id))
        self._check_signature(chunk_id, streams)
        self._counts[chunk_id] = len(lengths)
        return lengths

    def _first_sequence(self, chunk_id: int) -> int:
        """Number of the first sequence of a chunk: the sequences of the chunks before it (read if not yet)."""
        prefix = self._prefix
        while len(prefix) <= chunk_id:
            before = len(prefix) - 1
            count = self._counts.get(before)
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
            stream, lengths = convert(data[info.name], info, self.casting, Where(source, chunk_id, info.name))
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
        streams, lengths = self._convert_chunk(chunk_id, data)
        if self._index is not None and not self._indexing:
            self._check_index(chunk_id, lengths, self._index)
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
        if self._signatures is None:  # per chunk and stream: samples and stored values, -1 until the chunk is read
            self._signatures = _shared(_SIGNATURES, self.user)
            if self._signatures is None:
                self._signatures = np.full((self.num_chunks(), len(streams), 2), -1, dtype=np.int64)
                _share(_SIGNATURES, self.user, self._signatures)
        table = self._signatures
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
        if info.is_sparse and len(shape) != 1:  # ((1, ..., 1, dim) is (dim,) already: StreamInformation)
            raise ConfigError(
                f"{source}: sparse stream '{info.name}' needs a 1-D shape (dim,) or (1, ..., 1, dim), got {shape}"
            )
        if math.prod(shape) > MAX_SAMPLE_VALUES:
            raise ConfigError(f"{source}: stream '{info.name}': more than {MAX_SAMPLE_VALUES} values per sample")
        if not isinstance(info.dtype, np.dtype) or shape != info.shape:
            info = dataclasses.replace(info, dtype=dtype, shape=shape)
        result.append(info)
    defining = [info.name for info in result if info.defines_mb_size]
    if len(defining) > 1:
        raise ConfigError(f"{source}: only one stream can have defines_mb_size=True, got {', '.join(defining)}")
    return result
