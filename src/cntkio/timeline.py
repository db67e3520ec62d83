"""The timeline: which unit (sequence, or frame in frame mode) is read at each position of a sweep.

The order of a sweep is a pure function of the index and the sweep number, so any position can be
reached directly (exact, instant checkpoint restore) and prefetching cannot change it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .minibatch import _exclusive_cumsum


@dataclass(frozen=True)
class SweepPlan:
    """Units of one sweep in reading order, with their lengths and start positions."""

    sweep: int
    units: np.ndarray  # unit ids in reading order
    lengths: np.ndarray  # samples per unit, in reading order
    starts: np.ndarray  # exclusive cumulative sum of lengths (len(units) + 1)

    def __len__(self) -> int:
        return len(self.units)


class Timeline:
    """Units of the primary deserializer, read in file order (no randomization)."""

    def __init__(self, sequence_lengths: np.ndarray, chunk_sequence_counts: np.ndarray, frame_mode: bool):
        lengths = np.asarray(sequence_lengths, dtype=np.int64)
        self.chunk_bounds = _exclusive_cumsum(np.asarray(chunk_sequence_counts, dtype=np.int64))
        self.frame_mode = frame_mode
        if frame_mode:
            self.unit_sequence = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
            self.unit_frame: np.ndarray | None = np.arange(len(self.unit_sequence), dtype=np.int64) - np.repeat(
                _exclusive_cumsum(lengths)[:-1], lengths
            )
            self.unit_length = np.ones(len(self.unit_sequence), dtype=np.int64)
        else:
            self.unit_sequence = np.arange(len(lengths), dtype=np.int64)
            self.unit_frame = None
            self.unit_length = lengths
        self.sweep_size = int(self.unit_length.sum())
        self._plan: SweepPlan | None = None

    @property
    def num_units(self) -> int:
        return len(self.unit_length)

    def plan(self, sweep: int) -> SweepPlan:
        """The reading order of a sweep (cached for the current sweep)."""
        if self._plan is None or self._plan.sweep != sweep:
            units = np.arange(self.num_units, dtype=np.int64)
            lengths = self.unit_length[units]
            self._plan = SweepPlan(sweep, units, lengths, _exclusive_cumsum(lengths))
        return self._plan

    def owners(self, plan: SweepPlan, positions: np.ndarray, num_partitions: int) -> np.ndarray:
        """Partition owning each position of the sweep: sequence-level, by position in the sweep."""
        del plan  # file order: ownership depends on the position alone
        return positions % num_partitions

    def locate(self, units: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """(chunk id, sequence index in chunk, frame index or None) of each unit."""
        sequences = self.unit_sequence[units]
        chunks = np.searchsorted(self.chunk_bounds, sequences, side="right") - 1
        frames = self.unit_frame[units] if self.unit_frame is not None else None
        return chunks, sequences - self.chunk_bounds[chunks], frames

    def upcoming_chunks(self, plan: SweepPlan, cursor: int) -> list[int]:
        """Chunks needed next, in order: the chunk at the cursor and the one after it."""
        if cursor >= len(plan):
            return [0]
        current = int(self.locate(plan.units[cursor : cursor + 1])[0][0])
        return [current, (current + 1) % (len(self.chunk_bounds) - 1)]
