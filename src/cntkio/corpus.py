"""The corpus: every sequence a source reads, as columns, and the units (sequences or frames) they hold.

A table chunk is a deserializer chunk (or the part of it inside a data slice) with at least one
sequence. Sequences are numbered chunk after chunk, so a sequence's chunk and row are implicit:
per sequence only its length (and key) is stored, shared with the deserializer's own index. Units are
numbered the same way: unit = sequence in sequence mode, one frame (sample) of a sequence in frame mode.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .arrays import exclusive_cumsum
from .deserializer import Deserializer
from .errors import ConfigError
from .streams import StreamInformation


class Corpus:
    """The sequences of the primary deserializer (optionally a slice of them) and their units.

    Example::

        corpus = Corpus([reader], None, frame_mode=False)
        corpus.num_units, corpus.sweep_size, corpus.keys_of(np.array([0, 5]))
    """

    def __init__(self, deserializers: list[Deserializer], data_slice: tuple[int, int] | None, frame_mode: bool):
        if len(deserializers) != 1:
            raise NotImplementedError("composite reading of several deserializers is not implemented yet")
        self.deserializers = deserializers
        self.primary = deserializers[0]
        self.frame_mode = frame_mode
        self.streams: list[StreamInformation] = []
        self.routing: dict[str, int] = {}  # stream name -> the deserializer that produces it
        for number, deserializer in enumerate(deserializers):
            for info in deserializer.stream_infos():
                if info.name in self.routing:
                    raise ConfigError(f"two streams have the same name: '{info.name}'")
                self.routing[info.name] = number
                self.streams.append(info)
        index = self.primary.sequence_index()
        first, stop = data_slice if data_slice is not None else (0, index.num_sequences)
        self.first_sequence = first
        bounds = np.clip(index.chunk_starts, first, stop)
        counts = np.diff(bounds)
        kept = np.flatnonzero(counts > 0)
        self.chunk_ids = kept  # deserializer chunk of each table chunk
        self.row0 = bounds[kept] - index.chunk_starts[kept]  # first row of each table chunk in its chunk
        self.sequence_starts = exclusive_cumsum(counts[kept])  # first sequence of each table chunk
        self.lengths = index.lengths[first:stop]
        self.keys = index.keys.slice(first, stop)
        self.chunk_samples = np.add.reduceat(self.lengths, self.sequence_starts[:-1], dtype=np.int64)
        self.sweep_size = int(self.chunk_samples.sum())
        # frame mode: first frame (= unit) of every sequence (8 bytes a sequence); sequence mode: units are
        # sequences, and nothing per sequence is added to the deserializer's own index
        self.frame_starts: np.ndarray | None = exclusive_cumsum(self.lengths) if frame_mode else None
        self.unit_starts = exclusive_cumsum(self.chunk_samples) if frame_mode else self.sequence_starts
        self.units_per_chunk = np.diff(self.unit_starts)

    @property
    def num_chunks(self) -> int:
        return len(self.chunk_ids)

    @property
    def num_units(self) -> int:
        return int(self.unit_starts[-1])

    def unit_lengths(self, chunk: int) -> np.ndarray:
        """Samples of each unit of a table chunk (int64)."""
        if self.frame_mode:
            return np.ones(int(self.units_per_chunk[chunk]), dtype=np.int64)
        a, b = self.sequence_starts[chunk], self.sequence_starts[chunk + 1]
        return self.lengths[a:b].astype(np.int64)

    def units_of_chunk(self, chunk: int) -> np.ndarray:
        return np.arange(self.unit_starts[chunk], self.unit_starts[chunk + 1], dtype=np.int64)

    def chunk_of_units(self, units: np.ndarray) -> np.ndarray:
        """Table chunk of each unit (int32)."""
        return (np.searchsorted(self.unit_starts, units, side="right") - 1).astype(np.int32)

    def streams_of(self, deserializer: int) -> list[StreamInformation]:
        """The streams a deserializer produces, in the corpus's stream order."""
        return [info for info in self.streams if self.routing[info.name] == deserializer]

    def slot_source(self, deserializer: int, chunk: int) -> tuple[Deserializer, int, int, int, np.ndarray | None]:
        """Where slot ``chunk`` of a deserializer's slot table comes from: (deserializer, its chunk id, first row
        used, reader-wide number of the first unit, frame starts in frame mode). The primary's slots are the
        table chunks."""
        if deserializer != 0:
            raise ValueError(f"deserializer {deserializer} has no slot table")
        return (
            self.primary,
            int(self.chunk_ids[chunk]),
            int(self.row0[chunk]),
            int(self.unit_starts[chunk]),
            self.frame_starts_of(chunk),
        )

    def frame_starts_of(self, chunk: int) -> np.ndarray | None:
        """Frame mode: first frame of each sequence of a table chunk, from 0 (for the native gather)."""
        if self.frame_starts is None:
            return None
        a, b = self.sequence_starts[chunk], self.sequence_starts[chunk + 1]
        return self.frame_starts[a : b + 1] - self.frame_starts[a]

    def sequences_of_units(self, units: np.ndarray) -> np.ndarray:
        """Sequence (in corpus order) of each unit."""
        if self.frame_starts is None:
            return units
        return np.searchsorted(self.frame_starts, units, side="right") - 1

    def keys_of(self, units: np.ndarray) -> list[tuple[str, Any]]:
        """``(source, key)`` of each unit; ``(source, (key, frame))`` in frame mode."""
        source = self.primary.source_name
        sequences = self.sequences_of_units(units)
        keys = self.keys.take(sequences)
        if self.frame_starts is not None:
            frames = (units - self.frame_starts[sequences]).tolist()
            return [(source, (key, frame)) for key, frame in zip(keys, frames)]
        return [(source, key) for key in keys]

    def describe_unit(self, unit: int) -> tuple[str, Any, int]:
        """(source, key, index length) of a unit's sequence, for messages."""
        sequence = int(self.sequences_of_units(np.array([unit], dtype=np.int64))[0])
        return self.primary.source_name, self.keys[sequence], int(self.lengths[sequence])

    def fingerprint(self) -> list[Any]:
        """Identifies the data: the deserializers' own fingerprints (files, sizes, times) and the counts."""
        return [
            [d.fingerprint() for d in self.deserializers],
            self.first_sequence,
            len(self.lengths),
            self.num_chunks,
            self.sweep_size,
        ]
