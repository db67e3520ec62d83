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


class ChunkPlanner:
    """Keeps the chunk cache holding what the reads of the current block need, and prefetching what the next
    blocks need: one parse thread's worth ahead per thread. With a memory budget, the heap pages of dropped chunks are
    given back to the system now and then (they count against the budget until they are)."""

    def __init__(self, corpus: Corpus, cache: ChunkCache, budget: BudgetReport | None):
        self.corpus = corpus
        self.cache = cache
        self.budget = budget
        self.codes = SweepChunks(corpus)
        self.planned: tuple[object, ...] | None = None  # the block whose chunks are loaded
        self._trimmed_at = 0  # chunks the cache had dropped when free heap pages were last given back

    def forget(self) -> None:
        """The cursor moved elsewhere (seek, restore, a failed read): the next :meth:`load` plans anew."""
        self.planned = None

    def load(self, selection: Selection, cursor: Cursor, epoch_end: float, extra: list[int] | None = None) -> None:
        """Makes sure the chunks of ``selection`` are loaded, drops the chunks no read needs any more and prefetches
        the next blocks' chunks. ``extra``: units waiting in BPTT slots, whose chunks are kept."""
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
            for sweep, chunks in cursor.upcoming_chunks(1 + max(1, threads), epoch_end)
            if last_sweep is None or sweep <= last_sweep
        ]
        window = np.union1d(np.union1d(needed, in_flight), upcoming[0] if upcoming else in_flight)
        reading_on = threads and cursor.position < epoch_end
        ahead = np.zeros(0, dtype=np.int64)  # the first chunks of the next blocks that are not in the window
        if reading_on and len(upcoming) > 1:
            later = np.concatenate(upcoming[1:])
            later = later[~np.isin(later, window)]
            _, first = np.unique(later, return_index=True)
            ahead = later[np.sort(first)[:threads]]
        self.cache.retain(self._load_plan(np.concatenate([window, ahead])))
        budget = self.budget
        if budget is not None and self.cache.dropped - self._trimmed_at >= max(1, budget.held_chunks // 4):
            _native.release_free_memory()
            self._trimmed_at = self.cache.dropped
        self.cache.ensure(
            corpus.chunk_keys(zip(codes.table_chunks(needed).tolist(), codes.sweeps(needed).tolist()))
        )
        if reading_on:
            # The rest of the block's window, then the next blocks'; a later read in this block that finds
            # a chunk not loaded yet (no prefetch) loads it then (the native gather refuses to guess).
            rest = np.setdiff1d(window, np.union1d(needed, in_flight), assume_unique=True)
            self.cache.prefetch(self._load_plan(np.concatenate([rest, ahead])))

    def _load_plan(self, codes: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """:meth:`Corpus.load_plan` of codes."""
        return self.corpus.load_plan(self.codes.table_chunks(codes), self.codes.sweeps(codes))
