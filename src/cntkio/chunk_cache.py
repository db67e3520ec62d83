"""Parsed chunks kept in memory, with background parsing on a thread pool.

The native parsers release the GIL, so a chunk parses on another core while the caller packs
minibatches from the chunks it already has.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor

from .deserializer import Deserializer, StreamData

Chunk = dict[str, StreamData]


class ChunkCache:
    """Parsed chunks of one deserializer; the reader says which to keep (:meth:`retain`).

    ``threads`` background parsers prefetch chunks; 0 parses on demand in the calling thread.
    """

    def __init__(self, deserializer: Deserializer, threads: int):
        self._deserializer = deserializer
        self.threads = threads
        self._chunks: OrderedDict[int, Future[Chunk]] = OrderedDict()
        self._lock = threading.Lock()
        self._executor = (
            ThreadPoolExecutor(max_workers=threads, thread_name_prefix="cntkio-parse") if threads > 0 else None
        )

    def get(self, chunk_id: int) -> Chunk:
        """The parsed chunk; parses it now unless a prefetch already did or is doing it."""
        with self._lock:
            future = self._chunks.get(chunk_id)
            if future is None:
                future = Future()
                future.set_running_or_notify_cancel()
                self._chunks[chunk_id] = future
                owner = True
            else:
                owner = False
            self._chunks.move_to_end(chunk_id)
        if owner:
            self._load_into(chunk_id, future)
        return future.result()

    def prefetch(self, chunk_id: int) -> None:
        """Starts parsing a chunk in the background if it is not cached yet."""
        if self._executor is None:
            return
        with self._lock:
            if chunk_id in self._chunks:
                return
            future: Future[Chunk] = Future()
            future.set_running_or_notify_cancel()
            self._chunks[chunk_id] = future
        self._executor.submit(self._load_into, chunk_id, future)

    def retain(self, keep: set[int]) -> None:
        """Drops every parsed chunk not in ``keep``."""
        with self._lock:
            for chunk_id in [c for c, future in self._chunks.items() if c not in keep and future.done()]:
                del self._chunks[chunk_id]

    def __len__(self) -> int:
        return len(self._chunks)

    def _load_into(self, chunk_id: int, future: Future[Chunk]) -> None:
        try:
            future.set_result(self._deserializer.get_chunk(chunk_id))
        except BaseException as error:  # re-raised in the thread that asks for the chunk
            with self._lock:
                self._chunks.pop(chunk_id, None)
            future.set_exception(error)

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
