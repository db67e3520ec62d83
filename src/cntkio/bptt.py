"""Truncated BPTT packing: parallel slots, each a stream of whole sequences cut into windows of T steps."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np


@dataclass
class Piece:
    """Part of a unit placed in a slot row: ``count`` samples from ``offset``."""

    unit: int
    offset: int
    count: int


class BpttSlots:
    """The carry-over between BPTT minibatches: per slot, the units not fully delivered yet."""

    def __init__(self, truncation_length: int):
        self.truncation_length = truncation_length
        self.slots: list[deque[list[int]]] = []  # per slot: [unit, delivered samples, length]

    def resize(self, count: int) -> None:
        """Sets the number of slots; units of removed slots move to the last kept slot."""
        while len(self.slots) < count:
            self.slots.append(deque())
        while len(self.slots) > count:
            removed = self.slots.pop()
            self.slots[-1].extend(removed)

    def pending(self, slot: int) -> int:
        """Samples waiting in a slot."""
        return sum(length - done for _, done, length in self.slots[slot])

    def push(self, slot: int, unit: int, length: int) -> None:
        self.slots[slot].append([unit, 0, length])

    def is_empty(self) -> bool:
        return all(not slot for slot in self.slots)

    def units(self) -> list[int]:
        return [entry[0] for slot in self.slots for entry in slot]

    def cut(self) -> list[list[Piece]]:
        """Takes up to T samples from every slot: the pieces of each row, in order."""
        rows = []
        for slot in self.slots:
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
            rows.append(pieces)
        return rows

    def state(self) -> list[list[list[int]]]:
        return [[list(entry) for entry in slot] for slot in self.slots]

    def restore(self, state: list[list[list[int]]]) -> None:
        self.slots = [deque([list(map(int, entry)) for entry in slot]) for slot in state]


def row_layout(rows: list[list[Piece]]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Flattens rows of pieces: (units, offsets, counts, row lengths, piece-starts-a-sequence flags)."""
    pieces = [piece for row in rows for piece in row]
    units = np.array([p.unit for p in pieces], dtype=np.int64)
    offsets = np.array([p.offset for p in pieces], dtype=np.int64)
    counts = np.array([p.count for p in pieces], dtype=np.int64)
    row_lengths = np.array([sum(p.count for p in row) for row in rows], dtype=np.int64)
    return units, offsets, counts, row_lengths, offsets == 0
