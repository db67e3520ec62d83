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
from .corpus import Corpus
from .deserializer import SparseStream, StreamData
from .errors import CNTKIOError, ConfigError


class ChunkCache:
    """The loaded chunks of a corpus, by table chunk; the reader says which to keep (:meth:`retain`).

    ``threads`` background parsers prefetch chunks; 0 parses on demand in the calling thread.
    """

    def __init__(self, corpus: Corpus, threads: int):
        self.corpus = corpus
        self.threads = threads
        self._infos = corpus.streams
        layout = [(info.is_sparse, _width(info), info.dtype.kind, info.dtype.itemsize) for info in self._infos]
        self.slots = _native.ChunkSlots(layout, corpus.num_chunks)
        self._futures: dict[int, Future[None]] = {}
        self._lock = threading.Lock()
        self._closed = False
        self._executor = (
            ThreadPoolExecutor(max_workers=threads, thread_name_prefix="cntkio-parse") if threads > 0 else None
        )

    def ensure(self, chunks: Iterable[int]) -> None:
        """Loads the chunks unless they are loaded or being loaded, and waits for them. With a thread pool
        the pool parses them (in the order given) while this thread waits, so no core runs two parsers."""
        waiting = []
        for chunk in chunks:
            future, owner = self._claim(int(chunk))
            if owner:
                if self._executor is None:
                    self._load_into(int(chunk), future)
                else:
                    self._executor.submit(self._load_into, int(chunk), future)
            waiting.append(future)
        for future in waiting:
            future.result()

    def prefetch(self, chunks: Iterable[int]) -> None:
        """Starts loading chunks in the background if they are not cached yet."""
        if self._executor is None:
            return
        for chunk in chunks:
            future, owner = self._claim(int(chunk))
            if owner:
                self._executor.submit(self._load_into, int(chunk), future)

    def _claim(self, chunk: int) -> tuple[Future[None], bool]:
        with self._lock:
            if self._closed:
                raise ValueError("the source is closed")
            future = self._futures.get(chunk)
            if future is not None:
                return future, False
            future = Future()
            future.set_running_or_notify_cancel()
            self._futures[chunk] = future
            return future, True

    def retain(self, keep: set[int]) -> None:
        """Drops every loaded chunk not in ``keep``."""
        with self._lock:
            for chunk in [c for c, future in self._futures.items() if c not in keep and future.done()]:
                del self._futures[chunk]
                self.slots.clear(chunk)

    def __len__(self) -> int:
        return len(self._futures)

    def _load_into(self, chunk: int, future: Future[None]) -> None:
        try:
            self._load(chunk)
            future.set_result(None)
        except BaseException as error:  # re-raised in the thread that asks for the chunk
            with self._lock:
                if self._futures.get(chunk) is future:
                    del self._futures[chunk]
            future.set_exception(error)

    def _load(self, chunk: int) -> None:
        corpus = self.corpus
        deserializer_chunk = int(corpus.chunk_ids[chunk])
        data = corpus.primary.get_chunk(deserializer_chunk)
        sequences = int(np.diff(corpus.primary.sequence_index().chunk_starts)[deserializer_chunk])
        columns = []
        for info in self._infos:
            if info.name not in data:
                raise ConfigError(
                    f"{corpus.primary.source_name}: chunk {deserializer_chunk} has no stream '{info.name}'"
                )
            columns.append(_columns(data[info.name], info, corpus.primary.source_name, deserializer_chunk))
        invalid = getattr(data, "invalid", None)
        try:
            self.slots.load(
                chunk,
                columns,
                sequences,
                invalid,
                int(corpus.row0[chunk]),
                int(corpus.unit_starts[chunk]),
                corpus.frame_starts_of(chunk),
            )
        except ValueError as error:
            raise CNTKIOError(
                f"{corpus.primary.source_name}: chunk {deserializer_chunk} is malformed: {error}"
            ) from None

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
            for chunk in list(self._futures):
                self.slots.clear(chunk)
            self._futures.clear()


def _width(info: object) -> int:
    shape = getattr(info, "shape", (1,))
    return int(np.prod(shape)) if shape else 1


def _columns(
    data: StreamData, info: object, source: str, chunk: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
    """A stream's arrays in the form the native slots take, converted only where needed."""
    name = getattr(info, "name", "?")
    dtype = getattr(info, "dtype", None)
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
