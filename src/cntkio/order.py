"""Sweep orders, computed lazily block by block: which unit is read at each position of a sweep.

An order is a pure function of (corpus, randomization, seed, sweep): nothing that runs concurrently
(threads, prefetch, minibatch sizes, partitions) changes it. A sweep is a sequence of *blocks*; a block
is computed from a window of chunks when the reader reaches it, so memory is O(window), never O(units).

* File order: block k = table chunk k, in order.
* Default randomization: chunks are shuffled (unbiased, seeded with ``[seed, sweep]``); every unit of
  the chunk at randomized start ``s`` (counted in chunks, or samples for a sample window) gets the key
  ``s + window * u`` (``u`` uniform in [0, 1), drawn per chunk from ``[seed, sweep, chunk]``), and units
  are read by increasing key. Blocks are the key intervals between consecutive values of ``s`` and
  ``s + window``; only the chunks whose key range covers a block contribute to it, so at any point at most
  a window of chunks is needed. When chunks are tiny (an image each), consecutive intervals are merged until
  a block holds about ``BLOCK_UNITS`` units, at most ``window / 8`` intervals: the work per block is then paid
  per ~8 units rather than per unit, and a block needs at most 1/16 of a window more chunks. The order is the
  same either way (blocks only cut it into pieces).
* ``compat=True``: CNTK's BlockRandomizer exactly (MT19937-64, its swap shuffles, sweep k seeded with
  ``seed + k``); block k = the positions of randomized chunk k. This order is computed for the whole sweep
  (as CNTK does), so it costs memory per unit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from . import _native
from .arrays import exclusive_cumsum
from .corpus import Corpus

BLOCK_UNITS = 8  # default randomization: blocks of tiny chunks are merged until they hold about this many units


@dataclass(frozen=True)
class Randomization:
    """How sweeps are ordered. ``window`` counts chunks, or samples when ``sample_window``."""

    enabled: bool = False
    window: int = 1
    sample_window: bool = False
    seed: int = 0
    compat: bool = False


@dataclass(frozen=True)
class Block:
    """The units of one block in reading order, their table chunks and sample counts."""

    units: np.ndarray  # int64 unit ids
    chunks: np.ndarray  # int32 table chunk of each unit
    lengths: np.ndarray  # int64 samples per unit

    def __len__(self) -> int:
        return len(self.units)

    @cached_property
    def starts(self) -> np.ndarray:
        """Sample offset of each unit inside the block, and the block's sample count last."""
        return exclusive_cumsum(self.lengths)

    @property
    def samples(self) -> int:
        return int(self.starts[-1])


class SweepOrder:
    """The reading order of one sweep, block by block."""

    def __init__(self, corpus: Corpus, randomization: Randomization, sweep: int):
        self.corpus = corpus
        self.randomization = randomization
        self.sweep = sweep
        count = corpus.num_chunks
        r = randomization
        self._compat_units: np.ndarray | None = None
        if not r.enabled:
            self.chunk_order = np.arange(count, dtype=np.int64)
        elif r.compat:
            units, chunk_order, _, _ = _native.compat_block_order(
                corpus.units_per_chunk.tolist(), corpus.chunk_samples.tolist(), r.window, r.sample_window,
                (r.seed + sweep) % 2**64,
            )  # fmt: skip
            self._compat_units = units
            self.chunk_order = chunk_order
            self._compat_starts = exclusive_cumsum(corpus.units_per_chunk[chunk_order])
        else:
            self.chunk_order = np.random.default_rng([r.seed % 2**64, sweep]).permutation(count)
            size = corpus.chunk_samples[self.chunk_order] if r.sample_window else np.ones(count, dtype=np.int64)
            self._starts = exclusive_cumsum(size)[:-1].astype(np.float64)  # randomized start of each rank
            self._window = float(max(r.window, 1))
            self._ends = self._starts + self._window  # each rank's keys lie in [start, end)
            window_chunks = self._window / max(float(size.mean()) if count else 1.0, 1.0)
            bounds = np.unique(np.concatenate([self._starts, self._ends]))
            self._bounds = _merged_bounds(bounds, corpus.num_units, window_chunks)
            # (next block, ranks opened, keys >= its lower bound of the opened ranks, their units): see _shuffled_block
            self._frontier: tuple[int, int, np.ndarray, np.ndarray] | None = None
        self.chunk_rank = np.empty(count, dtype=np.int64)
        self.chunk_rank[self.chunk_order] = np.arange(count, dtype=np.int64)

    @property
    def _shuffled(self) -> bool:
        return self.randomization.enabled and not self.randomization.compat

    @property
    def num_blocks(self) -> int:
        return len(self._bounds) - 1 if self._shuffled else self.corpus.num_chunks

    def _ranks(self, k: int) -> tuple[int, int]:
        """Randomized chunk positions [lo, hi) whose key range meets block k (default randomization)."""
        low, high = self._bounds[k], self._bounds[k + 1]
        return int(self._ends.searchsorted(low, side="right")), int(self._starts.searchsorted(high, side="left"))

    def needed_chunks(self, k: int) -> np.ndarray:
        """Table chunks that units of block k may come from."""
        if self._shuffled:
            lo, hi = self._ranks(k)
            return self.chunk_order[lo:hi]
        if self._compat_units is not None:
            return np.unique(self.block(k).chunks)
        return np.array([k], dtype=np.int64)

    def block(self, k: int) -> Block:
        if self._compat_units is not None:
            return self._units_block(self._compat_units[self._compat_starts[k] : self._compat_starts[k + 1]])
        if not self._shuffled:
            chunk = int(self.chunk_order[k])
            units = self.corpus.units_of_chunk(chunk)
            return Block(units, np.full(len(units), chunk, dtype=np.int32), self.corpus.unit_lengths(chunk))
        return self._shuffled_block(k)

    def _shuffled_block(self, k: int) -> Block:
        """The units whose keys fall in block k's interval, by increasing key (ties: lower rank first).

        Blocks are read in order, so the keys of the window's chunks not yet read are kept merged (the
        *frontier*): block k opens the chunks starting before its upper bound, merges their keys in and cuts off
        those below its upper bound. Another block than the next is rebuilt from its chunks."""
        lo, hi = self._ranks(k)
        low, high = self._bounds[k], self._bounds[k + 1]
        if self._frontier is None or self._frontier[0] != k:
            keys, units = self._rank_keys(lo, hi)
            first = int(keys.searchsorted(low, side="left"))
            keys, units, opened = keys[first:], units[first:], hi
        else:
            _, opened, keys, units = self._frontier
            if hi > opened:  # the newly opened ranks' keys go in after equal keys of lower ranks
                new_keys, new_units = self._rank_keys(opened, hi)
                at = keys.searchsorted(new_keys, side="right")
                keys, units, opened = np.insert(keys, at, new_keys), np.insert(units, at, new_units), hi
        cut = int(keys.searchsorted(high, side="left"))
        self._frontier = (k + 1, opened, keys[cut:], units[cut:])
        return self._units_block(units[:cut])

    def _units_block(self, units: np.ndarray) -> Block:
        corpus = self.corpus
        lengths = np.ones(len(units), dtype=np.int64) if corpus.frame_mode else corpus.lengths[units].astype(np.int64)
        return Block(units, corpus.chunk_of_units(units), lengths)

    def _rank_keys(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        """The keys of the units of randomized chunks [lo, hi), sorted (ties: lower rank, then place in the
        chunk), with the units (int64)."""
        chunks = np.ascontiguousarray(self.chunk_order[lo:hi], dtype=np.int64)
        counts = self.corpus.units_per_chunk[chunks].astype(np.int64)
        r = self.randomization
        keys = _native.default_unit_keys(r.seed % 2**64, self.sweep, chunks, counts, self._starts[lo:hi], self._window)
        first_units = self.corpus.unit_starts[chunks].astype(np.int64) - exclusive_cumsum(counts)[:-1]
        units = np.repeat(first_units, counts) + np.arange(len(keys), dtype=np.int64)
        order = _native.stable_argsort(keys)  # = np.argsort(keys, kind="stable"), by radix sort
        return keys[order], units[order]

    def owners(self, block: Block, positions: np.ndarray, partitions: int) -> np.ndarray:
        """Partition owning each unit of a block (``positions``: the units' positions in the sweep).

        Randomized sweeps are split by chunk (a partition reads only its chunks) when there are enough
        chunks; otherwise, and in file order, by position."""
        if self.chunk_level(partitions):
            return self.chunk_rank[block.chunks] % partitions
        return positions % partitions

    def chunk_level(self, partitions: int) -> bool:
        return self.randomization.enabled and self.corpus.num_chunks >= partitions


def _merged_bounds(bounds: np.ndarray, units: int, window_chunks: float) -> np.ndarray:
    """Block bounds: every ``step``-th of the key interval bounds, so that a block holds about BLOCK_UNITS units
    (on average), with ``step`` at most an eighth of the window (in chunks)."""
    intervals = len(bounds) - 1
    if intervals <= 1 or units <= 0:
        return bounds
    step = min(math.ceil(BLOCK_UNITS * intervals / units), max(1, int(window_chunks // 8)))
    if step <= 1:
        return bounds
    return np.concatenate([bounds[:-1:step], bounds[-1:]])
