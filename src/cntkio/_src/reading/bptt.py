"""Truncated BPTT packing: parallel slots, each a stream of whole sequences cut into windows of T steps."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from cntkio._src.common.errors import ConfigError


@dataclass
class Piece:
    """Part of a unit placed in a slot row: ``count`` samples from ``offset``."""

    unit: int
    offset: int
    count: int


class BpttSlots:
    """The carry-over between BPTT minibatches: per slot, the units not fully delivered yet, and the
    units fetched from the timeline that no slot has taken yet (in timeline order).

    After an elastic merge (:func:`cntkio._src.reading.checkpoint.merge_checkpoints`) the sequences every old partition
    had in flight are *merged*: the first read with k partitions shares them out (partition i takes every k-th from the
    i-th) into its *carried* queue, which its slots take from, where each piece stopped, before any unit of the
    timeline."""

    def __init__(self, truncation_length: int):
        self.truncation_length = truncation_length
        self.slots: list[deque[list[int]]] = []  # per slot: [unit, delivered samples, length]
        self.pending: list[int] = []  # samples waiting in each slot
        self.waiting: deque[list[int]] = deque()  # [unit, length, 1 if it ends a sweep]
        self.carried: deque[list[int]] = deque()  # [unit, delivered samples, length, 1 if it ends a sweep]
        self.merged: list[list[int]] | None = None  # the in-flight pieces of a merge, not shared out yet

    def resize(self, count: int) -> None:
        """Sets the number of slots; units of removed slots move to the last kept slot."""
        while len(self.slots) < count:
            self.slots.append(deque())
            self.pending.append(0)
        while len(self.slots) > count:
            removed, samples = self.slots.pop(), self.pending.pop()
            self.slots[-1].extend(removed)
            self.pending[-1] += samples

    def fill(self, fetch: Callable[[], tuple[np.ndarray, np.ndarray, list[int]]]) -> bool:
        """Refills every slot, in order, until it holds more than T samples (CNTK's rule), taking units in
        timeline order; ``fetch`` reads more units. Returns whether a unit that ends a sweep was taken."""
        ended = False
        for slot in range(len(self.slots)):
            while self.pending[slot] <= self.truncation_length:
                if self.carried:
                    unit, done, length, ends_sweep = self.carried.popleft()
                else:
                    if not self.waiting and not self._fetch(fetch):
                        return ended
                    unit, length, ends_sweep = self.waiting.popleft()
                    done = 0
                ended |= bool(ends_sweep)
                if length > done:
                    self.slots[slot].append([unit, done, length])
                    self.pending[slot] += length - done
        return ended

    def share(self, partitions: int, index: int) -> None:
        """Takes this partition's share of a merge's pieces in flight (once, at the first read after the restore)."""
        if self.merged is not None:
            self.carried.extend(self.merged[index::partitions])
            self.merged = None

    def _fetch(self, fetch: Callable[[], tuple[np.ndarray, np.ndarray, list[int]]]) -> bool:
        units, lengths, sweep_ends = fetch()
        flags = np.zeros(len(units) + 1, dtype=np.int64)
        flags[np.asarray(sweep_ends, dtype=np.int64)] = 1
        if flags[0] and self.waiting:  # a sweep ended before the first new unit: mark the last one waiting
            self.waiting[-1][2] = 1
        elif flags[0]:
            self.waiting.append([-1, 0, 1])  # nothing to carry: only reports the sweep end
        self.waiting.extend([u, n, f] for u, n, f in zip(units.tolist(), lengths.tolist(), flags[1:].tolist()))
        return len(units) > 0 or bool(flags[0])

    def is_empty(self) -> bool:
        return not any(self.pending)

    def units(self) -> list[int]:
        """Units in the slots or waiting for one (their chunks are still needed)."""
        return (
            [entry[0] for slot in self.slots for entry in slot]
            + [entry[0] for entry in self.carried if entry[0] >= 0]
            + [u for u, _, _ in self.waiting if u >= 0]
        )

    def in_flight(self) -> list[list[int]]:
        """Every piece this partition still owes, oldest first, as [unit, delivered samples, length, 1 if it ends
        a sweep] (what an elastic merge carries over)."""
        if self.merged is not None:
            return [list(entry) for entry in self.merged]
        return (
            [[*entry, 0] for slot in self.slots for entry in slot]
            + [list(entry) for entry in self.carried]
            + [[unit, 0, length, ends] for unit, length, ends in self.waiting]
        )

    def cut(self) -> list[list[Piece]]:
        """Takes up to T samples from every slot: the pieces of each row, in order."""
        rows = []
        for index, slot in enumerate(self.slots):
            room = self.truncation_length
            pieces = []
            while room and slot:
                entry = slot[0]
                unit, done, length = entry
                count = min(room, length - done)
                pieces.append(Piece(unit, done, count))
                entry[1] += count
                room -= count
                if entry[1] == length:
                    slot.popleft()
            self.pending[index] -= self.truncation_length - room
            rows.append(pieces)
        return rows

    def get_state(self) -> dict[str, Any]:
        return {
            "slots": [[list(entry) for entry in slot] for slot in self.slots],
            "waiting": [list(w) for w in self.waiting],
            "carried": [list(entry) for entry in self.carried],
            "merged": None if self.merged is None else [list(entry) for entry in self.merged],
        }

    def set_state(self, state: dict[str, Any] | None) -> None:
        state = state or {"slots": [], "waiting": [], "carried": [], "merged": None}
        self.slots = [deque([list(map(int, entry)) for entry in slot]) for slot in state["slots"]]
        self.pending = [sum(length - done for _, done, length in slot) for slot in self.slots]
        self.waiting = deque([list(map(int, w)) for w in state["waiting"]])
        self.carried = deque([list(map(int, entry)) for entry in state["carried"]])
        merged = state["merged"]
        self.merged = None if merged is None else [list(map(int, entry)) for entry in merged]


def check_in_flight(state: dict[str, Any], lengths: np.ndarray) -> None:
    """Checks the pieces of a BPTT state (``bptt_slots``, types already checked) against the sequence lengths of
    the data: every unit within the data with its own length, every offset within it. Raises ``ConfigError``."""
    entries = [
        (f"slots[{n}]", unit, done, length, 0) for n, slot in enumerate(state["slots"]) for unit, done, length in slot
    ]
    entries += [("waiting", unit, 0, length, ends) for unit, length, ends in state["waiting"]]
    for key in ("carried", "merged"):
        entries += [(key, unit, done, length, ends) for unit, done, length, ends in state[key] or []]
    units = len(lengths)
    for where, unit, done, length, ends in entries:
        if ends not in (0, 1):
            raise ConfigError(f"checkpoint: bptt_slots.{where}: a sweep-end flag must be 0 or 1, got {ends}")
        if unit == -1 and not where.startswith("slots") and done == length == 0:
            continue  # marks only the end of a sweep
        if not 0 <= unit < units:
            raise ConfigError(f"checkpoint: bptt_slots.{where}: sequence {unit} is outside the data's [0, {units})")
        if length != int(lengths[unit]):
            raise ConfigError(
                f"checkpoint: bptt_slots.{where}: sequence {unit} has {int(lengths[unit])} samples; the state says "
                f"{length}"
            )
        if not 0 <= done < length:
            raise ConfigError(
                f"checkpoint: bptt_slots.{where}: {done} samples delivered of sequence {unit}; allowed [0, {length})"
            )


def row_layout(rows: list[list[Piece]]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Flattens rows of pieces: (units, offsets, counts, row of each piece)."""
    pieces = [(piece, number) for number, row in enumerate(rows) for piece in row]
    units = np.array([p.unit for p, _ in pieces], dtype=np.int64)
    offsets = np.array([p.offset for p, _ in pieces], dtype=np.int64)
    counts = np.array([p.count for p, _ in pieces], dtype=np.int64)
    row_of = np.array([n for _, n in pieces], dtype=np.int64)
    return units, offsets, counts, row_of
