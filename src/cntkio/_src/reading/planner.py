"""Which chunks the chunk cache holds and prefetches, planned from the cursor block by block.

A chunk is asked for with the sweep it is read in (it matters only to chunks that vary by sweep: of those, a copy
per sweep parity is held). Sets of chunks are arrays of :class:`SweepChunks` codes, so a read costs Python work per
chunk that enters or leaves the window, not per chunk of the window.
"""

from __future__ import annotations

import numpy as np

from cntkio import _native
from cntkio._src.corpus.table import SWEEP_VERSIONS, Corpus
from cntkio._src.reading.budget import BudgetReport
from cntkio._src.reading.chunk_cache import ChunkCache
from cntkio._src.reading.cursor import Cursor, Selection


class SweepChunks:
    """(sweep, table chunk) pairs as one int64 code each, ``sweep * chunks + chunk``: sets of them are NumPy
    set operations. A corpus whose chunks do not vary by sweep codes every chunk with sweep 0."""

    def __init__(self, corpus: Corpus):
        self.chunks = max(corpus.num_chunks, 1)
        self.versioned = corpus.sweep_dependent

    def encode(self, sweeps: np.ndarray | int, chunks: np.ndarray) -> np.ndarray:
        if not self.versioned:
            return np.asarray(chunks).astype(np.int64)
        return np.asarray(sweeps, dtype=np.int64) * self.chunks + np.asarray(chunks).astype(np.int64)

    def sweeps(self, codes: np.ndarray) -> np.ndarray:
        return codes // self.chunks

    def table_chunks(self, codes: np.ndarray) -> np.ndarray:
        return codes % self.chunks


FETCH_AHEAD = 2  # chunks per parse thread whose bytes are fetched ahead of their load (remote data)


class ChunkPlanner:
    """Keeps the chunk cache holding what the reads of the current block need, and prefetching what the next
    blocks need: one parse thread's worth ahead per thread; the bytes of :data:`FETCH_AHEAD` more chunks per thread
    start arriving if they are remote (:meth:`ChunkCache.fetch_ahead`). With a memory budget, the heap pages of
    dropped chunks are given back to the system now and then (they count against the budget until they are)."""

    def __init__(self, corpus: Corpus, cache: ChunkCache, budget: BudgetReport | None):
        self.corpus = corpus
        self.cache = cache
        self.budget = budget
        self.codes = SweepChunks(corpus)
        self.planned: tuple[object, ...] | None = None  # the block whose chunks are loaded
        self._trimmed_at = 0  # chunks the cache had dropped when free heap pages were last given back
        self._peak = 0  # the most chunks the window and prefetch have held at once (what _kept may keep)

    def forget(self) -> None:
        """The cursor moved elsewhere (seek, restore, a failed read): the next :meth:`load` plans anew."""
        self.planned = None

    def load(self, selection: Selection, cursor: Cursor, horizon: float, extra: list[int] | None = None) -> None:
        """Makes sure the chunks of ``selection`` are loaded, drops the chunks no read needs soon and prefetches the
        next blocks' chunks, looking ahead to sample position ``horizon`` (the epoch's end, or the next epoch's when
        it follows). ``extra``: units waiting in BPTT slots, whose chunks are kept."""
        plan = (cursor.sweep, cursor.block, cursor.partitioning)
        if plan == self.planned and extra is None:
            return  # the read stayed in the block planned when the cursor entered it
        self.planned = plan
        corpus, codes = self.corpus, self.codes
        if codes.versioned:
            sweeps = selection.sweeps()
            needed = np.unique(codes.encode(sweeps, selection.chunks))
            last_sweep = int(sweeps.min()) + SWEEP_VERSIONS - 1  # a later sweep would replace a copy in use
        else:
            needed = np.unique(selection.chunks).astype(np.int64)
            last_sweep = None
        in_flight = np.zeros(0, dtype=np.int64)
        if extra:
            in_flight = np.unique(corpus.chunk_of_units(np.asarray(extra, dtype=np.int64))).astype(np.int64)
        threads = self.cache.threads
        upcoming = [
            codes.encode(sweep, chunks)
            for sweep, chunks in cursor.upcoming_chunks(1 + (1 + FETCH_AHEAD) * max(1, threads), horizon)
            if last_sweep is None or sweep <= last_sweep
        ]
        window = np.union1d(np.union1d(needed, in_flight), upcoming[0] if upcoming else in_flight)
        reading_on = threads and cursor.position < horizon
        ahead = np.zeros(0, dtype=np.int64)  # the first chunks of the next blocks that are not in the window
        fetched = ahead  # the chunks after those, whose bytes are fetched ahead
        if reading_on and len(upcoming) > 1:
            later = np.concatenate(upcoming[1:])
            later = later[~np.isin(later, window)]
            _, first = np.unique(later, return_index=True)
            later = later[np.sort(first)]
            ahead, fetched = later[:threads], later[threads : threads * (1 + FETCH_AHEAD)]
        held = np.concatenate([window, ahead])
        self._peak = max(self._peak, len(held))
        self.cache.retain(self._load_plan(np.concatenate([held, self._kept(held, cursor, horizon)])))
        budget = self.budget
        if budget is not None and self.cache.dropped - self._trimmed_at >= max(1, budget.held_chunks // 4):
            _native.release_free_memory()
            self._trimmed_at = self.cache.dropped
        self.cache.ensure(
            corpus.chunk_keys(zip(codes.table_chunks(needed).tolist(), codes.sweeps(needed).tolist()))
        )
        if reading_on:
            # The rest of the block's window in the order reads need it (by rank), then the next blocks'; a later
            # read in this block that finds a chunk not loaded yet (no prefetch) loads it then (the native gather
            # refuses to guess).
            rest = np.setdiff1d(window, np.union1d(needed, in_flight), assume_unique=True)
            rest = rest[np.argsort(cursor.order(cursor.sweep).chunk_rank[codes.table_chunks(rest)], kind="stable")]
            self.cache.prefetch(self._load_plan(np.concatenate([rest, ahead])))
            if len(fetched):
                self.cache.fetch_ahead(self._load_plan(fetched))

    def _kept(self, held: np.ndarray, cursor: Cursor, horizon: float) -> np.ndarray:
        """Chunks loaded now besides ``held`` (the window and the prefetch) that a later read needs, the soonest
        needed first, as many as keep the chunks held within the most the window and prefetch have held (and the
        memory budget): the window of a new sweep, or of the next epoch, starts with chunks still loaded instead of
        parsing them again. Chunks are needed in the order of their randomized rank (the window slides over it): one
        ranked past the current block's first comes later in this sweep, one ranked before it in the next sweep (if
        it is read before ``horizon``). Chunks that vary by sweep are not kept."""
        room = self._peak - len(held)
        if self.budget is not None:
            room = min(room, self.budget.held_chunks - len(held))
        if room <= 0 or self.codes.versioned or cursor.position >= horizon:
            return held[:0]
        loaded = self.cache.loaded_slots(0)  # (unversioned: the primary's slots are its table chunks)
        spare = loaded[~np.isin(loaded, held)]
        if not len(spare):
            return spare
        order = cursor.order(cursor.sweep)
        ranks = order.chunk_rank
        block = cursor.block
        opened = len(ranks)  # the first rank the current block opens (past the sweep's end: none)
        if block < order.num_blocks:
            opened = int(ranks[order.needed_chunks(block)].min(initial=opened))
        when = ranks[spare].astype(np.float64)
        passed = when < opened  # (the window has slid past them in this sweep)
        if passed.any():
            follows = (cursor.sweep + 1) * cursor.sweep_size < horizon
            nxt = cursor.order(cursor.sweep + 1).chunk_rank[spare[passed]] if follows else np.inf
            when[passed] = len(ranks) + nxt
        soonest = np.argsort(when, kind="stable")[:room]
        kept: np.ndarray = spare[soonest[np.isfinite(when[soonest])]]
        return kept

    def _load_plan(self, codes: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """:meth:`Corpus.load_plan` of codes."""
        return self.corpus.load_plan(self.codes.table_chunks(codes), self.codes.sweeps(codes))
