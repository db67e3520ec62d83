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
  per ~8 units rather than per unit, and a block needs at most 1/8 of a window more chunks. The order is the
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

from cntkio import _native
from cntkio._src.common.arrays import exclusive_cumsum
from cntkio._src.corpus.table import Corpus

BLOCK_UNITS = 8  # default randomization: blocks of tiny chunks are merged until they hold about this many units
BLOCK_SPAN = 8  # a merged block's keys span at most 1/BLOCK_SPAN of the window (it needs that many more chunks)


@dataclass(frozen=True)
class Randomization:
    """How sweeps are ordered. ``window`` counts chunks, or samples when ``sample_window``; ``bucket_samples`` > 0
    orders each block's units into minibatches of that many samples of similar length (see :func:`bucketed`)."""

    enabled: bool = False
    window: int = 1
    sample_window: bool = False
    seed: int = 0
    compat: bool = False
    bucket_samples: int = 0

    def identity(self) -> dict[str, object]:
        """What decides the order (for checkpoint fingerprints; an option left off is not listed, so states of
        sources without it keep their fingerprint)."""
        fields = dict(self.__dict__)
        if not fields["bucket_samples"]:
            del fields["bucket_samples"]
        return fields


@dataclass(frozen=True)
class Block:
    """The units of one block in reading order, their table chunks and sample counts."""

    units: np.ndarray  # int64 unit ids
    chunks: np.ndarray  # int32 table chunk of each unit
    lengths: np.ndarray  # int64 samples per unit
    cuts: np.ndarray | None = None  # length bucketing: positions where a read stops (each bucket's end)

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
            if r.bucket_samples and corpus.num_units:  # blocks with room for many length buckets
                unit_samples = max(corpus.sweep_size / corpus.num_units, 1.0)
                block_units = max(BLOCK_UNITS, math.ceil(BUCKET_BLOCK_MINIBATCHES * r.bucket_samples / unit_samples))
                units = corpus.units_per_chunk[self.chunk_order].astype(np.float64)
                self._bounds = _bucket_bounds(bounds, self._starts, units, self._window, block_units)
            else:
                self._bounds = _merged_bounds(bounds, corpus.num_units, window_chunks, BLOCK_UNITS)
            self._frontier: _Frontier | None = None  # the keys of the window not read yet (see _shuffled_block)
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
        block = self._shuffled_block(k)
        r = self.randomization
        return bucketed(block, r.bucket_samples, [r.seed % 2**64, self.sweep, k]) if r.bucket_samples else block

    def block_start(self, k: int) -> tuple[int, int]:
        """Units and samples of the blocks before block k (where a cursor entering block k stands in the sweep),
        without building them: in the default order, every unit of the chunks whose keys all lie below the block
        plus the units below it of the window's chunks that straddle it."""
        corpus = self.corpus
        frame_mode = corpus.frame_mode
        if self._compat_units is not None:
            units = int(self._compat_starts[k])
            return units, units if frame_mode else int(corpus.lengths[self._compat_units[:units]].sum())
        if not self._shuffled:
            return int(corpus.unit_starts[k]), int(corpus.chunk_samples[:k].sum())
        low = self._bounds[k]
        below = int(self._ends.searchsorted(low, side="right"))  # ranks whose keys all lie below the block
        straddling = int(self._starts.searchsorted(low, side="left"))
        chunks = self.chunk_order[:below]
        units, samples = int(corpus.units_per_chunk[chunks].sum()), int(corpus.chunk_samples[chunks].sum())
        if straddling > below:
            keys, ids = self._rank_keys(below, straddling)
            count = int(keys.searchsorted(low, side="left"))
            units += count
            samples += count if frame_mode else int(corpus.lengths[ids[:count]].sum())
        return units, samples

    def _shuffled_block(self, k: int) -> Block:
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
        units = frontier.take_below(high)
        frontier.next_block = k + 1
        self._frontier = frontier
        return self._units_block(units)

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


BUCKET_STREAM = 0xB0C4E7  # seeds the shuffle of a block's length buckets apart from the other draws
BUCKET_BLOCK_MINIBATCHES = 16  # bucketing: blocks are merged until they hold about this many minibatches


def bucketed(block: Block, samples: int, seed: list[int]) -> Block:
    """The block's units in minibatches of ``samples`` samples (at least one unit each) of similar length: the units
    by length (stable: ties keep the block's random order), cut greedily as a read takes them, and the minibatches
    in a random order (seeded with ``seed`` + :data:`BUCKET_STREAM`); ``cuts`` marks where each ends, so a read stops
    there. A pure function of its arguments."""
    if len(block) <= 1:
        return block
    by_length = np.argsort(block.lengths, kind="stable")
    cumulative = exclusive_cumsum(block.lengths[by_length])
    ends = []
    start = 0
    while start < len(by_length):  # a batch per pass: what a read of `samples` samples takes
        end = int(cumulative.searchsorted(cumulative[start] + samples, side="right")) - 1
        start = max(end, start + 1)
        ends.append(start)
    sizes = np.diff(np.concatenate([[0], ends]))
    batch_of = np.repeat(np.arange(len(ends)), sizes)
    rank = np.random.default_rng([*seed, BUCKET_STREAM]).permutation(len(ends))
    order = by_length[np.argsort(rank[batch_of], kind="stable")]
    cuts = np.cumsum(sizes[np.argsort(rank)])  # the buckets' ends in reading order
    return Block(block.units[order], block.chunks[order], block.lengths[order], cuts)


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
        return units[_native.stable_argsort(keys)]


def _merge(runs: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Sorted runs (in rank order) merged into one (ties: earlier run first)."""
    keys = np.concatenate([keys for keys, _ in runs])
    units = np.concatenate([units for _, units in runs])
    order = _native.stable_argsort(keys)
    return keys[order], units[order]


def _bucket_bounds(bounds: np.ndarray, starts: np.ndarray, units: np.ndarray, window: float, block_units: int):
    """Block bounds for length bucketing: consecutive key intervals merged until a block expects ``block_units``
    units (rank r spreads its ``units[r]`` keys evenly over ``[starts[r], starts[r] + window)``), a block spanning at
    most an eighth of the window of keys (so it needs at most that many ranks more than one interval)."""
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
    return bounds[cuts]


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
