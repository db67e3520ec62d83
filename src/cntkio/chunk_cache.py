"""Parsed chunks in memory, loaded into the native slots the minibatch gather reads, with background
parsing on a thread pool.

The native parsers release the GIL, so a chunk parses on another core while the caller assembles
minibatches from the chunks it already has. Each chunk is checked at this boundary (stream layout,
dtype, offsets, sparse indices) before any minibatch reads it, so a plug-in that returns malformed
arrays gets a clear error, never wrong data.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from . import _native
from .corpus import ChunkKey, Corpus
from .deserializer import SparseStream, StreamData
from .errors import CNTKIOError, ConfigError
from .streams import StreamInformation

Key = ChunkKey


class ChunkCache:
    """The loaded chunks of a corpus, keyed by (deserializer, slot), in the native store the gather reads
    (one slot table per deserializer); the reader says which to keep (:meth:`retain`).

    ``threads`` background parsers prefetch chunks; 0 parses on demand in the calling thread.
    """

    def __init__(self, corpus: Corpus, threads: int):
        self.corpus = corpus
        self.threads = threads
        self.store = _native.ChunkStore(
            [
                [(info.is_sparse, _width(info), info.dtype.kind, info.dtype.itemsize) for info in corpus.streams_of(d)]
                for d in range(len(corpus.deserializers))
            ],
            corpus.slot_counts(),
        )
        for number, match in enumerate(corpus.matches, start=1):
            self.store.set_lookup(number, match, corpus.deserializers[number].sequence_index().chunk_starts)
            if corpus.deserializers[number].broadcast:
                self.store.set_broadcast(number)
        if corpus.caps is not None:
            self.store.set_caps(corpus.caps)
        self._futures: dict[Key, Future[None]] = {}
        self._lock = threading.Lock()
        self._closed = False
        self._executor = (
            ThreadPoolExecutor(max_workers=threads, thread_name_prefix="cntkio-parse") if threads > 0 else None
        )

    def ensure(self, keys: Iterable[Key]) -> None:
        """Loads the chunks unless they are loaded or being loaded, and waits for them. With a thread pool
        the pool parses them (in the order given) while this thread waits, so no core runs two parsers."""
        waiting = []
        for key in keys:
            future, owner = self._claim(key)
            if owner:
                if self._executor is None:
                    self._load_into(key, future)
                else:
                    self._executor.submit(self._load_into, key, future)
            waiting.append(future)
        for future in waiting:
            future.result()

    def prefetch(self, keys: Iterable[Key]) -> None:
        """Starts loading chunks in the background if they are not cached yet."""
        if self._executor is None:
            return
        for key in keys:
            future, owner = self._claim(key)
            if owner:
                self._executor.submit(self._load_into, key, future)

    def _claim(self, key: Key) -> tuple[Future[None], bool]:
        with self._lock:
            if self._closed:
                raise ValueError("the source is closed")
            future = self._futures.get(key)
            if future is not None:
                return future, False
            future = Future()
            future.set_running_or_notify_cancel()
            self._futures[key] = future
            return future, True

    def retain(self, keep: set[Key]) -> None:
        """Drops every loaded chunk not in ``keep``."""
        with self._lock:
            for key in [k for k, future in self._futures.items() if k not in keep and future.done()]:
                del self._futures[key]
                self.store.clear(*key)

    def __len__(self) -> int:
        return len(self._futures)

    def _load_into(self, key: Key, future: Future[None]) -> None:
        try:
            self._load(key)
            future.set_result(None)
        except BaseException as error:  # re-raised in the thread that asks for the chunk
            with self._lock:
                if self._futures.get(key) is future:
                    del self._futures[key]
            future.set_exception(error)

    def _load(self, key: Key) -> None:
        number, slot = key
        deserializer, chunk_id, row0, rows, first_unit, first_sequence, frame_starts = self.corpus.slot_source(
            number, slot
        )
        source = deserializer.source_name
        data = deserializer.get_chunk(chunk_id)
        starts = deserializer.sequence_index().chunk_starts
        sequences = int(starts[chunk_id + 1] - starts[chunk_id])
        columns = []
        for info in self.corpus.streams_of(number):
            if info.name not in data:
                raise ConfigError(f"{source}: chunk {chunk_id} has no stream '{info.name}'")
            columns.append(_columns(data[info.name], info, source, chunk_id))
        invalid = getattr(data, "invalid", None)
        try:
            self.store.load(
                number, slot, columns, sequences, invalid, row0, rows, first_unit, first_sequence, frame_starts
            )
        except ValueError as error:
            raise CNTKIOError(f"{source}: chunk {chunk_id} is malformed: {error}") from None

    def close(self) -> None:
        """Stops background parsing; later requests raise ``ValueError``."""
        with self._lock:
            self._closed = True
            pending = [f for f in self._futures.values() if not f.done()]
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
        for future in pending:
            if not future.done():
                future.set_exception(ValueError("the source is closed"))
        with self._lock:
            for key in list(self._futures):
                self.store.clear(*key)
            self._futures.clear()


def _width(info: StreamInformation) -> int:
    """Values of one sample (dense), or the dimension (sparse)."""
    return int(np.prod(info.shape)) if info.shape else 1


def _columns(
    data: StreamData, info: StreamInformation, source: str, chunk: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
    """A stream's arrays in the form the native slots take, converted only where needed."""
    name, dtype = info.name, info.dtype
    values = np.asarray(data.values)
    if values.dtype != dtype:
        raise CNTKIOError(f"{source}: chunk {chunk}, stream '{name}': values are {values.dtype}, expected {dtype}")
    seq_offsets = np.ascontiguousarray(data.seq_offsets, dtype=np.int64)
    if isinstance(data, SparseStream):
        indices = np.asarray(data.indices)
        if indices.dtype != np.int32:
            if len(indices) and (int(indices.min()) < 0 or int(indices.max()) >= 2**31):
                raise CNTKIOError(f"{source}: chunk {chunk}, stream '{name}': sparse indices out of range")
            indices = indices.astype(np.int32)
        return (
            np.ascontiguousarray(values),
            seq_offsets,
            np.ascontiguousarray(indices),
            np.ascontiguousarray(data.indptr, dtype=np.int64),
        )
    width = _width(info)
    rows = values.reshape(len(values), -1) if values.size else values.reshape(len(values), width)
    return np.ascontiguousarray(rows), seq_offsets, None, None
