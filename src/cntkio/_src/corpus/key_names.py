"""What naming a delivered unit's sequence key needs — per deserializer its file table and key column, the join's
row mapping, frame starts — held without the deserializers, so a minibatch kept by a consumer does not keep the
reader's open files and parsed state alive."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from cntkio._src.common.keys import KeyColumn
from cntkio._src.formats.protocol import FileTable


@dataclass(frozen=True)
class KeyNames:
    """Keys and files of every corpus unit, per deserializer (0: the primary)."""

    keys: list[KeyColumn]
    files: list[FileTable]
    matches: list[np.ndarray]  # per secondary: its sequence holding each corpus sequence's key
    primary_ids: np.ndarray | None  # the primary sequence of each corpus sequence, when some were dropped
    first_sequence: int  # else: the primary sequence of corpus sequence i is first_sequence + i
    frame_starts: np.ndarray | None  # frame mode: the first unit of each sequence

    def sequences_of_units(self, units: np.ndarray) -> np.ndarray:
        """Sequence (in corpus order) of each unit."""
        if self.frame_starts is None:
            return units
        sequences: np.ndarray = np.searchsorted(self.frame_starts, units, side="right") - 1
        return sequences

    def rows_in(self, deserializer: int, sequences: np.ndarray) -> np.ndarray:
        """The sequence of a deserializer (in its own numbering) joined to each corpus sequence."""
        rows: np.ndarray
        if deserializer:
            rows = self.matches[deserializer - 1][sequences]
        elif self.primary_ids is not None:
            rows = self.primary_ids[sequences]
        else:
            rows = sequences + self.first_sequence
        return rows

    def keys_of(self, units: np.ndarray, deserializer: int = 0) -> list[tuple[str, Any]]:
        """``(source, key)`` of each unit in a deserializer (the primary by default); ``(source, (key, frame))`` in
        frame mode."""
        sequences = self.sequences_of_units(units)
        rows = self.rows_in(deserializer, sequences)
        keys = self.keys[deserializer].take(rows)
        names, numbers = self.files[deserializer].of(rows)
        sources = [names[n] for n in numbers.tolist()]
        if self.frame_starts is not None:
            frames = (units - self.frame_starts[sequences]).tolist()
            return [(source, (key, frame)) for source, key, frame in zip(sources, keys, frames)]
        return list(zip(sources, keys))

    def key_columns(self, units: np.ndarray, deserializer: int = 0) -> tuple[list[str], np.ndarray, Any]:
        """:meth:`keys_of` as columns: the sources, each unit's number in that list, and the keys — an integer
        array when they are integers (in sequence mode), else a list."""
        rows = self.rows_in(deserializer, self.sequences_of_units(units))
        sources, numbers = self.files[deserializer].of(rows)
        ids = None if self.frame_starts is not None else self.keys[deserializer].take_array(rows)
        if ids is None:
            return sources, numbers, [key for _, key in self.keys_of(units, deserializer)]
        return sources, numbers, ids
