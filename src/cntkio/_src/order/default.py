"""The default randomization (algorithm ``"default"``): an unbiased window shuffle, computed block by block.

Chunks are shuffled (unbiased, seeded with ``[seed, sweep]``); every unit of the chunk at randomized start ``s``
(counted in chunks, or samples for a sample window) gets the key ``s + window * u`` (``u`` uniform in [0, 1), drawn
per chunk from ``[seed, sweep, chunk]``), and units are read by increasing key. Blocks are the key intervals between
consecutive values of ``s`` and ``s + window``; only the chunks whose key range covers a block contribute to it, so
at any point at most a window of chunks is needed. When chunks are tiny (an image each), consecutive intervals are
merged until a block holds about ``BLOCK_UNITS`` units, at most ``window / 8`` intervals: the work per block is then
paid per ~8 units rather than per unit, and a block needs at most 1/8 of a window more chunks. The order is the same
either way (blocks only cut it into pieces). With length bucketing, blocks are merged until they have room for many
buckets (:func:`cntkio._src.order.bucketing.bucket_block_units`)."""

from __future__ import annotations

import math

import numpy as np

from cntkio import _native
from cntkio._src.common.arrays import exclusive_cumsum
from cntkio._src.corpus.table import Corpus
from cntkio._src.order.bucketing import bucket_block_units
from cntkio._src.order.config import Block, Randomization

BLOCK_UNITS = 8  # blocks of tiny chunks are merged until they hold about this many units
BLOCK_SPAN = 8  # a merged block's keys span at most 1/BLOCK_SPAN of the window (it needs that many more chunks)


class DefaultOrder:
    """A sweep of the default randomization: its chunk shuffle and block bounds when made, each block's units when
    asked for (the next block cheaply, from the keys of the window not read yet; see :meth:`block`)."""

    def __init__(self, corpus: Corpus, randomization: Randomization, sweep: int):
        r = randomization
        self.corpus = corpus
        self._seed = r.seed % 2**64
        self._sweep = sweep
        count = corpus.num_chunks
        self.chunk_order = np.random.default_rng([self._seed, sweep]).permutation(count)
        size = corpus.chunk_samples[self.chunk_order] if r.sample_window else np.ones(count, dtype=np.int64)
        self._starts = exclusive_cumsum(size)[:-1].astype(np.float64)  # randomized start of each rank
        self._window = float(max(r.window, 1))
        self._ends = self._starts + self._window  # each rank's keys lie in [start, end)
        window_chunks = self._window / max(float(size.mean()) if count else 1.0, 1.0)
        bounds = np.unique(np.concatenate([self._starts, self._ends]))
        if r.bucket_samples and corpus.num_units:  # blocks with room for many length buckets
            block_units = max(BLOCK_UNITS, bucket_block_units(corpus, r.bucket_samples))
            units = corpus.units_per_chunk[self.chunk_order].astype(np.float64)
            self._bounds = _expected_bounds(bounds, self._starts, units, self._window, block_units)
        else:
            self._bounds = _merged_bounds(bounds, corpus.num_units, window_chunks, BLOCK_UNITS)
        self._frontier: _Frontier | None = None  # the keys of the window not read yet (see block)

    @property
    def num_blocks(self) -> int:
        return len(self._bounds) - 1

    def _ranks(self, k: int) -> tuple[int, int]:
        """Randomized chunk positions [lo, hi) whose key range meets block k."""
        low, high = self._bounds[k], self._bounds[k + 1]
        return int(self._ends.searchsorted(low, side="right")), int(self._starts.searchsorted(high, side="left"))

    def needed_chunks(self, k: int) -> np.ndarray:
        lo, hi = self._ranks(k)
        chunks: np.ndarray = self.chunk_order[lo:hi]
        return chunks

    def block_start(self, k: int) -> tuple[int, int]:
        """Every unit of the chunks whose keys all lie below block k plus the units below it of the window's chunks
        that straddle it, without building the blocks."""
        corpus = self.corpus
        low = self._bounds[k]
        below = int(self._ends.searchsorted(low, side="right"))  # ranks whose keys all lie below the block
        straddling = int(self._starts.searchsorted(low, side="left"))
        chunks = self.chunk_order[:below]
        units, samples = int(corpus.units_per_chunk[chunks].sum()), int(corpus.chunk_samples[chunks].sum())
        if straddling > below:
            keys, ids = self._rank_keys(below, straddling)
            count = int(keys.searchsorted(low, side="left"))
            units += count
            samples += count if corpus.frame_mode else int(corpus.lengths[ids[:count]].sum())
        return units, samples

    def block(self, k: int) -> Block:
        """The units whose keys fall in block k's interval, by increasing key (ties: lower rank first).

        Blocks are read in order, so the keys of the window's chunks not yet read are kept (the *frontier*): a
        sorted run of the ranks opened earlier and, behind it, the sorted runs of the ranks opened since (each
        block opens the chunks starting before its upper bound). A block cuts the keys below its upper bound off
        every run and merges only those; the runs are merged into one now and then (when they hold as many keys
        as the first), so a block costs about its own units, not the window's. Another block than the next is
        rebuilt from its chunks."""
        lo, hi = self._ranks(k)
        low, high = self._bounds[k], self._bounds[k + 1]
        if self._frontier is None or self._frontier.next_block != k:
            keys, units = self._rank_keys(lo, hi)
            first = int(keys.searchsorted(low, side="left"))
            frontier = _Frontier(k, hi, [(keys[first:], units[first:])])
        else:
            frontier = self._frontier
            if hi > frontier.opened:  # newly opened ranks: higher than every rank in the runs before them
                frontier.runs.append(self._rank_keys(frontier.opened, hi))
                frontier.opened = hi
        taken = frontier.take_below(high)
        frontier.next_block = k + 1
        self._frontier = frontier
        return Block.of_units(self.corpus, taken)

    def _rank_keys(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        """The keys of the units of randomized chunks [lo, hi), sorted (ties: lower rank, then place in the
        chunk), with the units (int64)."""
        chunks = np.ascontiguousarray(self.chunk_order[lo:hi], dtype=np.int64)
        counts = self.corpus.units_per_chunk[chunks].astype(np.int64)
        keys = _native.default_unit_keys(self._seed, self._sweep, chunks, counts, self._starts[lo:hi], self._window)
        first_units = self.corpus.unit_starts[chunks].astype(np.int64) - exclusive_cumsum(counts)[:-1]
        units = np.repeat(first_units, counts) + np.arange(len(keys), dtype=np.int64)
        order = _native.stable_argsort(keys)  # = np.argsort(keys, kind="stable"), by radix sort
        return keys[order], units[order]


class _Frontier:
    """The keys (and units) of the opened chunks not read yet, as sorted runs in rank order: ties between runs go
    to the earlier run (the lower ranks), as one stable sort of every key would order them."""

    def __init__(self, next_block: int, opened: int, runs: list[tuple[np.ndarray, np.ndarray]]):
        self.next_block = next_block
        self.opened = opened  # ranks [.., opened) are in the runs
        self.runs = runs

    def take_below(self, high: float) -> np.ndarray:
        """Removes the keys below ``high`` from the runs; their units, by increasing key (ties: earlier run)."""
        cuts = [int(keys.searchsorted(high, side="left")) for keys, _ in self.runs]
        taken_keys = [keys[:cut] for (keys, _), cut in zip(self.runs, cuts, strict=True)]
        taken = [units[:cut] for (_, units), cut in zip(self.runs, cuts, strict=True)]
        self.runs = [(keys[cut:], units[cut:]) for (keys, units), cut in zip(self.runs, cuts, strict=True)]
        self.runs = self.runs[:1] + [run for run in self.runs[1:] if len(run[0])]
        if len(self.runs) > 1 and sum(len(keys) for keys, _ in self.runs[1:]) >= len(self.runs[0][0]):
            self.runs = [_merge(self.runs)]
        if sum(1 for part in taken if len(part)) <= 1:
            return next((part for part in taken if len(part)), taken[0])
        keys, units = np.concatenate(taken_keys), np.concatenate(taken)
        merged: np.ndarray = units[_native.stable_argsort(keys)]
        return merged


def _merge(runs: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Sorted runs (in rank order) merged into one (ties: earlier run first)."""
    keys = np.concatenate([keys for keys, _ in runs])
    units = np.concatenate([units for _, units in runs])
    order = _native.stable_argsort(keys)
    return keys[order], units[order]


def _expected_bounds(
    bounds: np.ndarray, starts: np.ndarray, units: np.ndarray, window: float, block_units: int
) -> np.ndarray:
    """Block bounds: consecutive key intervals merged until a block expects ``block_units`` units (rank r spreads its
    ``units[r]`` keys evenly over ``[starts[r], starts[r] + window)``), a block spanning at most 1/:data:`BLOCK_SPAN`
    of the window of keys (so it needs at most that many ranks more than one interval)."""
    delta = np.zeros(len(bounds), dtype=np.float64)
    np.add.at(delta, bounds.searchsorted(starts), units / window)
    np.add.at(delta, bounds.searchsorted(starts + window), -units / window)
    expected = np.concatenate([[0.0], np.cumsum(np.cumsum(delta)[:-1] * np.diff(bounds))])
    span = max(1.0, window / BLOCK_SPAN)
    cuts = [0]
    while cuts[-1] < len(bounds) - 1:
        at = cuts[-1]
        enough = int(expected.searchsorted(expected[at] + block_units, side="left"))
        widest = int(bounds.searchsorted(bounds[at] + span, side="right")) - 1
        cuts.append(min(max(min(enough, widest), at + 1), len(bounds) - 1))
    merged: np.ndarray = bounds[cuts]
    return merged


def _merged_bounds(bounds: np.ndarray, units: int, window_chunks: float, block_units: int) -> np.ndarray:
    """Block bounds: every ``step``-th of the key interval bounds, so that a block holds about ``block_units`` units
    (on average), with ``step`` at most an eighth of the window (in chunks)."""
    step = merge_step(len(bounds) - 1, units, window_chunks, block_units)
    if step <= 1:
        return bounds
    return np.concatenate([bounds[:-1:step], bounds[-1:]])


def merge_step(intervals: int, units: int, window_chunks: float, block_units: int = BLOCK_UNITS) -> int:
    """Key intervals merged into one block (:func:`_merged_bounds`): enough for ``block_units`` units on average,
    at most 1/:data:`BLOCK_SPAN` of the window (in chunks)."""
    if intervals <= 1 or units <= 0:
        return 1
    return min(math.ceil(block_units * intervals / units), max(1, int(window_chunks // BLOCK_SPAN)))
