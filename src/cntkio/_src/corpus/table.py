"""The corpus: every sequence a source reads, as columns, and the units (sequences or frames) they hold.

A table chunk is a chunk of the primary deserializer (or the part of it inside a data slice, less the
sequences a secondary lacks) with at least one sequence. Sequences are numbered table chunk after table
chunk; units are numbered the same way: unit = sequence in sequence mode, one frame (sample) of a
sequence in frame mode. A single deserializer adds nothing per sequence to its own index in sequence
mode; several deserializers add the join (:mod:`cntkio._src.corpus.join`): per sequence its length and, for each
secondary, the sequence holding its key.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from functools import cached_property
from typing import Any

import numpy as np

from cntkio._src.common.arrays import exclusive_cumsum, segment_sums
from cntkio._src.common.errors import ConfigError
from cntkio._src.common.streams import StreamInformation
from cntkio._src.corpus.join import JoinReport, LengthMismatch, join
from cntkio._src.corpus.key_names import KeyNames
from cntkio._src.formats.identity import identity_of
from cntkio._src.formats.protocol import Deserializer

ChunkKey = tuple[int, int]  # (deserializer, slot): a table chunk of the primary, a chunk of a secondary
LoadKey = tuple[int, int, int]  # (deserializer, slot, the sweep it is read for: 0 unless the chunks vary by sweep)
SWEEP_VERSIONS = 2  # copies of a sweep-dependent chunk: sweeps s and s + 1 may be read at once, never s + 2
REFERENCED_CACHE_ENTRIES = 1 << 14  # table chunks whose secondary chunks are remembered


class Corpus:
    """The sequences of the primary deserializer (optionally a slice of them), joined with the
    secondaries by key, and their units.

    Example::

        corpus = Corpus([features, labels], None, frame_mode=False)
        corpus.num_units, corpus.sweep_size, corpus.keys_of(np.array([0, 5]))
    """

    def __init__(
        self,
        deserializers: list[Deserializer],
        data_slice: tuple[int, int] | None,
        frame_mode: bool,
        *,
        strict: bool = False,
        length_mismatch: LengthMismatch | str = LengthMismatch.PAD,
    ):
        self.deserializers = deserializers
        self.primary = deserializers[0]
        self.frame_mode = frame_mode
        self.length_mismatch = LengthMismatch.parse(length_mismatch)
        self.streams: list[StreamInformation] = []
        self.routing: dict[str, int] = {}  # stream name -> the deserializer that produces it
        for number, deserializer in enumerate(deserializers):
            for info in deserializer.stream_infos():
                if info.name in self.routing:
                    other = deserializers[self.routing[info.name]].source_name
                    raise ConfigError(
                        f"two streams have the same name '{info.name}' ({other} and {deserializer.source_name}); "
                        "stream names must be unique across deserializers"
                    )
                self.routing[info.name] = number
                if info.stream_id != len(self.streams):  # ids number the streams of every deserializer
                    info = dataclasses.replace(info, stream_id=len(self.streams))
                self.streams.append(info)
        _check_broadcast(deserializers)
        # copies of each chunk: chunks that vary by sweep keep one per sweep parity (a window may span a boundary)
        self.versions = [SWEEP_VERSIONS if d.sweep_dependent else 1 for d in deserializers]
        self.sweep_dependent = any(v > 1 for v in self.versions)
        index = self.primary.sequence_index()
        first, stop = data_slice if data_slice is not None else (0, index.num_sequences)
        self.first_sequence = first
        self.join_report: JoinReport | None = None
        self.matches: list[np.ndarray] = []  # per secondary: its sequence holding each corpus sequence's key
        self.caps: np.ndarray | None = None
        # the primary sequence of corpus sequence i: first + i, or primary_ids[i] when some were dropped
        self.primary_ids: np.ndarray | None = None
        if len(deserializers) == 1:
            self.lengths = index.lengths[first:stop]
        else:
            joined = join(deserializers, first, stop, strict=strict, length_mismatch=self.length_mismatch)
            self.join_report = joined.report
            self.matches, self.lengths, self.caps, self.primary_ids = (
                joined.matches, joined.lengths, joined.caps, joined.kept,
            )  # fmt: skip
        if self.primary_ids is None:
            bounds = np.clip(index.chunk_starts, first, stop)
            counts = np.diff(bounds)
            kept = np.flatnonzero(counts > 0)
            self.chunk_ids = kept  # deserializer chunk of each table chunk
            self.row0 = bounds[kept] - index.chunk_starts[kept]  # first row of each table chunk in its chunk
            self.sequence_starts = exclusive_cumsum(counts[kept])  # first sequence of each table chunk
        else:
            home = np.searchsorted(index.chunk_starts, self.primary_ids, side="right") - 1
            self.chunk_ids, counts = np.unique(home, return_counts=True)
            self.sequence_starts = exclusive_cumsum(counts)
            self.row0 = self.primary_ids[self.sequence_starts[:-1]] - index.chunk_starts[self.chunk_ids]
        self.chunk_samples = segment_sums(self.lengths, self.sequence_starts[:-1])
        self.sweep_size = int(self.chunk_samples.sum())
        # frame mode: first frame (= unit) of every sequence (8 bytes a sequence); sequence mode: units are
        # sequences, and nothing per sequence is added to the deserializer's own index
        self.frame_starts: np.ndarray | None = exclusive_cumsum(self.lengths) if frame_mode else None
        self.unit_starts = exclusive_cumsum(self.chunk_samples) if frame_mode else self.sequence_starts
        self.units_per_chunk = np.diff(self.unit_starts)
        self._referenced: dict[ChunkKey, np.ndarray] = {}  # (secondary, table chunk) -> its chunks needed

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

    def slot_counts(self) -> list[int]:
        """Slots of each deserializer: the table chunks for the primary, its chunks for a secondary (times the
        copies kept of chunks that vary by sweep)."""
        counts = [self.num_chunks] + [d.num_chunks() for d in self.deserializers[1:]]
        return [count * versions for count, versions in zip(counts, self.versions)]

    def slots(self, table_chunks: np.ndarray, sweeps: np.ndarray | None) -> np.ndarray:
        """The primary's slots holding the table chunks as read in the given sweeps (int32)."""
        versions = self.versions[0]
        if versions == 1 or sweeps is None:
            return np.asarray(table_chunks, dtype=np.int32)
        slots: np.ndarray = (np.asarray(table_chunks, dtype=np.int32) * versions + (sweeps % versions)).astype(np.int32)
        return slots

    def load_plan(self, table_chunks: np.ndarray, sweeps: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """The chunks reading the given table chunks in the given sweeps needs, per deserializer: (slots, the sweep
        each is read for), int64, each slot once, in the order first needed. The primary's slots are the table
        chunks; a secondary's, its chunks holding the keys of their sequences. The sweep matters only to chunks
        that vary by sweep (0 for the others)."""
        table_chunks = np.asarray(table_chunks, dtype=np.int64)
        sweeps = np.asarray(sweeps, dtype=np.int64)
        plan = [self._slots_of(0, table_chunks, sweeps)]
        for number in range(1, len(self.deserializers)):
            referenced = [self._chunks_referenced(number, c) for c in table_chunks.tolist()]
            counts = np.fromiter((len(r) for r in referenced), dtype=np.int64, count=len(referenced))
            chunks = np.concatenate(referenced).astype(np.int64) if referenced else np.zeros(0, dtype=np.int64)
            plan.append(self._slots_of(number, chunks, np.repeat(sweeps, counts)))
        return plan

    def _slots_of(self, deserializer: int, chunks: np.ndarray, sweeps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        versions = self.versions[deserializer]
        if versions == 1:
            slots, sweeps = chunks, np.zeros(len(chunks), dtype=np.int64)
        else:
            slots = chunks * versions + sweeps % versions
        _, first = np.unique(slots, return_index=True)
        first.sort()
        return slots[first], sweeps[first]

    def _chunks_referenced(self, deserializer: int, table_chunk: int) -> np.ndarray:
        """The chunks of a secondary that hold the keys of a table chunk's sequences (computed when first
        needed, remembered for the next sweeps; int32)."""
        key = (deserializer, table_chunk)
        found = self._referenced.get(key)
        if found is None:
            if len(self._referenced) >= REFERENCED_CACHE_ENTRIES:
                self._referenced.clear()
            a, b = self.sequence_starts[table_chunk], self.sequence_starts[table_chunk + 1]
            starts = self.deserializers[deserializer].sequence_index().chunk_starts
            homes = np.searchsorted(starts, self.matches[deserializer - 1][a:b], side="right") - 1
            found = self._referenced[key] = np.unique(homes).astype(np.int32)
        return found

    def chunk_keys(self, table_chunks: Iterable[tuple[int, int]]) -> list[LoadKey]:
        """:meth:`load_plan` of (table chunk, sweep) pairs as (deserializer, slot, sweep) keys, the primary's
        first."""
        pairs = np.array(list(table_chunks), dtype=np.int64).reshape(-1, 2)
        return [
            (number, slot, sweep)
            for number, (slots, sweeps) in enumerate(self.load_plan(pairs[:, 0], pairs[:, 1]))
            for slot, sweep in zip(slots.tolist(), sweeps.tolist())
        ]

    def slot_source(
        self, deserializer: int, slot: int
    ) -> tuple[Deserializer, int, int, np.ndarray | None, int, int, np.ndarray | None]:
        """Where a slot's chunk comes from (any copy of it): (deserializer, its chunk id, first row used, rows used
        (None: from the first row on), reader-wide number of the first unit, corpus number of the first sequence,
        frame starts in frame mode). A secondary's slot is its chunk, whole."""
        slot //= self.versions[deserializer]
        if deserializer:
            return self.deserializers[deserializer], slot, 0, None, 0, 0, None
        chunk_id = int(self.chunk_ids[slot])
        a, b = int(self.sequence_starts[slot]), int(self.sequence_starts[slot + 1])
        rows = None
        if self.primary_ids is not None:
            rows = self.primary_ids[a:b] - self.primary.sequence_index().chunk_starts[chunk_id]
            if int(rows[-1] - rows[0]) == b - a - 1:
                rows = None  # contiguous: row0 onwards
        frame_starts = None if self.frame_starts is None else self.frame_starts[a : b + 1] - self.frame_starts[a]
        return self.primary, chunk_id, int(self.row0[slot]), rows, int(self.unit_starts[slot]), a, frame_starts

    @cached_property
    def key_names(self) -> KeyNames:
        """What naming a unit's key needs, without the deserializers (a delivered minibatch's provenance holds it)."""
        return KeyNames(
            [d.sequence_index().keys for d in self.deserializers],
            [d.file_table() for d in self.deserializers],
            self.matches,
            self.primary_ids,
            int(self.first_sequence),
            self.frame_starts,
        )

    def sequences_of_units(self, units: np.ndarray) -> np.ndarray:
        """Sequence (in corpus order) of each unit."""
        return self.key_names.sequences_of_units(units)

    def keys_of(self, units: np.ndarray, deserializer: int = 0) -> list[tuple[str, Any]]:
        """``(source, key)`` of each unit in a deserializer (the primary by default); ``(source, (key,
        frame))`` in frame mode."""
        return self.key_names.keys_of(units, deserializer)

    def describe_unit(self, unit: int, deserializer: int = 0) -> tuple[str, Any, int]:
        """(source, key in a deserializer, length) of a unit's sequence, for messages."""
        names = self.key_names
        sequence = names.sequences_of_units(np.array([unit], dtype=np.int64))
        rows = names.rows_in(deserializer, sequence)
        files, numbers = names.files[deserializer].of(rows)
        key = names.keys[deserializer].take(rows)[0]
        return files[int(numbers[0])], key, int(self.lengths[int(sequence[0])])

    def identity(self) -> dict[str, Any]:
        """Identifies the data by content (:mod:`cntkio._src.formats.identity`): each deserializer's identity, and what
        the slice and the join made of them."""
        corpus: dict[str, Any] = {
            "first_sequence": int(self.first_sequence),
            "sequences": len(self.lengths),
            "chunks": int(self.num_chunks),
            "samples": int(self.sweep_size),
        }
        if len(self.deserializers) > 1:
            corpus["length_mismatch"] = self.length_mismatch.value
        return {"deserializers": [identity_of(d) for d in self.deserializers], "corpus": corpus}


def _check_broadcast(deserializers: Sequence[Deserializer]) -> None:
    """A broadcast deserializer is a secondary whose every sequence holds one sample (and defines nothing)."""
    for number, deserializer in enumerate(deserializers):
        if not deserializer.broadcast:
            continue
        name = deserializer.source_name
        if number == 0:
            raise ConfigError(f"{name}: a broadcast deserializer cannot be the primary (put it after the one it joins)")
        if any(info.defines_mb_size for info in deserializer.stream_infos()):
            raise ConfigError(f"{name}: a broadcast deserializer cannot define the minibatch size")
        index = deserializer.sequence_index()
        wrong = np.flatnonzero(np.asarray(index.lengths) != 1)
        if len(wrong):
            key = index.keys.take(wrong[:1])[0]
            raise ConfigError(
                f"{name}: a broadcast deserializer needs exactly one sample in every sequence; {len(wrong)} "
                f"sequence(s) differ, the first is {key!r} with {int(index.lengths[wrong[0]])}"
            )
