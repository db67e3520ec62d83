"""Grain integration: cntkio's data as a Grain random-access data source, and a source's minibatches as a Grain
``IterDataset`` whose state is cntkio's checkpoint.

Two ways in, for two kinds of pipeline:

* :class:`SequenceSource`: a ``grain.sources.RandomAccessDataSource`` of *sequences* (record ``i`` is the ``i``-th
  sequence of the corpus in file order, the same in every process). Grain does the shuffling, sharding, worker
  processes and batching (``grain.MapDataset.source(...).shuffle(seed).batch(...)`` or ``grain.DataLoader``);
  :func:`padded_batch` pads variable-length sequences into a batch.
* :func:`minibatches` / :class:`MinibatchDataset`: a ``grain.IterDataset`` over a :class:`~cntkio.MinibatchSource`:
  cntkio does the reading (its randomization window, frame mode, truncated BPTT, partitions) and Grain sees its
  minibatches as fixed-shape padded batches (the layouts of :class:`cntkio.jax.JaxIterator`). The iterator's
  ``get_state()`` holds the source's ``get_checkpoint_state()``, so ``set_state()`` resumes exactly after the last
  batch, as cntkio does.

Install with ``pip install "cntkio[grain]"``.
"""

from __future__ import annotations

import collections
import functools
import importlib
import importlib.util
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, SupportsIndex

import numpy as np

from cntkio._src.api.source import MinibatchSource
from cntkio._src.assemble.minibatch import Minibatch
from cntkio._src.common.errors import ConfigError
from cntkio._src.corpus.join import LengthMismatch, join
from cntkio._src.formats.protocol import (
    DenseStream,
    Deserializer,
    ParsedChunk,
    SparseStream,
    StreamData,
    flatten_deserializers,
)
from cntkio._src.integrations.jax import LAYOUTS, JaxIterator

__all__ = ["MinibatchDataset", "MinibatchIterator", "SequenceSource", "minibatches", "padded_batch"]

SPARSE_FORMS = ("csr", "dense")
CSR_FIELDS = ("values", "indices", "indptr", "dim")
STATE_VERSION = 1


try:
    import grain as _grain
except ImportError as error:  # pragma: no cover - exercised where grain is missing
    raise ImportError('cntkio.grain needs Grain: pip install "cntkio[grain]" (or grain)') from error


# --- the random-access source of sequences ----------------------------------------------------------------------


READS = ("sequence", "chunk")  # how SequenceSource reads a sequence


class _ChunkCache:
    """A small thread-safe LRU of parsed chunks, bounded by count and (optionally) bytes. A chunk asked for by
    several threads at once is parsed once: the others wait for it."""

    def __init__(self, max_chunks: int, max_bytes: int | None):
        self.max_chunks = max_chunks
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._chunks: collections.OrderedDict[tuple[int, int], tuple[dict[str, StreamData], int]] = (
            collections.OrderedDict()
        )
        self._loading: dict[tuple[int, int], threading.Event] = {}
        self._bytes = 0
        self.parses = 0  # chunks parsed (a measure of how well the cache serves the access order)

    def holds(self, key: tuple[int, int]) -> bool:
        """Whether the chunk is parsed and kept (or being parsed)."""
        with self._lock:
            return key in self._chunks or key in self._loading

    def get(self, key: tuple[int, int], load: Callable[[], dict[str, StreamData]]) -> dict[str, StreamData]:
        while True:
            with self._lock:
                held = self._chunks.get(key)
                if held is not None:
                    self._chunks.move_to_end(key)
                    return held[0]
                waiting = self._loading.get(key)
                if waiting is None:
                    self._loading[key] = threading.Event()
                    break
            waiting.wait()  # (another thread parses it; if that failed, this one tries itself)
        try:
            chunk = load()
        except BaseException:
            with self._lock:
                self._loading.pop(key).set()
            raise
        size = _chunk_bytes(chunk)
        with self._lock:
            self.parses += 1
            self._chunks[key] = (chunk, size)
            self._bytes += size
            while len(self._chunks) > 1 and (
                len(self._chunks) > self.max_chunks or (self.max_bytes is not None and self._bytes > self.max_bytes)
            ):
                _, (_, dropped) = self._chunks.popitem(last=False)
                self._bytes -= dropped
            self._loading.pop(key).set()
        return chunk

    def clear(self) -> None:
        with self._lock:
            self._chunks.clear()
            self._bytes = 0


def _chunk_bytes(chunk: Mapping[str, StreamData]) -> int:
    total = 0
    for data in chunk.values():
        if isinstance(data, DenseStream):
            total += data.values.nbytes
        else:
            total += data.values.nbytes + data.indices.nbytes + data.indptr.nbytes
    return total


class SequenceSource:
    """A Grain random-access data source of a corpus's sequences: ``len()`` sequences, ``source[i]`` the ``i``-th.

    Record ``i`` is ``{stream name: array, ..., key: the sequence's key}`` for the ``i``-th sequence in file order
    (chunk after chunk), the same in every process (Grain's ``index_shuffle`` and sharding pick the order).

    * A dense stream is ``[length, *shape]`` of the stream's dtype.
    * A sparse stream is, with ``sparse="csr"`` (default), ``{"values": [nnz], "indices": int32 [nnz],
      "indptr": int64 [length + 1], "dim": int64}``: the CSR rows of the sequence's samples (row ``t`` is sample
      ``t``; ``dim`` the stream's), a pytree of arrays that Grain's transforms and worker processes pass along;
      with ``sparse="dense"``, the samples densified, ``[length, dim]``.
    * ``key``: the primary deserializer's key of the sequence (a string or an integer), under ``key_field``
      (None: no key).

    Sequences differ in length, so Grain's default batching (stacking) only fits equal lengths: batch with
    ``batch_fn=cntkio.grain.padded_batch``, which pads them.

    Several deserializers are joined by key as :class:`~cntkio.MinibatchSource` joins them: the first decides the
    sequences and their order, a sequence whose key a secondary lacks is left out (and reported),
    ``length_mismatch`` is ``"pad"`` (each stream keeps its own samples) or ``"truncate"`` (every stream cut to the
    shortest). A secondary that ``broadcast`` s keeps its single sample.

    With ``read="sequence"`` (default), a CTF sequence is read by its own byte range from the index (one ranged
    read and parse of its bytes: fully shuffled access costs a sequence's bytes, not a chunk's), unless its chunk is
    already parsed and kept; a sequence whose parse notes anything (a bad record, padding) is read with its chunk,
    which counts and reports it. Other formats, and ``read="chunk"``, parse the sequence's chunk (``get_chunk``) and
    slice it out. The last ``cache_chunks`` parsed chunks (and at most ``cache_bytes`` of them, if set) are kept, per
    process, so Grain's shuffled access within a window of chunks parses each chunk once; with a global shuffle of a
    format read by chunks most reads parse a chunk for one sequence, so prefer a windowed order (e.g.
    ``grain.experimental.WindowShuffleMapDataset``) or cntkio's own reader (:func:`minibatches`) for large corpora.
    A sequence the deserializer could not use at all (an undecodable image, counted under its
    ``max_errors``) is ``None``: ``grain.MapDataset`` pipelines skip it (``grain.DataLoader`` passes it on: filter
    it with ``grain.transforms.Filter``). Chunks that vary by sweep are read as their sweep 0.

    It pickles (Grain's worker processes): the deserializers pickle as their arguments and reopen their files, the
    table of sequences travels along, and each process has its own cache. It is safe to read from several
    threads.

    Example::

        source = cntkio.grain.SequenceSource(CTFDeserializer("train.ctf", streams))
        dataset = (grain.MapDataset.source(source).shuffle(seed=1)
                   .batch(32, batch_fn=cntkio.grain.padded_batch))

    Args:
        deserializers: a deserializer, a plug-in, or a list of them (joined by key).
        sparse: the form of sparse streams, ``"csr"`` or ``"dense"``.
        key_field: the record's field holding the key (None: none); not a stream's name.
        cache_chunks: the most parsed chunks kept (>= 1).
        cache_bytes: the most bytes of parsed chunks kept (None: no bound but the count; the chunk being read is
            kept whatever its size).
        length_mismatch: with several deserializers, ``"pad"`` or ``"truncate"`` (as ``MinibatchSource``'s; a
            sequence of another length than ``"drop"`` and ``"error"`` would want is not dropped nor refused here).
        strict: with several deserializers, a missing or duplicate key is an error naming it.
        read: ``"sequence"`` (a sequence by its own byte range where the format can: CTF) or ``"chunk"`` (its chunk
            parsed and kept; faster when most sequences of a chunk are read while it is kept).
    """

    def __init__(
        self,
        deserializers: Any,
        *,
        sparse: str = "csr",
        key_field: str | None = "key",
        cache_chunks: int = 8,
        cache_bytes: int | None = None,
        length_mismatch: LengthMismatch | str = LengthMismatch.PAD,
        strict: bool = False,
        read: str = "sequence",
    ):
        if read not in READS:
            raise ValueError(f"read must be one of {', '.join(map(repr, READS))}, got {read!r}")
        self.read = read
        if sparse not in SPARSE_FORMS:
            raise ValueError(f"sparse must be one of {', '.join(map(repr, SPARSE_FORMS))}, got {sparse!r}")
        if int(cache_chunks) < 1:
            raise ValueError(f"cache_chunks must be >= 1, got {cache_chunks}")
        if cache_bytes is not None and int(cache_bytes) < 0:
            raise ValueError(f"cache_bytes must be >= 0, got {cache_bytes}")
        policy = LengthMismatch.parse(length_mismatch)
        if policy not in (LengthMismatch.PAD, LengthMismatch.TRUNCATE):
            raise ConfigError(f"SequenceSource takes length_mismatch 'pad' or 'truncate', got {policy.value!r}")
        self.deserializers: list[Deserializer] = flatten_deserializers(deserializers)
        if not self.deserializers:
            raise ConfigError("SequenceSource needs at least one deserializer")
        self.sparse = sparse
        self.key_field = key_field
        self.cache_chunks = int(cache_chunks)
        self.cache_bytes = None if cache_bytes is None else int(cache_bytes)
        self._infos = [[info for info in d.stream_infos()] for d in self.deserializers]
        names = [info.name for infos in self._infos for info in infos]
        if len(set(names)) != len(names):
            raise ConfigError(f"stream names must be unique across the deserializers, got {names}")
        if key_field is not None and key_field in names:
            raise ConfigError(f"key_field {key_field!r} is also a stream's name: choose another (or None)")
        index = self.deserializers[0].sequence_index()
        self._starts = [np.asarray(d.sequence_index().chunk_starts, dtype=np.int64) for d in self.deserializers]
        # (the join table: per record, the sequence of each deserializer, and the most samples a stream delivers)
        self._rows: list[np.ndarray | None] = [None]
        self._caps: np.ndarray | None = None
        self._count = index.num_sequences
        self.join_report = None
        if len(self.deserializers) > 1:
            joined = join(self.deserializers, 0, index.num_sequences, strict=strict, length_mismatch=policy)
            self._rows = [joined.kept, *joined.matches]
            self._caps = joined.caps
            self._count = index.num_sequences if joined.kept is None else len(joined.kept)
            self.join_report = joined.report
        self._cache = _ChunkCache(self.cache_chunks, self.cache_bytes)

    # (pickled for Grain's worker processes: everything but the cache and its lock)
    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        del state["_cache"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._cache = _ChunkCache(self.cache_chunks, self.cache_bytes)

    def __len__(self) -> int:
        return int(self._count)

    def __repr__(self) -> str:  # (Grain's DataLoader checkpoints name the source by it)
        names = ", ".join(d.source_name for d in self.deserializers)
        return f"SequenceSource([{names}], sequences={len(self)}, sparse={self.sparse!r})"

    @property
    def chunks_parsed(self) -> int:
        """Chunks this process has parsed so far (each parse of one chunk counts)."""
        return self._cache.parses

    def stream_infos(self) -> list[Any]:
        """The streams of the records, deserializer after deserializer."""
        return [info for infos in self._infos for info in infos]

    def _sequence(self, deserializer: int, record: int) -> int:
        rows = self._rows[deserializer]
        return record if rows is None else int(rows[record])

    def __getitem__(self, record_key: SupportsIndex) -> dict[str, Any] | None:
        record = int(record_key)
        count = len(self)
        if record < 0:
            record += count
        if not 0 <= record < count:
            raise IndexError(f"sequence {int(record_key)} out of range (the source holds {count})")
        out: dict[str, Any] = {}
        cap = None if self._caps is None else int(self._caps[record])
        for number, deserializer in enumerate(self.deserializers):
            sequence = self._sequence(number, record)
            starts = self._starts[number]
            chunk_id = int(np.searchsorted(starts, sequence, side="right")) - 1
            row = sequence - int(starts[chunk_id])
            alone = self._read(number, deserializer, chunk_id, sequence)
            chunk: dict[str, StreamData]
            if alone is None:
                chunk = self._cache.get((number, chunk_id), functools.partial(deserializer.get_chunk, chunk_id))
            else:
                chunk, row = alone, 0
            invalid = getattr(chunk, "invalid", None)
            if invalid is not None and int(invalid[row]) == 2:
                return None  # (no usable data: counted by the deserializer under its max_errors)
            for info in self._infos[number]:
                data = chunk.get(info.name)
                if data is None:
                    raise ConfigError(
                        f"{deserializer.source_name}: chunk {chunk_id} has no stream {info.name!r} "
                        f"(sequence {row} of the chunk)"
                    )
                out[info.name] = self._slice(data, row, cap, deserializer.broadcast)
        if self.key_field is not None:
            out[self.key_field] = self.deserializers[0].sequence_keys(np.array([self._sequence(0, record)]))[0]
        return out

    def _read(self, number: int, deserializer: Deserializer, chunk_id: int, sequence: int) -> ParsedChunk | None:
        """The sequence alone (a chunk of one), read by its own byte range, when ``read`` allows it, the format
        can (``read_sequence``) and its chunk is not parsed and cached already; None: read its chunk."""
        single = getattr(deserializer, "read_sequence", None)
        if self.read == "chunk" or single is None or self._cache.holds((number, chunk_id)):
            return None
        found: ParsedChunk | None = single(sequence)
        return found

    def _slice(self, data: StreamData, row: int, cap: int | None, broadcast: bool) -> Any:
        first, stop = int(data.seq_offsets[row]), int(data.seq_offsets[row + 1])
        if cap is not None and not broadcast:
            stop = min(stop, first + cap)
        if isinstance(data, DenseStream):
            return np.array(data.values[first:stop])  # (a copy: the chunk may leave the cache)
        assert isinstance(data, SparseStream)
        begin, end = int(data.indptr[first]), int(data.indptr[stop])
        values, indices = data.values[begin:end], data.indices[begin:end]
        indptr = np.asarray(data.indptr[first : stop + 1], dtype=np.int64) - begin
        if self.sparse == "dense":
            dense = np.zeros((stop - first, data.dim), dtype=values.dtype)
            rows = np.repeat(np.arange(stop - first), np.diff(indptr))
            dense[rows, indices] = values
            return dense
        return {
            "values": np.array(values),
            "indices": np.array(indices, dtype=np.int32),
            "indptr": indptr,
            "dim": np.int64(data.dim),
        }


def padded_batch(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A ``batch_fn`` for Grain's ``batch``: :class:`SequenceSource` records of any lengths as one batch.

    Each stream becomes ``[B, T, *shape]`` (``T`` its longest sequence in the batch; zeros past a sequence's end;
    a sparse stream in ``"csr"`` form is densified), ``"lengths"`` maps each stream to its int32 ``[B]`` lengths,
    and other fields (the key) are stacked as Grain stacks them (``np.stack``).
    """
    if not records:
        raise ValueError("padded_batch needs at least one record")
    out: dict[str, Any] = {"lengths": {}}
    for name in records[0]:
        items = [record[name] for record in records]
        if isinstance(items[0], Mapping) and set(items[0]) == set(CSR_FIELDS):
            items = [_csr_dense(item) for item in items]
        if not isinstance(items[0], np.ndarray) or items[0].ndim == 0:
            out[name] = np.stack([np.asarray(item) for item in items])
            continue
        lengths = np.array([len(item) for item in items], dtype=np.int32)
        steps = int(lengths.max(initial=0))
        batch = np.zeros((len(items), steps, *items[0].shape[1:]), dtype=items[0].dtype)
        for row, item in enumerate(items):
            if item.shape[1:] != items[0].shape[1:]:
                raise ValueError(f"stream {name!r}: samples of shape {item.shape[1:]} and {items[0].shape[1:]}")
            batch[row, : len(item)] = item
        out[name] = batch
        out["lengths"][name] = lengths
    if "lengths" in records[0]:
        raise ValueError("a record field named 'lengths' collides with padded_batch's lengths")
    return out


def _csr_dense(item: Mapping[str, np.ndarray]) -> np.ndarray:
    indptr = np.asarray(item["indptr"])
    dense = np.zeros((len(indptr) - 1, int(item["dim"])), dtype=item["values"].dtype)
    dense[np.repeat(np.arange(len(indptr) - 1), np.diff(indptr)), item["indices"]] = item["values"]
    return dense


# --- minibatches of a MinibatchSource ----------------------------------------------------------------------------


def _default_partition() -> tuple[int, int]:
    """This JAX process's partition when JAX is installed, else the whole data."""
    if importlib.util.find_spec("jax") is None:
        return (1, 0)
    jax = importlib.import_module("jax")
    return (int(jax.process_count()), int(jax.process_index()))


class MinibatchDataset(_grain.IterDataset):  # type: ignore[misc]
    """A ``grain.IterDataset`` of a :class:`~cntkio.MinibatchSource`'s minibatches (:func:`minibatches` makes one;
    its arguments are this class's). ``iter()`` gives a :class:`MinibatchIterator` with a source of its own
    (``make_source()`` is called once per iterator), so iterators are independent, as Grain's are.
    """

    def __init__(
        self,
        make_source: Callable[[], MinibatchSource],
        minibatch_size: int,
        *,
        partition: tuple[int, int] | None = None,
        num_epochs: int | None = 1,
        layout: str | Mapping[str, str] = "padded",
        batch_buckets: tuple[int, ...] | None = None,
        length_buckets: tuple[int, ...] | None = None,
        pad_id: int = 0,
        keys: bool = False,
    ):
        if not callable(make_source) or isinstance(make_source, MinibatchSource):
            raise TypeError("make_source must be a function that builds a MinibatchSource (each iterator builds one)")
        if int(minibatch_size) < 1:
            raise ValueError(f"minibatch_size must be >= 1, got {minibatch_size}")
        if num_epochs is not None and int(num_epochs) < 1:
            raise ValueError(f"num_epochs must be >= 1 or None, got {num_epochs}")
        for name in [layout] if isinstance(layout, str) else list(layout.values()):
            if name not in LAYOUTS:
                raise ValueError(f"unknown layout {name!r}; one of {', '.join(LAYOUTS)}")
        super().__init__()
        self.make_source = make_source
        self.minibatch_size = int(minibatch_size)
        count, index = partition if partition is not None else _default_partition()
        if not 0 <= int(index) < int(count):
            raise ValueError(f"partition index {index} out of range for {count} partitions")
        self.partition = (int(count), int(index))
        self.num_epochs = None if num_epochs is None else int(num_epochs)
        self.layout = layout if isinstance(layout, str) else dict(layout)
        self.batch_buckets = batch_buckets
        self.length_buckets = length_buckets
        self.pad_id = int(pad_id)
        self.keys = bool(keys)
        self.workers = (1, 0)  # (Grain's mp_prefetch: this worker's sub-partition, of how many)

    def set_slice(self, sl: slice, sequential_slice: bool = False) -> None:
        """Grain's ``mp_prefetch`` gives worker ``w`` of ``n`` the slice ``w::n``: the worker reads sub-partition
        ``w`` of ``n`` of this process's partition (minibatches of the same size: ``n`` times the samples over
        ``n`` times the partitions), so the workers together read the process's partition once."""
        del sequential_slice  # (partitions are cntkio's: the order within each is the source's)
        start, stop, step = sl.start or 0, sl.stop, sl.step or 1
        if stop is not None or not 0 <= start < step:
            raise ValueError(f"cntkio.grain minibatches slice only as worker::workers (mp_prefetch), got {sl}")
        workers, worker = self.workers
        self.workers = (workers * step, worker * step + start)

    def read_partition(self) -> tuple[int, int, int]:
        """The partition count, index and the samples per ``next_minibatch`` this dataset's iterators read with."""
        (count, index), (workers, worker) = self.partition, self.workers
        return count * workers, index * workers + worker, self.minibatch_size * workers

    def __iter__(self) -> MinibatchIterator:
        return MinibatchIterator(self)

    def __repr__(self) -> str:
        return (
            f"cntkio.grain.MinibatchDataset(minibatch_size={self.minibatch_size}, partition={self.partition}, "
            f"num_epochs={self.num_epochs}, layout={self.layout!r})"
        )


class MinibatchIterator(_grain.DatasetIterator):  # type: ignore[misc]
    """The ``grain.DatasetIterator`` of a :class:`MinibatchDataset`: minibatches of the source's partition as dicts
    of NumPy arrays (:class:`cntkio.jax.JaxIterator`'s layouts: each stream, ``"lengths"`` and ``"mask"``; with
    ``keys=True`` also ``"keys"``, the primary keys as strings, ``""`` on padding rows).

    ``get_state()`` is JSON: the source's checkpoint, the steps taken and the epoch the iteration started in;
    ``set_state()`` continues exactly after the batch it was taken at (in a fresh iterator, another process, after a
    restart). ``last_keys``: the ``(source, key)`` of each row of the last batch. ``source``: the iterator's
    :class:`~cntkio.MinibatchSource` (e.g. for ``stats()``).
    """

    def __init__(self, dataset: MinibatchDataset):
        super().__init__()
        self.spec = dataset
        self._source: MinibatchSource | None = None
        self._layouts: JaxIterator | None = None
        self.steps = 0
        self.first_epoch: int | None = None
        self.done = False
        self.last_keys: list[Any] = []

    @property
    def source(self) -> MinibatchSource:
        if self._source is None:
            source = self.spec.make_source()
            if not isinstance(source, MinibatchSource):
                raise TypeError(f"make_source must return a MinibatchSource, got {type(source).__name__}")
            self._source = source
        return self._source

    def _converter(self) -> JaxIterator:
        """A :class:`JaxIterator` used for its padding and layouts only (it reads nothing)."""
        if self._layouts is None:
            spec = self.spec
            count, index, size = spec.read_partition()
            self._layouts = JaxIterator(
                self.source,
                size,
                layout=spec.layout,
                batch_buckets=spec.batch_buckets,
                length_buckets=spec.length_buckets,
                partition=(count, index),
                pad_id=spec.pad_id,
                equal_steps=None,
                ahead=0,
            )
        return self._layouts

    def __next__(self) -> dict[str, Any]:
        self._assert_not_closed()
        source = self.source
        if self.first_epoch is None:
            self.first_epoch = 0 if source.is_infinite() else source.current_epoch
        count, index, size = self.spec.read_partition()
        while not self.done:
            minibatch = source.next_minibatch(size, num_data_partitions=count, partition_index=index)
            if isinstance(minibatch, Minibatch):
                self.steps += 1
                return self._batch(minibatch)
            # (this partition's part of the epoch has ended: the next epoch, or the end)
            if source.is_infinite():
                self.done = True
                break
            epoch = source.current_epoch
            if self.spec.num_epochs is not None and epoch + 1 - self.first_epoch >= self.spec.num_epochs:
                self.done = True
                break
            source.start_epoch(epoch + 1)
        raise StopIteration

    def _batch(self, minibatch: Minibatch) -> dict[str, Any]:
        converter = self._converter()
        arrays = converter._arrays(minibatch, *converter._shape(minibatch))
        batch: dict[str, Any] = dict(arrays)
        self.last_keys = list(arrays.sequence_keys)
        if self.spec.keys:
            rows = next(iter(batch["lengths"].values())).shape[0]
            names = [str(key) for _, key in self.last_keys] + [""] * (rows - len(self.last_keys))
            batch["keys"] = np.array(names)
        return batch

    def get_state(self) -> dict[str, Any]:
        """JSON: where the iterator is (the source's checkpoint, the steps taken, the first epoch read)."""
        source = self.source
        first = self.first_epoch
        if first is None:
            first = 0 if source.is_infinite() else source.current_epoch
        return {
            "version": STATE_VERSION,
            "source": source.get_checkpoint_state(),
            "steps": self.steps,
            "first_epoch": first,
            "done": self.done,
        }

    def set_state(self, state: Mapping[str, Any]) -> None:
        if not isinstance(state, Mapping) or "source" not in state:
            raise ValueError("not a state of cntkio.grain's iterator (get_state()): it has no 'source'")
        version = int(state.get("version", STATE_VERSION))
        if version != STATE_VERSION:
            raise ValueError(f"cntkio.grain state version {version}; this cntkio reads version {STATE_VERSION}")
        self.source.restore_from_checkpoint(dict(state["source"]))
        self.steps = int(state.get("steps", 0))
        self.first_epoch = int(state.get("first_epoch", 0))
        self.done = bool(state.get("done", False))
        self.last_keys = []

    def close(self) -> None:
        """Closes the source (its files and threads); Grain calls it, and ``next()`` afterwards raises."""
        super().close()
        if self._source is not None:
            self._source.close()

    def __repr__(self) -> str:
        return f"cntkio.grain.MinibatchIterator(steps={self.steps}, partition={self.spec.read_partition()[:2]})"


def minibatches(
    make_source: Callable[[], MinibatchSource],
    minibatch_size: int,
    *,
    partition: tuple[int, int] | None = None,
    num_epochs: int | None = 1,
    layout: str | Mapping[str, str] = "padded",
    batch_buckets: tuple[int, ...] | None = None,
    length_buckets: tuple[int, ...] | None = None,
    pad_id: int = 0,
    keys: bool = False,
) -> MinibatchDataset:
    """A ``grain.IterDataset`` of a :class:`~cntkio.MinibatchSource`'s minibatches, as padded NumPy batches.

    Each batch is ``{stream: array, "lengths": {stream: int32 [B]}, "mask": {stream: bool}}`` in
    :class:`cntkio.jax.JaxIterator`'s layouts (``B`` and ``T`` padded to buckets, powers of two by default, so a
    jitted step compiles a few programs); ``keys=True`` adds ``"keys"``, each row's primary key as a string.
    The iterator's ``get_state()`` is JSON holding the source's ``get_checkpoint_state()``; ``set_state()`` on a
    fresh iterator continues exactly after the batch the state was taken at (Grain's checkpointing, Orbax's
    ``save``/``load`` included, carries it).

    Each JAX process reads its own partition of every sweep (``next_minibatch(..., num_data_partitions=
    jax.process_count(), partition_index=jax.process_index())``), so across processes each sequence is read once.
    The partitions may differ by a minibatch in length; for global arrays that need every process to step alike,
    use :class:`cntkio.jax.JaxIterator` with ``equal_steps``. Under ``.mp_prefetch(...)`` each Grain worker
    process reads a sub-partition of its process's partition (:meth:`MinibatchDataset.set_slice`), with batches of
    the same size, and Grain's state holds each worker's cntkio state.

    Example::

        def make_source():
            return MinibatchSource(CTFDeserializer("train.ctf", streams), max_sweeps=1)

        dataset = cntkio.grain.minibatches(make_source, 1024).map(to_model_inputs)
        iterator = iter(dataset)
        batch = next(iterator)
        state = iterator.get_state()   # later: iterator = iter(dataset); iterator.set_state(state)

    Args:
        make_source: builds the :class:`~cntkio.MinibatchSource` (called once per iterator; to pickle the dataset
            for Grain's worker processes, a module-level function or a ``functools.partial`` of one).
        minibatch_size: samples per minibatch for the whole job (each partition reads its share).
        partition: ``(count, index)``; default ``(jax.process_count(), jax.process_index())`` when JAX is
            installed, else ``(1, 0)``.
        num_epochs: epochs of the source one iterator reads (an epoch is ``max_sweeps`` sweeps or
            ``max_samples`` samples; later epochs are later, reshuffled sweeps); None: epoch after epoch, without
            end. An infinite source is read without end.
        layout, batch_buckets, length_buckets, pad_id: as :class:`cntkio.jax.JaxIterator`'s.
        keys: add each row's key as ``"keys"`` (a NumPy string array).
    """
    return MinibatchDataset(
        make_source,
        minibatch_size,
        partition=partition,
        num_epochs=num_epochs,
        layout=layout,
        batch_buckets=batch_buckets,
        length_buckets=length_buckets,
        pad_id=pad_id,
        keys=keys,
    )
