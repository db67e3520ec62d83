"""Parsed chunks in memory, loaded into the native slots the minibatch gather reads, with background
parsing on a thread pool.

The native parsers release the GIL, so a chunk parses on another core while the caller assembles
minibatches from the chunks it already has. Each chunk is checked at this boundary (stream layout,
dtype, offsets, sparse indices) before any minibatch reads it, so a plug-in that returns malformed
arrays gets a clear error, never wrong data.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Protocol

import numpy as np

from cntkio import _native
from cntkio._src.common.errors import CNTKIOError, ConfigError
from cntkio._src.common.system import available_cores, parsing_with
from cntkio._src.corpus.table import ChunkKey, Corpus, LoadKey
from cntkio._src.formats.protocol import StreamData
from cntkio._src.formats.stream_data import sample_width as _width
from cntkio._src.formats.stream_data import slot_columns as _columns
from cntkio._src.reading.stats import StageClock

logger = logging.getLogger("cntkio")
ChunkName = tuple[int, int, int]  # (deserializer number, chunk, sweep)
Chunk = dict[str, StreamData]  # what get_chunk returns (a ParsedChunk, or a plain dict)


class ChunkLoader(Protocol):
    """How the cache gets a chunk's data: :meth:`load` runs ``parse`` (a deserializer's ``get_chunk``) or gets the
    data elsewhere; ``release`` hears that the cache dropped a chunk. ``splits_chunks``: whether one chunk may be
    parsed on several threads. :class:`ParseHere` is the default; the ``DataLoader`` worker exchange
    (``integrations/shared_chunks.py``) parses each chunk once for every worker process."""

    splits_chunks: bool
    reads_here: bool

    def load(self, name: ChunkName, parse: Callable[[], Chunk], *, wait: bool = True) -> Chunk | None:
        """The chunk's data; None only with ``wait=False`` when another party is producing it (ask again later)."""

    def release(self, name: ChunkName) -> None: ...


class ParseHere:
    """Every chunk parsed in this process, by the thread that loads it."""

    splits_chunks = True
    reads_here = True

    def load(self, name: ChunkName, parse: Callable[[], Chunk], *, wait: bool = True) -> Chunk | None:
        return parse()

    def release(self, name: ChunkName) -> None:
        pass


class ChunkCache:
    """The loaded chunks of a corpus, keyed by (deserializer, slot), in the native store the gather reads
    (one slot table per deserializer); the reader says which to keep (:meth:`retain`). Loads are asked for
    as (deserializer, slot, sweep): a chunk that varies by sweep is read for that sweep, and a slot holding
    another sweep's copy is loaded again.

    ``threads`` background parsers prefetch chunks; 0 parses on demand in the calling thread. ``split=False`` parses
    every chunk on one thread (a memory budget's choice: a chunk split into runs holds them until they are joined).
    """

    def __init__(self, corpus: Corpus, threads: int, clock: StageClock | None = None, split: bool = True):
        self.corpus = corpus
        self.threads = threads
        self.split = split
        self.clock = clock if clock is not None else StageClock()
        self.store = _native.ChunkStore(
            [
                [(info.is_sparse, _width(info), info.dtype.kind, info.dtype.itemsize) for info in corpus.streams_of(d)]
                for d in range(len(corpus.deserializers))
            ],
            corpus.slot_counts(),
        )
        for number, versions in enumerate(corpus.versions):
            if versions > 1:
                self.store.set_versions(number, versions)
        for number, match in enumerate(corpus.matches, start=1):
            self.store.set_lookup(number, match, corpus.deserializers[number].sequence_index().chunk_starts)
            if corpus.deserializers[number].broadcast:
                self.store.set_broadcast(number)
        if corpus.caps is not None:
            self.store.set_caps(corpus.caps)
        self._futures: dict[ChunkKey, tuple[int, Future[None]]] = {}  # slot -> (sweep it was read for, load)
        # The same, as arrays a plan is compared with at C speed: per deserializer, the sweep each slot is read for
        # (-1: none), and the slots entered since the last retain (some perhaps dropped since).
        self._held = [np.full(count, -1, dtype=np.int64) for count in corpus.slot_counts()]
        self._entered: list[list[int]] = [[] for _ in self._held]
        self.dropped = 0  # chunks dropped so far
        self._queued = self._busy = 0  # loads waiting for a parse thread, and loads running
        self._deferred = 0  # of the queued loads: those asked for again while another loader worker parses them
        self._awaited: set[int] = set()  # ids of the futures the reading thread waits for
        self._hinted: set[ChunkKey] = set()  # slots whose bytes were asked for ahead, not loaded since
        self._lock = threading.Lock()
        self._closed = False
        self.loader: ChunkLoader = ParseHere()
        self._executor = (
            ThreadPoolExecutor(max_workers=threads, thread_name_prefix="cntkio-parse") if threads > 0 else None
        )

    def ensure(self, keys: Iterable[LoadKey]) -> None:
        """Loads the chunks unless they are loaded or being loaded, and waits for them. With a thread pool
        the pool parses them (in the order given) while this thread waits, so no core runs two parsers."""
        waiting = []
        for key in keys:
            future, owner = self._claim(key)
            if owner:
                if self._executor is None:
                    self._load_into(key, future)
                else:
                    self._submit(key, future)
            waiting.append(future)
        with self._lock:
            self._awaited = {id(future) for future in waiting}
        started = time.perf_counter()
        try:
            for future in waiting:
                future.result()
        finally:
            with self._lock:
                self._awaited = set()
        self.clock.wait += time.perf_counter() - started  # (only the reading thread calls ensure)
        self.clock.waits += 1

    def settle(self) -> None:
        """Waits until the loads asked for (queued or running) are done; one that failed is left for the read that
        needs its chunk to raise."""
        with self._lock:
            pending = [future for _, future in self._futures.values() if not future.done()]
        for future in pending:
            future.exception()

    def prefetch(self, plan: list[tuple[np.ndarray, np.ndarray]]) -> None:
        """Starts loading chunks in the background if they are not cached yet: per deserializer, slots and the
        sweep each is read for (:meth:`Corpus.load_plan`), in the order given."""
        if self._executor is None:
            return
        for number, (slots, sweeps) in enumerate(plan):
            # read without the lock: a stale answer only means _claim decides
            missing = np.flatnonzero(self._held[number][slots] != sweeps)
            for slot, sweep in zip(slots[missing].tolist(), sweeps[missing].tolist()):
                future, owner = self._claim((number, slot, sweep))
                if owner:
                    self._submit((number, slot, sweep), future)

    def fetch_ahead(self, plan: list[tuple[np.ndarray, np.ndarray]]) -> None:
        """Chunks to load after those prefetched (as :meth:`prefetch` takes them): the bytes of those not loaded
        start arriving, if they are remote and this process reads them (:meth:`Deserializer.prefetch_chunk`).
        Chunks asked for ahead before, now neither in ``plan`` nor being loaded, are let go."""
        if not self.loader.reads_here:
            return
        wanted: set[ChunkKey] = set()
        for number, (slots, sweeps) in enumerate(plan):
            missing = np.flatnonzero(self._held[number][slots] != sweeps)
            wanted.update((number, slot) for slot in slots[missing].tolist())
        with self._lock:
            new, gone = wanted - self._hinted, {k for k in self._hinted - wanted if k not in self._futures}
            self._hinted = (self._hinted - gone) | new
        for number, slot in sorted(gone):
            self._hint(number, slot, cancel=True)
        for number, slot in sorted(new):
            self._hint(number, slot)

    def _hint(self, number: int, slot: int, *, cancel: bool = False) -> None:
        deserializer, chunk_id = self.corpus.slot_source(number, slot)[:2]
        try:
            if cancel:
                deserializer.cancel_prefetch(chunk_id)
            else:
                deserializer.prefetch_chunk(chunk_id)  # (remote data: its bytes arrive while earlier chunks parse)
        except Exception as error:  # (a hint: the load reads the chunk and reports what fails)
            logger.debug("prefetch hint for chunk %d of %s failed: %s", chunk_id, deserializer.source_name, error)

    def _submit(self, key: LoadKey, future: Future[None], deferred: bool = False) -> None:
        assert self._executor is not None
        hint = not deferred and self.loader.reads_here
        with self._lock:
            self._queued += 1  # loads submitted and not started: they will want a thread of their own
            self._deferred += deferred
            if hint:
                self._hinted.add(key[:2])
        if hint:
            self._hint(key[0], key[1])
        self._executor.submit(self._load_into, key, future, True, deferred)

    def _claim(self, key: LoadKey) -> tuple[Future[None], bool]:
        """The load of ``key``: (its future, whether the caller must run it). A slot holding another sweep's
        copy is cleared at once (no gather reads it meanwhile) and loaded again; if that copy is still loading,
        it finishes first."""
        number, slot, sweep = key
        while True:
            with self._lock:
                if self._closed:
                    raise ValueError("the source is closed")
                held = self._futures.get((number, slot))
                if held is not None and held[0] == sweep:
                    return held[1], False
                if held is None or held[1].done():
                    if held is not None:
                        self.store.clear(number, slot)
                    future: Future[None] = Future()
                    future.set_running_or_notify_cancel()
                    self._futures[(number, slot)] = (sweep, future)
                    self._held[number][slot] = sweep
                    self._entered[number].append(slot)
                    return future, True
                pending = held[1]
            pending.exception()  # waits for the other sweep's copy (a failed load is replaced just the same)

    def retain(self, plan: list[tuple[np.ndarray, np.ndarray]]) -> None:
        """Drops every loaded chunk not in ``plan`` (per deserializer: slots and the sweep each is read for, as
        :meth:`Corpus.load_plan` gives them). Chunks still loading stay."""
        with self._lock:
            for number, (slots, sweeps) in enumerate(plan):
                held = self._held[number]
                entered = np.unique(np.array(self._entered[number], dtype=np.int64))
                entered = entered[held[entered] >= 0]
                order = np.argsort(slots, kind="stable")
                wanted_slots, wanted_sweeps = slots[order], sweeps[order]
                at = np.minimum(np.searchsorted(wanted_slots, entered), max(len(wanted_slots) - 1, 0))
                kept = np.zeros(len(entered), dtype=bool)
                if len(wanted_slots):
                    kept = (wanted_slots[at] == entered) & (wanted_sweeps[at] == held[entered])
                survivors = entered[kept].tolist()
                for slot in entered[~kept].tolist():
                    if self._futures[(number, slot)][1].done():
                        self._drop(number, slot)
                    else:
                        survivors.append(slot)
                self._entered[number] = survivors

    def _drop(self, number: int, slot: int) -> None:
        """Forgets a slot's chunk (the lock is held)."""
        sweep, _ = self._futures.pop((number, slot))
        self._held[number][slot] = -1
        self.store.clear(number, slot)
        self.dropped += 1
        self.loader.release((number, self.corpus.slot_source(number, slot)[1], sweep))

    def __len__(self) -> int:
        return len(self._futures)

    def loaded_slots(self, number: int) -> np.ndarray:
        """The slots of deserializer ``number`` loaded or loading (work per chunk held, not per slot)."""
        with self._lock:
            return np.fromiter((slot for n, slot in self._futures if n == number), dtype=np.int64)

    def _spare_threads(self, future: Future[None]) -> int:
        """Threads the chunk starting to load may use: itself, and the parse threads no other load keeps busy (all
        the cores when chunks are parsed in the reading thread). The last chunk the reader waits for takes every
        parse thread: the loads still running end soon, and their threads then help instead of idling."""
        if not self.split:
            return 1
        if self._executor is None:
            return available_cores()
        if not self.loader.splits_chunks:  # loader workers: the processes are the parallelism (a split chunk's runs
            return 1  # would wait for each other on oversubscribed cores; measured: less CPU per worker)
        with self._lock:
            if self._queued == 0 and id(future) in self._awaited:
                return self.threads
            return max(1, self.threads - self._busy - self._queued + 1)

    def _load_into(self, key: LoadKey, future: Future[None], queued: bool = False, deferred: bool = False) -> None:
        with self._lock:
            self._queued -= queued
            self._deferred -= deferred
            self._busy += 1
            # A chunk another loader worker is parsing is asked for again later while this thread has other loads to
            # run; with none (only chunks others parse), the thread waits for it.
            waits = not queued or self._queued == self._deferred
        try:
            if not self._load(key, future, waits=waits):
                try:
                    self._submit(key, future, deferred=True)
                except RuntimeError:  # the pool is shut down: the source is closing
                    future.set_exception(ValueError("the source is closed"))
                return
            future.set_result(None)
        except BaseException as error:  # re-raised in the thread that asks for the chunk
            with self._lock:
                held = self._futures.get(key[:2])
                if held is not None and held[1] is future:
                    del self._futures[key[:2]]
                    self._held[key[0]][key[1]] = -1
            future.set_exception(error)
        finally:
            with self._lock:
                self._busy -= 1

    def _load(self, key: LoadKey, future: Future[None], waits: bool = True) -> bool:
        """Loads a chunk into its slot; False (``waits=False``) when another loader worker is parsing it."""
        number, slot, sweep = key
        deserializer, chunk_id, row0, rows, first_unit, first_sequence, frame_starts = self.corpus.slot_source(
            number, slot
        )
        source = deserializer.source_name
        started = time.perf_counter()
        with parsing_with(self._spare_threads(future)):
            parse = functools.partial(deserializer.get_chunk_of_sweep, chunk_id, sweep)  # sweep 0 unless they vary
            data = self.loader.load((number, chunk_id, sweep), parse, wait=waits)
            if data is None:
                return False
        with self._lock:
            self._hinted.discard((number, slot))  # (its read took over what was fetched ahead)
        loading = time.perf_counter()
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
        self.clock.add_chunk(loading - started, time.perf_counter() - loading)
        return True

    def close(self) -> None:
        """Stops background parsing; later requests raise ``ValueError``. Without parse threads (prefetch off) a
        chunk being loaded is loaded by the thread reading it, which completes it (closing from another thread
        meanwhile must not: that thread's ``set_result`` would raise ``InvalidStateError``), and its chunk stays
        until the cache is gone; that thread's next request raises."""
        with self._lock:
            self._closed = True
            pending = [f for _, f in self._futures.values() if not f.done()]
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)  # the loads that ran are done
            for future in pending:
                if not future.done():  # a load cancelled before it started: whoever waits for it hears why
                    future.set_exception(ValueError("the source is closed"))
        with self._lock:
            hinted, self._hinted = self._hinted, set()
        for number, slot in sorted(hinted):  # remote bytes fetched ahead for chunks no load will read: let go
            self._hint(number, slot, cancel=True)
        with self._lock:
            for (number, slot), (_, future) in list(self._futures.items()):
                if future.done():
                    self._drop(number, slot)
