"""The deserializer protocol: an index of chunks and sequences, and stateless chunk parsing.

Every format (and every plug-in written as one) implements :class:`Deserializer`; a ``UserDeserializer``
(CNTK's plug-in API, ``formats/user.py``) is read through the adapter it makes (:func:`as_deserializer`).
After construction a deserializer is immutable: ``get_chunk`` may be called from any thread, in any
order, any number of times, and returns the same data each time.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from cntkio._src.common.arrays import narrow_lengths, scipy_sparse
from cntkio._src.common.errors import ConfigError
from cntkio._src.common.keys import KeyColumn
from cntkio._src.common.streams import StreamInformation
from cntkio._src.formats.error_ledger import ErrorLedger
from cntkio._src.formats.identity import index_identity

if TYPE_CHECKING:
    import scipy.sparse


@dataclass(frozen=True)
class DenseStream:
    """Dense samples of a chunk: ``values[seq_offsets[i]:seq_offsets[i+1]]`` is sequence i."""

    values: np.ndarray  # (num_samples, *shape)
    seq_offsets: np.ndarray  # int64, (num_sequences + 1,)


@dataclass(frozen=True)
class SparseStream:
    """Sparse samples of a chunk in CSR form: row = sample, ``seq_offsets`` groups rows by sequence."""

    values: np.ndarray
    indices: np.ndarray  # int32 column indices, sorted within each row
    indptr: np.ndarray  # int64, (num_samples + 1,)
    seq_offsets: np.ndarray  # int64, (num_sequences + 1,)
    dim: int

    def csr(self) -> scipy.sparse.csr_matrix:
        """All samples of the chunk as one CSR matrix (num_samples, dim), sharing memory."""
        return scipy_sparse().csr_matrix(
            (self.values, self.indices, self.indptr), shape=(len(self.indptr) - 1, self.dim), copy=False
        )


StreamData = DenseStream | SparseStream


class ParsedChunk(dict):  # type: ignore[type-arg]
    """What ``get_chunk`` returns: stream name -> data. ``invalid`` (optional, uint8 per sequence) flags the
    sequences a counted error left short (1: frame mode and truncated BPTT skip them; sequence mode keeps what
    parsed) or without usable data (2: an undecodable image; skipped in every mode). A skipped sequence still
    needs its place in the streams (any samples, e.g. zeros)."""

    def __init__(self, *args: Any, invalid: np.ndarray | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.invalid = invalid


@dataclass(frozen=True)
class FileTable:
    """The files a deserializer's sequences are in: ``names``, and the first sequence of each file (int64; None when
    there is one file)."""

    names: list[str]
    first_sequences: np.ndarray | None = None

    def of(self, sequences: np.ndarray) -> tuple[list[str], np.ndarray]:
        """The names, and each sequence's number in that list (int64)."""
        if self.first_sequences is None:
            return self.names, np.zeros(len(sequences), dtype=np.int64)
        return self.names, np.searchsorted(self.first_sequences, np.asarray(sequences, dtype=np.int64), "right") - 1


@dataclass(frozen=True)
class ChunkIndex:
    """What the index knows of one chunk before parsing it: per-sequence keys and lengths."""

    chunk_id: int
    keys: Sequence[Any] | np.ndarray  # a NumPy array (numeric keys) or a list of strings
    lengths: np.ndarray  # int64 samples per sequence (on the stream that defines the minibatch size)

    @property
    def num_sequences(self) -> int:
        return len(self.lengths)

    @property
    def num_samples(self) -> int:
        return int(self.lengths.sum())


class Deserializer(abc.ABC):
    """One data format. Subclass it to add a format: implement the four methods below.

    What an implementation must guarantee (the reader relies on it; violations it can see are errors naming
    the chunk and stream, at the boundary):

    * **Stateless chunks**: ``get_chunk(c)`` returns the same data every time it is called, for the life of
      the object: the reader drops chunks and parses them again in later sweeps, and a checkpoint restored in
      another process parses them again there.
    * **Thread safety**: ``get_chunk`` is called from background threads, several chunks at once, in any
      order; it must not share mutable state between calls (release the GIL in heavy native code to gain
      from it).
    * **Index agreement**: chunk ``c`` holds exactly the sequences ``chunk_index(c)`` lists, in that order;
      each stream gives every sequence its samples (``seq_offsets``); no sequence has more samples than its
      index length (the most over its streams, or its ``defines_mb_size`` stream's).
    * **Arrays**: dense values ``(samples, *shape)`` of the stream's dtype; sparse CSR with int32 indices in
      ``[0, dim)`` (sorted within a sample), int64 ``indptr`` and ``seq_offsets``. Returned arrays are treated
      as read-only (minibatches copy out of them).
    * **Keys**: integers (up to uint64), strings, or other hashable objects (joined by ``str()``); a key
      should name one sequence (duplicates are reported when deserializers are joined by key).
    * **Pickling**: to be used by ``DataLoader`` worker processes, the object must pickle (file formats
      reopen their files; see :class:`cntkio.CTFDeserializer`).

    Example (a complete format: every sequence ``k`` holds ``k % 3 + 1`` samples of ``[k, step]``)::

        class Ramp(Deserializer):
            def __init__(self, chunks):
                self.chunks = chunks
                self.info = StreamInformation("x", 0, "dense", np.dtype(np.float32), (2,))

            def stream_infos(self):
                return [self.info]

            def num_chunks(self):
                return self.chunks

            def chunk_index(self, c):
                keys = np.arange(10 * c, 10 * c + 10)
                return ChunkIndex(c, keys, keys % 3 + 1)

            def get_chunk(self, c):
                index = self.chunk_index(c)
                rows = [[k, t] for k, n in zip(index.keys, index.lengths) for t in range(n)]
                offsets = np.concatenate([[0], np.cumsum(index.lengths)])
                return {"x": DenseStream(np.array(rows, dtype=np.float32), offsets)}

        source = MinibatchSource(Ramp(chunks=4), max_sweeps=1)
    """

    #: Which copy a lookup by key finds when this deserializer, joined as a secondary, holds a key more than
    #: once: ``"first"`` (in index order) or ``"last"`` (CNTK's image map files kept the last line).
    duplicate_key_copy: str = "first"

    #: ``True``: every sequence holds exactly one sample, which a minibatch repeats to the length of the joined
    #: primary sequence (every frame of it in frame mode) — CNTK's ``expandToUtterance``, e.g. an utterance's
    #: i-vector beside its frames. Only a secondary deserializer may broadcast.
    broadcast: bool = False

    #: ``True``: chunks differ from sweep to sweep (random augmentation drawn from the seed, the sweep and the
    #: sequence key): the reader asks :meth:`get_chunk_of_sweep` and keeps a copy per sweep parity, so a window
    #: spanning a sweep boundary holds both; a checkpoint restores the same data, as the sweep is part of it.
    sweep_dependent: bool = False

    #: ``False``: the data means nothing frame by frame (e.g. MLF labels with phone boundaries, whose 2.0 marks a
    #: segment start), so ``MinibatchSource(frame_mode=True)`` refuses it, as CNTK did.
    supports_frame_mode: bool = True

    # Optional members: a format sets those it has; the reader reads them as declared here, with these defaults.

    #: Seconds spent building the index when the deserializer was made (``MinibatchSource.stats()``'s "index").
    index_seconds: float = 0.0

    #: The size of its chunks in bytes of its files, as asked for (0: not a byte-chunked format); the memory budget
    #: estimates a parsed chunk from it.
    chunk_size_in_bytes: int = 0

    #: The ledger of the bad records it counts under ``max_errors`` (None: it counts none).
    errors: ErrorLedger | None = None

    #: How much it logs of its own (0 errors, 1 warnings, 2 information); None: nothing (see :meth:`set_trace_level`).
    trace_level: int | None = None

    def set_trace_level(self, level: int) -> None:
        """How much it logs from now on (``MinibatchSource(trace_level=...)``): its level and its ledger's; a
        deserializer without a level of its own ignores it."""
        if self.trace_level is not None:
            self.trace_level = level
            if self.errors is not None:
                self.errors.trace_level = level

    def ledgers(self) -> list[tuple[ErrorLedger, Deserializer]]:
        """Its ledger with itself (a sharded corpus: each shard's), for checkpoints and error reports."""
        return [] if self.errors is None else [(self.errors, self)]

    def close(self) -> None:
        """Releases its files and threads; reading afterwards may raise. Nothing to release by default."""
        return None

    @abc.abstractmethod
    def stream_infos(self) -> list[StreamInformation]:
        """The streams this deserializer produces, in order."""

    @abc.abstractmethod
    def num_chunks(self) -> int:
        """Number of chunks (> 0)."""

    @abc.abstractmethod
    def chunk_index(self, chunk_id: int) -> ChunkIndex:
        """Keys and lengths of the sequences of a chunk, without parsing it."""

    @abc.abstractmethod
    def get_chunk(self, chunk_id: int) -> dict[str, StreamData]:  # or a ParsedChunk
        """Parses a chunk: stream name -> data of every sequence of the chunk, in index order."""

    def get_chunk_of_sweep(self, chunk_id: int, sweep: int) -> dict[str, StreamData]:
        """The chunk as sweep ``sweep`` reads it; the same for every sweep unless :attr:`sweep_dependent`."""
        return self.get_chunk(chunk_id)

    def prefetch_chunk(self, chunk_id: int) -> None:
        """A hint, given when the reader queues the chunk's load: it will be read soon. Formats of remote data
        start fetching its bytes (so parse threads parse while the next chunks arrive); nothing by default."""
        return None

    def cancel_prefetch(self, chunk_id: int) -> None:
        """The hint :meth:`prefetch_chunk` gave is withdrawn (the reader dropped the chunk from its plan, or
        closed): what was fetched for it is let go. Nothing by default."""
        return None

    def sequence_index(self) -> SequenceIndex:
        """Every sequence's length and key, chunk after chunk, as columns (built once, then cached).

        Formats override it with their native index; the default asks :meth:`chunk_index` once per chunk.
        """
        cached: SequenceIndex | None = getattr(self, "_cntkio_sequence_index", None)
        if cached is None:
            chunks = [self.chunk_index(c) for c in range(self.num_chunks())]
            cached = SequenceIndex.from_chunks(chunks, self.source_name)
            self._cntkio_sequence_index = cached
        return cached

    def identity(self) -> dict[str, Any]:
        """Identifies the data by its content, not by where it lies, so that a checkpoint restores on a copy of it
        (other paths, names or modification times) and never on other data (:mod:`cntkio._src.formats.identity`).

        A small JSON dict: ``kind`` (the class), ``index`` (:func:`~cntkio._src.formats.identity.index_identity`:
        counts and a
        digest of the chunk boundaries, lengths and keys); file formats add ``options`` (those that shape the
        index) and ``files`` (:func:`~cntkio._src.formats.identity.file_entry` of each file). A plug-in whose index
        does not
        show all of its data (e.g. the same keys and lengths over other values) adds what tells its data apart::

            def identity(self):
                return {**super().identity(), "options": {"version": self.dataset_version}}
        """
        cls = type(self)
        kind = cls.__name__ if cls.__module__.startswith("cntkio.") else f"{cls.__module__}.{cls.__qualname__}"
        return {"kind": kind, "index": index_identity(self)}

    def sequence_lengths(self) -> np.ndarray:
        """Lengths of every sequence, chunk after chunk."""
        return self.sequence_index().lengths

    def chunk_sequence_counts(self) -> np.ndarray:
        """Number of sequences in each chunk (int64)."""
        return np.diff(self.sequence_index().chunk_starts)

    def sequence_keys(self, sequence_ids: np.ndarray) -> list[Any]:
        """Keys of sequences given by their index in file order (chunk after chunk)."""
        return self.sequence_index().keys.take(np.asarray(sequence_ids, dtype=np.int64))

    @property
    def source_name(self) -> str:
        """Names the data in provenance records (a file name for file formats)."""
        return str(getattr(self, "filename", type(self).__name__))

    def file_table(self) -> FileTable:
        """The source (file) of the sequences: :attr:`source_name` unless the data spans several files (a sharded
        corpus)."""
        return FileTable([self.source_name])

    def sources_of(self, sequences: np.ndarray) -> list[str]:
        """The source (file) of each sequence (by its number in the index)."""
        names, numbers = self.file_table().of(sequences)
        return [names[n] for n in numbers.tolist()]

    def chunk_file_bytes(self) -> np.ndarray | None:
        """Bytes of each chunk in its file as the index knows them (int64, one per chunk), None when the format
        does not know them (``cntkio explain``)."""
        return None


class DeserializerGroup(tuple):  # type: ignore[type-arg]
    """Several deserializers made by one call (``HTKFeatureDeserializer`` with several streams gives one per
    stream, as CNTK did). :class:`~cntkio.MinibatchSource` takes a group as if its deserializers were listed one
    by one, in order.

    Example::

        features = HTKFeatureDeserializer(StreamDefs(mfcc=StreamDef(shape=13, scp="a.scp"),
                                                     ivector=StreamDef(shape=100, scp="iv.scp", broadcast=True)))
        source = MinibatchSource([features, labels])  # = [mfcc reader, ivector reader, labels]
    """


class ReadsAsDeserializer(Protocol):
    """What a reader takes beside deserializers: a plug-in read through an adapter it makes (a
    ``UserDeserializer``, whose own methods follow CNTK's plug-in API, not this protocol)."""

    def as_deserializer(self) -> Deserializer: ...


def as_deserializer(reader: Deserializer | ReadsAsDeserializer) -> Deserializer:
    """A deserializer as it is; a plug-in as the adapter it makes (:class:`ReadsAsDeserializer`)."""
    if isinstance(reader, Deserializer):
        return reader
    adapt = getattr(reader, "as_deserializer", None)
    if not callable(adapt):
        raise TypeError(f"expected a Deserializer or a UserDeserializer, got {type(reader).__name__}")
    adapted: Deserializer = adapt()
    return adapted


def flatten_deserializers(deserializers: Any) -> list[Deserializer]:
    """A deserializer (or plug-in), or a sequence of deserializers, plug-ins and groups, as a flat list of
    deserializers (plug-ins adapted: :func:`as_deserializer`)."""
    if isinstance(deserializers, Deserializer) or callable(getattr(deserializers, "as_deserializer", None)):
        return [as_deserializer(deserializers)]
    flat: list[Deserializer] = []
    for item in deserializers:
        flat.extend(item if isinstance(item, DeserializerGroup) else [as_deserializer(item)])
    return flat


class IndexedDeserializer(Deserializer):
    """A deserializer that builds its whole index when it is constructed: ``_index`` (a :class:`SequenceIndex`)
    and ``_infos`` (its streams); the protocol's index methods derive from them."""

    _index: SequenceIndex
    _infos: list[StreamInformation]

    def stream_infos(self) -> list[StreamInformation]:
        return list(self._infos)

    def num_chunks(self) -> int:
        return len(self._index.chunk_starts) - 1

    def sequence_index(self) -> SequenceIndex:
        return self._index

    def chunk_index(self, chunk_id: int) -> ChunkIndex:
        a, b = self._chunk_range(chunk_id)
        return ChunkIndex(chunk_id, self._index.keys.slice(a, b).take(np.arange(b - a)), self._index.lengths[a:b])

    def _chunk_range(self, chunk_id: int) -> tuple[int, int]:
        """The sequences ``[a, b)`` of a chunk (IndexError for a chunk that does not exist)."""
        if not 0 <= chunk_id < self.num_chunks():
            raise IndexError(f"chunk {chunk_id} out of range (0..{self.num_chunks() - 1})")
        starts = self._index.chunk_starts
        return int(starts[chunk_id]), int(starts[chunk_id + 1])


@dataclass(frozen=True)
class SequenceIndex:
    """The index of a deserializer as columns: sequence i of the data is row ``i - chunk_starts[c]`` of
    chunk c, has ``lengths[i]`` samples and key ``keys[i]``."""

    chunk_starts: np.ndarray  # int64, (num_chunks + 1,)
    lengths: np.ndarray  # int32 or int64, (num_sequences,)
    keys: KeyColumn

    @property
    def num_sequences(self) -> int:
        return len(self.lengths)

    @property
    def nbytes(self) -> int:
        """Bytes the index holds (its columns)."""
        return int(self.chunk_starts.nbytes + self.lengths.nbytes + self.keys.nbytes)

    @staticmethod
    def from_chunks(chunks: list[ChunkIndex], source: str) -> SequenceIndex:
        """Builds the columns from per-chunk indexes, checking them."""
        if not chunks:
            raise ConfigError(f"{source}: a deserializer needs at least one chunk")
        counts = np.array([c.num_sequences for c in chunks], dtype=np.int64)
        starts = np.zeros(len(chunks) + 1, dtype=np.int64)
        np.cumsum(counts, out=starts[1:])
        lengths = np.concatenate([np.asarray(c.lengths, dtype=np.int64) for c in chunks])
        for number, chunk in enumerate(chunks):
            if len(chunk.keys) != chunk.num_sequences:
                raise ConfigError(
                    f"{source}: chunk {number} lists {len(chunk.keys)} keys for {chunk.num_sequences} sequences"
                )
        if len(lengths) and int(lengths.min()) < 1:
            bad = int(np.argmin(lengths))
            home = int(np.searchsorted(starts, bad, side="right")) - 1
            raise ConfigError(
                f"{source}: sequence {bad - int(starts[home])} of chunk {home} has length {int(lengths[bad])}; "
                "lengths must be >= 1"
            )
        keys = KeyColumn.concatenate([KeyColumn.of(c.keys) for c in chunks])
        return SequenceIndex(starts, narrow_lengths(lengths), keys)
