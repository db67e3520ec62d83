"""Truncated BPTT packing: parallel slots, each a stream of whole sequences cut into windows of T steps."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class Piece:
    """Part of a unit placed in a slot row: ``count`` samples from ``offset``."""

    unit: int
    offset: int
    count: int


class BpttSlots:
    """The carry-over between BPTT minibatches: per slot, the units not fully delivered yet, and the
    units fetched from the timeline that no slot has taken yet (in timeline order)."""

    def __init__(self, truncation_length: int):
        self.truncation_length = truncation_length
        self.slots: list[deque[list[int]]] = []  # per slot: [unit, delivered samples, length]
        self.pending: list[int] = []  # samples waiting in each slot
        self.waiting: deque[list[int]] = deque()  # [unit, length, 1 if it ends a sweep]

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
                if not self.waiting and not self._fetch(fetch):
                    return ended
                unit, length, ends_sweep = self.waiting.popleft()
                ended |= bool(ends_sweep)
                if length:
                    self.slots[slot].append([unit, 0, length])
                    self.pending[slot] += length
        return ended

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
        return [entry[0] for slot in self.slots for entry in slot] + [u for u, _, _ in self.waiting if u >= 0]

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

    def state(self) -> dict[str, Any]:
        return {
            "slots": [[list(entry) for entry in slot] for slot in self.slots],
            "waiting": [list(w) for w in self.waiting],
        }

    def restore(self, state: dict[str, Any] | None) -> None:
        state = state or {"slots": [], "waiting": []}
        self.slots = [deque([list(map(int, entry)) for entry in slot]) for slot in state["slots"]]
        self.pending = [sum(length - done for _, done, length in slot) for slot in self.slots]
        self.waiting = deque([list(map(int, w)) for w in state["waiting"]])


def row_layout(rows: list[list[Piece]]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Flattens rows of pieces: (units, offsets, counts, row of each piece)."""
    pieces = [(piece, number) for number, row in enumerate(rows) for piece in row]
    units = np.array([p.unit for p, _ in pieces], dtype=np.int64)
    offsets = np.array([p.offset for p, _ in pieces], dtype=np.int64)
    counts = np.array([p.count for p, _ in pieces], dtype=np.int64)
    row_of = np.array([n for _, n in pieces], dtype=np.int64)
    return units, offsets, counts, row_of
