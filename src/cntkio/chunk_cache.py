"""Parsed chunks kept in memory: a small LRU cache with background prefetch on a thread pool.

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
    """Holds at most ``capacity`` parsed chunks of one deserializer (plus those being prefetched)."""

    def __init__(self, deserializer: Deserializer, capacity: int, prefetch: bool = True):
        self._deserializer = deserializer
        self._capacity = max(1, capacity)
        self._chunks: OrderedDict[int, Future[Chunk]] = OrderedDict()
        self._lock = threading.Lock()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cntkio-prefetch") if prefetch else None

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

    def evict_except(self, keep: set[int]) -> None:
        """Drops least recently used chunks beyond the capacity, never those in ``keep``."""
        with self._lock:
            for chunk_id in list(self._chunks):
                if len(self._chunks) <= self._capacity:
                    break
                if chunk_id not in keep and self._chunks[chunk_id].done():
                    del self._chunks[chunk_id]

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
