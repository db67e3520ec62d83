"""The timeline: which unit (a sequence, or a frame in frame mode) is read at each position of a sweep.

A sweep's order is a pure function of (index, configuration, seed, sweep number), so any position can
be reached directly (instant, exact checkpoint restore) and nothing that runs concurrently (threads,
prefetch, minibatch sizes) can change it.

Randomized orders keep CNTK's window guarantee: reading any position needs only a window of chunks.
The default order gives every unit the key ``start(home chunk) + window * u`` (u uniform in [0, 1),
start counted in chunks or samples after an unbiased chunk shuffle) and reads units by increasing key,
so at key x only chunks starting in (x - window, x] are needed. ``compat=True`` reproduces CNTK's
BlockRandomizer exactly (MT19937-64, its swap shuffles, sweep k seeded with ``seed + k``).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from . import _native
from .arrays import exclusive_cumsum


@dataclass(frozen=True)
class Randomization:
    """How sweeps are ordered. ``window`` counts chunks, or samples when ``sample_window``."""

    enabled: bool = False
    window: int = 1
    sample_window: bool = False
    seed: int = 0
    compat: bool = False


@dataclass(frozen=True)
class SweepPlan:
    """Units of one sweep in reading order, with their lengths, start positions and chunks."""

    sweep: int
    units: np.ndarray  # unit ids in reading order
    lengths: np.ndarray  # samples per position
    starts: np.ndarray  # exclusive cumulative sum of lengths (len(units) + 1)
    chunks: np.ndarray  # active-chunk index of each position
    chunk_rank: np.ndarray  # randomized rank of each active chunk

    def __len__(self) -> int:
        return len(self.units)

    @cached_property
    def chunk_spans(self) -> tuple[np.ndarray, np.ndarray]:
        """First and last position of every active chunk in this sweep."""
        count = len(self.chunk_rank)
        positions = np.arange(len(self.units), dtype=np.int64)
        first = np.full(count, len(self.units), dtype=np.int64)
        last = np.full(count, -1, dtype=np.int64)
        np.minimum.at(first, self.chunks, positions)
        np.maximum.at(last, self.chunks, positions)
        return first, last


class Timeline:
    """Units of the primary deserializer (optionally a slice of its sequences) and their sweep orders."""

    def __init__(
        self,
        sequence_lengths: np.ndarray,
        chunk_sequence_counts: np.ndarray,
        frame_mode: bool,
        randomization: Randomization,
        sequence_range: tuple[int, int] | None = None,
    ):
        lengths = np.asarray(sequence_lengths, dtype=np.int64)
        self.chunk_bounds = exclusive_cumsum(np.asarray(chunk_sequence_counts, dtype=np.int64))
        first, stop = sequence_range if sequence_range is not None else (0, len(lengths))
        sequences = np.arange(first, stop, dtype=np.int64)
        self.frame_mode = frame_mode
        self.randomization = randomization
        if frame_mode:
            per_sequence = lengths[sequences]
            self.unit_sequence = np.repeat(sequences, per_sequence)
            self.unit_frame: np.ndarray | None = np.arange(len(self.unit_sequence), dtype=np.int64) - np.repeat(
                exclusive_cumsum(per_sequence)[:-1], per_sequence
            )
            self.unit_length = np.ones(len(self.unit_sequence), dtype=np.int64)
        else:
            self.unit_sequence = sequences
            self.unit_frame = None
            self.unit_length = lengths[sequences]
        unit_chunk = np.searchsorted(self.chunk_bounds, self.unit_sequence, side="right") - 1
        self.active_chunks, self.unit_active_chunk = np.unique(unit_chunk, return_inverse=True)
        self.units_per_chunk = np.bincount(self.unit_active_chunk, minlength=len(self.active_chunks))
        self.samples_per_chunk = np.bincount(
            self.unit_active_chunk, weights=self.unit_length, minlength=len(self.active_chunks)
        ).astype(np.int64)
        self.sweep_size = int(self.unit_length.sum())
        self._plans: OrderedDict[int, SweepPlan] = OrderedDict()

    @property
    def num_units(self) -> int:
        return len(self.unit_length)

    @property
    def num_chunks(self) -> int:
        """Chunks that hold units of this timeline."""
        return len(self.active_chunks)

    def plan(self, sweep: int) -> SweepPlan:
        """The reading order of a sweep (the last two are cached)."""
        plan = self._plans.get(sweep)
        if plan is None:
            units, chunk_rank = self._order(sweep)
            lengths = self.unit_length[units]
            plan = SweepPlan(
                sweep, units, lengths, exclusive_cumsum(lengths), self.unit_active_chunk[units], chunk_rank
            )
            self._plans[sweep] = plan
            while len(self._plans) > 2:
                self._plans.popitem(last=False)
        return plan

    def _order(self, sweep: int) -> tuple[np.ndarray, np.ndarray]:
        """(unit ids in reading order, randomized rank of each active chunk)."""
        count = self.num_chunks
        r = self.randomization
        if not r.enabled:
            return np.arange(self.num_units, dtype=np.int64), np.arange(count, dtype=np.int64)
        if r.compat:
            units, chunk_order, _, _ = _native.compat_block_order(
                self.units_per_chunk.tolist(), self.samples_per_chunk.tolist(), r.window, r.sample_window,
                (r.seed + sweep) % 2**64,
            )  # fmt: skip
            rank = np.empty(count, dtype=np.int64)
            rank[chunk_order] = np.arange(count, dtype=np.int64)
            return units, rank
        rng = np.random.default_rng([r.seed % 2**64, sweep])
        chunk_order = rng.permutation(count)
        rank = np.empty(count, dtype=np.int64)
        rank[chunk_order] = np.arange(count, dtype=np.int64)
        chunk_start = exclusive_cumsum(self.samples_per_chunk[chunk_order])[:-1][rank] if r.sample_window else rank
        keys = chunk_start[self.unit_active_chunk] + max(r.window, 1) * rng.random(self.num_units)
        return np.argsort(keys, kind="stable").astype(np.int64), rank

    def chunk_level_partitions(self, num_partitions: int) -> bool:
        """Randomized sweeps are split by chunk (each partition reads only its chunks) when there are
        enough chunks; otherwise, and in file order, by position."""
        return self.randomization.enabled and self.num_chunks >= num_partitions

    def owners(self, plan: SweepPlan, positions: np.ndarray, num_partitions: int) -> np.ndarray:
        """Partition owning each position of the sweep."""
        if self.chunk_level_partitions(num_partitions):
            return plan.chunk_rank[plan.chunks[positions]] % num_partitions
        return positions % num_partitions

    def locate(self, units: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """(deserializer chunk id, sequence index in chunk, frame index or None) of each unit."""
        sequences = self.unit_sequence[units]
        chunks = self.active_chunks[self.unit_active_chunk[units]]
        frames = self.unit_frame[units] if self.unit_frame is not None else None
        return chunks, sequences - self.chunk_bounds[chunks], frames
