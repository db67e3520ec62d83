"""``MinibatchSource``: the public face of the reader (mirrors ``cntk.io.MinibatchSource``)."""

from __future__ import annotations

import enum
import hashlib
import json
import math
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .bptt import BpttSlots, row_layout
from .checkpoint import CHECKPOINT_VERSION, merge_checkpoints
from .chunk_cache import ChunkCache
from .data_slice import parse_slice
from .deserializer import Deserializer
from .errors import CNTKIOError, ConfigError
from .minibatch import Minibatch, MinibatchData, Provenance
from .packer import Part, ShortStreamError, pack
from .streams import Record, StreamInformation
from .timeline import Randomization, SweepPlan, Timeline

INFINITELY_REPEAT = 2**64 - 1
FULL_DATA_SWEEP = 2**64 - 2
DEFAULT_RANDOMIZATION_WINDOW_IN_CHUNKS = 128


class TraceLevel(enum.IntEnum):
    Error = 0
    Warning = 1
    Info = 2


@dataclass(frozen=True)
class _Selection:
    """The units of one minibatch; for truncated BPTT also the pieces and rows they fill."""

    units: np.ndarray
    end_of_sweep: bool
    offsets: np.ndarray | None = None
    counts: np.ndarray | None = None
    row_lengths: np.ndarray | None = None
    starts: np.ndarray | None = None


def _is_unbounded(value: Any) -> bool:
    return value is None or value == INFINITELY_REPEAT or (isinstance(value, float) and math.isinf(value))


class MinibatchSource:
    """Reads minibatches from a deserializer.

    Same arguments and defaults as ``cntk.io.MinibatchSource``, plus keyword-only extras:
    ``compat`` (CNTK's exact randomization order), ``data_slice`` (read only a deterministic slice of
    the sequences, e.g. ``"[10%:20%]"`` or ``"[:5000]"``), ``prefetch`` and ``num_parse_threads``.
    Sweeps run on from each other: a minibatch may end one sweep and start the next (``end_of_sweep``).
    """

    def __init__(
        self,
        deserializers: Deserializer | Sequence[Deserializer],
        max_samples: int = INFINITELY_REPEAT,
        max_sweeps: int = INFINITELY_REPEAT,
        randomization_window_in_chunks: int = DEFAULT_RANDOMIZATION_WINDOW_IN_CHUNKS,
        randomization_window_in_samples: int = 0,
        randomization_seed: int = 0,
        trace_level: int = TraceLevel.Warning,
        multithreaded_deserializer: bool | None = None,
        frame_mode: bool = False,
        truncation_length: int = 0,
        randomize: bool = True,
        *,
        compat: bool = False,
        data_slice: str | slice | None = None,
        prefetch: bool = True,
        num_parse_threads: int | None = None,
    ):
        deserializers = [deserializers] if isinstance(deserializers, Deserializer) else list(deserializers)
        if not deserializers:
            raise ConfigError("at least one deserializer is required")
        if len(deserializers) > 1:
            raise NotImplementedError("composite reading of several deserializers is not implemented yet")
        if not _is_unbounded(max_samples) and not _is_unbounded(max_sweeps):
            raise ConfigError("max_samples and max_sweeps cannot both be set")
        if randomization_window_in_chunks and randomization_window_in_samples:
            raise ConfigError("randomization_window_in_chunks and randomization_window_in_samples cannot both be set")
        if frame_mode and truncation_length > 0:
            raise ConfigError("frame_mode and truncation_length cannot be used together")
        if truncation_length < 0:
            raise ConfigError(f"truncation_length must be >= 0, got {truncation_length}")
        del multithreaded_deserializer  # chunks are always parsed on a thread pool
        self._deserializer = deserializers[0]
        for deserializer in deserializers:
            if hasattr(deserializer, "trace_level"):
                deserializer.trace_level = int(trace_level)
                if hasattr(deserializer, "errors"):
                    deserializer.errors.trace_level = int(trace_level)
        self._infos = self._deserializer.stream_infos()
        self.streams = Record({info.name: info for info in self._infos})
        self.frame_mode = bool(frame_mode)
        self.truncation_length = int(truncation_length)
        sample_window = bool(randomization_window_in_samples)
        window = int(randomization_window_in_samples or randomization_window_in_chunks)
        self.randomization = Randomization(
            enabled=bool(randomize) and window > 0,
            window=window,
            sample_window=sample_window,
            seed=int(randomization_seed),
            compat=bool(compat),
        )
        lengths = self._deserializer.sequence_lengths()
        self.data_slice = parse_slice(data_slice, len(lengths))
        self._timeline = Timeline(
            lengths, self._deserializer.chunk_sequence_counts(), self.frame_mode, self.randomization, self.data_slice
        )
        if self._timeline.sweep_size == 0:
            raise ConfigError("the data has no samples")
        self.max_samples, self.max_sweeps = max_samples, max_sweeps
        self._epoch = 0
        self._epoch_end = self._compute_epoch_end()
        threads = num_parse_threads if num_parse_threads is not None else min(2, os.cpu_count() or 1)
        self._cache = ChunkCache(self._deserializer, threads if prefetch else 0)
        self._sweep = 0
        self._cursor = 0
        self._partitioning: tuple[int, int] | None = None
        self._layers: dict[int, list[tuple[int, list[int]]]] = {}
        self._slots = BpttSlots(self.truncation_length)

    @property
    def epoch_size(self) -> float:
        """Samples in one epoch: ``max_samples``, or ``max_sweeps`` sweeps (``inf`` when infinite)."""
        size = self._timeline.sweep_size
        if not _is_unbounded(self.max_sweeps):
            return int(self.max_sweeps) * size
        if self.max_samples == FULL_DATA_SWEEP:
            return size
        if _is_unbounded(self.max_samples):
            return math.inf
        if int(self.max_samples) < 0:
            raise ConfigError(f"max_samples must be >= 0, got {self.max_samples}")
        return int(self.max_samples)

    def _compute_epoch_end(self) -> float:
        return (self._epoch + 1) * self.epoch_size

    def start_epoch(self, epoch: int) -> None:
        """Moves to the start of epoch ``epoch`` of the endless timeline (BrainScript's epochs): it covers
        samples ``[epoch * epoch_size, (epoch + 1) * epoch_size)``, so later epochs read later, reshuffled
        sweeps. Epoch 0 is where a new source starts."""
        if self.is_infinite():
            raise ValueError("an infinite source has no epochs; set max_samples or max_sweeps")
        self._epoch = int(epoch)
        self._restore_position(int(self._epoch * self.epoch_size))

    # --- streams ---------------------------------------------------------------------------------
    def stream_infos(self) -> list[StreamInformation]:
        return list(self._infos)

    def stream_info(self, name: str) -> StreamInformation:
        matches = [info for info in self._infos if info.name == name]
        if len(matches) != 1:
            raise KeyError(f"expected exactly one stream named {name!r}, found {len(matches)}")
        return matches[0]

    def __getitem__(self, name: str) -> StreamInformation:
        return self.stream_info(name)

    def is_infinite(self) -> bool:
        return _is_unbounded(self.max_samples) and _is_unbounded(self.max_sweeps)

    @property
    def sweep_size(self) -> int:
        """Samples in one sweep (index lengths; frames in frame mode)."""
        return self._timeline.sweep_size

    @property
    def position(self) -> int:
        """Global sample position of this partition's cursor."""
        return self._sweep * self._timeline.sweep_size + int(self._timeline.plan(self._sweep).starts[self._cursor])

    # --- reading ---------------------------------------------------------------------------------
    def next_minibatch(
        self,
        minibatch_size_in_samples: int,
        input_map: Mapping[Any, Any] | None = None,
        device: Any = None,
        num_data_partitions: int | None = None,
        partition_index: int | None = None,
    ) -> Minibatch | dict[Any, MinibatchData]:
        """The next minibatch, or ``{}`` once ``max_samples``/``max_sweeps`` is reached.

        With ``num_data_partitions=k``, partition ``i`` gets its share of every sweep: across the k
        partitions each sequence is delivered exactly once. Each partition reads about
        ``minibatch_size_in_samples / k`` samples per call.
        """
        del device  # arrays are returned on the host
        partitions, index = self._check_partition(num_data_partitions, partition_index)
        selection = self._advance(minibatch_size_in_samples, partitions, index)
        if selection is None:
            return {}
        result = self._pack(selection)
        if input_map is None:
            return result
        return {key: result[stream if isinstance(stream, str) else stream.name] for key, stream in input_map.items()}

    def skip_minibatch(
        self, minibatch_size_in_samples: int, num_data_partitions: int | None = None, partition_index: int | None = None
    ) -> bool:
        """Advances exactly as :meth:`next_minibatch` would, without reading any data.

        Returns False at the end. Used to hand out minibatches round-robin to loader workers.
        """
        partitions, index = self._check_partition(num_data_partitions, partition_index)
        return self._advance(minibatch_size_in_samples, partitions, index) is not None

    @staticmethod
    def _check_partition(num_data_partitions: int | None, partition_index: int | None) -> tuple[int, int]:
        partitions = 1 if num_data_partitions is None else int(num_data_partitions)
        index = 0 if partition_index is None else int(partition_index)
        if partitions < 1 or not 0 <= index < partitions:
            raise ValueError(f"invalid partition {partition_index} of {num_data_partitions}")
        return partitions, index

    def _advance(self, minibatch_size: int, partitions: int, index: int) -> _Selection | None:
        """Chooses the next minibatch's units and moves the cursor past them; None at the end."""
        if minibatch_size <= 0:
            raise ValueError(f"minibatch_size_in_samples must be positive, got {minibatch_size}")
        self._set_partitioning(partitions, index)
        if self.truncation_length:
            return self._advance_bptt(minibatch_size, partitions, index)
        budget = max(1, minibatch_size // partitions + (index < minibatch_size % partitions))
        units, sweep_ends = self._select(budget, partitions, index)
        return _Selection(units, bool(sweep_ends)) if len(units) else None

    def _set_partitioning(self, partitions: int, index: int) -> None:
        """Starts a new partitioning layer when the partition count changes mid-sweep."""
        current = self._partitioning
        if current is not None and current[0] != partitions and self._cursor > 0:
            # Without the other partitions' cursors, assume they all reached this one's position.
            self._layers.setdefault(self._sweep, []).append((current[0], [self._cursor] * current[0]))
            self._cursor = 0
        self._partitioning = (partitions, index)

    def _candidates(self, plan: SweepPlan, stop: int, partitions: int, index: int) -> np.ndarray:
        """Positions in [cursor, stop) this partition owns and no earlier partitioning consumed."""
        positions = np.arange(self._cursor, stop, dtype=np.int64)
        if partitions > 1:
            positions = positions[self._timeline.owners(plan, positions, partitions) == index]
        for old_partitions, cursors in self._layers.get(plan.sweep, []):
            owners = self._timeline.owners(plan, positions, old_partitions)
            positions = positions[positions >= np.asarray(cursors, dtype=np.int64)[owners]]
        return positions

    def _select(self, budget: int, partitions: int, index: int) -> tuple[np.ndarray, list[int]]:
        """Advances the cursor over the timeline; returns the units taken and, for each sweep that ended,
        how many of them came before its end."""
        timeline = self._timeline
        taken: list[np.ndarray] = []
        total = 0
        sweep_ends: list[int] = []
        idle_sweeps = 0
        while total < budget:
            plan = timeline.plan(self._sweep)
            base = self._sweep * timeline.sweep_size
            if base + plan.starts[self._cursor] >= self._epoch_end:
                break
            # Every unit has at least one sample, so the budget bounds how far to look ahead.
            stop = min(len(plan), self._cursor + (budget - total + 1) * partitions)
            candidates = self._candidates(plan, stop, partitions, index)
            running = total + np.cumsum(plan.lengths[candidates])
            fits = int(np.searchsorted(running, budget, side="right"))
            if total == 0:
                fits = max(fits, 1)  # a unit longer than the budget forms a minibatch of its own
            in_epoch = int(np.searchsorted(base + plan.starts[candidates], self._epoch_end, side="left"))
            count = min(fits, in_epoch, len(candidates))
            if count:
                taken.append(plan.units[candidates[:count]])
                total = int(running[count - 1])
            if count == len(candidates):
                if stop < len(plan):
                    self._cursor = stop
                    continue
                sweep_ends.append(sum(len(t) for t in taken))
                self._layers.pop(self._sweep, None)
                self._sweep, self._cursor = self._sweep + 1, 0
                idle_sweeps = 0 if taken else idle_sweeps + 1
                if idle_sweeps > 1:
                    break  # this partition owns no unit at all
                continue
            if in_epoch < fits:
                self._cursor = int(candidates[count])  # the epoch ends before this unit
            elif count:
                self._cursor = int(candidates[count - 1]) + 1
            break
        units = np.concatenate(taken) if taken else np.zeros(0, dtype=np.int64)
        return units, sweep_ends

    def _advance_bptt(self, minibatch_size: int, partitions: int, index: int) -> _Selection | None:
        """Truncated BPTT: every slot yields ``truncation_length`` steps, carrying sequences over."""
        length = self.truncation_length
        total_slots = max(1, minibatch_size // length)
        if partitions > total_slots:
            raise ValueError(
                f"{partitions} partitions need a minibatch of at least {partitions * length} samples with "
                f"truncation_length={length}"
            )
        self._slots.resize(total_slots // partitions + (index < total_slots % partitions))

        def fetch() -> tuple[np.ndarray, np.ndarray, list[int]]:
            units, sweep_ends = self._select(minibatch_size, partitions, index)
            return units, self._timeline.unit_length[units], sweep_ends

        end_of_sweep = self._slots.fill(fetch)
        if self._slots.is_empty():
            return None
        units, offsets, counts, row_lengths, starts = row_layout(self._slots.cut())
        return _Selection(units, end_of_sweep, offsets, counts, row_lengths, starts)

    def _pack(self, selection: _Selection) -> Minibatch:
        """Parses (or takes from the cache) the chunks the units live in and packs every stream."""
        units, offsets, counts = selection.units, selection.offsets, selection.counts
        chunks, sequences, frames = self._timeline.locate(units)
        if frames is not None:
            offsets, counts = frames, np.ones(len(frames), dtype=np.int64)
        unique, inverse = np.unique(chunks, return_inverse=True)
        order = None
        groups: list[np.ndarray | slice] = [slice(None)]
        if len(unique) > 1:
            grouping = np.argsort(inverse, kind="stable")
            if np.any(np.diff(grouping) != 1):
                order = np.argsort(grouping)
            groups = [np.flatnonzero(inverse == i) for i in range(len(unique))]
        loaded = {int(c): self._cache.get(int(c)) for c in unique}
        self._manage_memory(set(loaded), len(units))
        result = Minibatch()
        for info in self._infos:
            parts: list[Part] = [
                (
                    loaded[chunk_id][info.name],
                    sequences[group],
                    None if offsets is None else offsets[group],
                    None if counts is None else counts[group],
                )
                for chunk_id, group in zip(unique.tolist(), groups)
            ]
            try:
                result[info] = pack(info, parts, order, selection.end_of_sweep, selection.row_lengths, selection.starts)
            except ShortStreamError as error:
                group = groups[error.part]
                unit = int(units[group][error.unit])
                (source, key), *_ = Provenance(self._deserializer, self._timeline, np.array([unit])).keys
                sequence = int(self._timeline.unit_sequence[unit])
                steps = int(self._deserializer.sequence_lengths()[sequence])
                raise CNTKIOError(
                    f"{source}: input '{info.alias or info.name}' of sequence {key[0] if self.frame_mode else key} "
                    f"has fewer samples than the sequence's {steps} steps; frame mode and truncated BPTT need a "
                    "sample of every stream at every step"
                ) from None
        provenance = Provenance(self._deserializer, self._timeline, units)
        result.provenance = provenance
        for data in result.values():
            data.provenance = provenance
        return result

    def _manage_memory(self, in_use: set[int], last_count: int) -> None:
        """Prefetches the chunks the next reads need and drops the ones no read needs any more."""
        timeline = self._timeline
        keep = in_use | set(timeline.locate(np.asarray(self._slots.units(), dtype=np.int64))[0].tolist())
        if self.position < self._epoch_end:
            plan = timeline.plan(self._sweep)
            first, last = plan.chunk_spans
            partitions, index = self._partitioning or (1, 0)
            pending = last >= self._cursor
            if partitions > 1 and timeline.chunk_level_partitions(partitions):
                pending &= plan.chunk_rank % partitions == index
            candidates = np.flatnonzero(pending)
            candidates = candidates[np.argsort(first[candidates], kind="stable")]
            # The chunks the next reads touch, and then as many more as there are parse threads.
            soon = int(np.searchsorted(first[candidates], self._cursor + max(64, 2 * last_count * partitions)))
            upcoming = timeline.active_chunks[candidates[: soon + self._cache.threads]].tolist()
            for chunk_id in upcoming:
                self._cache.prefetch(chunk_id)
            keep |= set(upcoming)
        self._cache.retain(keep)

    # --- checkpoints -----------------------------------------------------------------------------
    def _fingerprint(self) -> str:
        """Identifies the data and the configuration that decide the order."""
        timeline = self._timeline
        description = json.dumps(
            [
                timeline.sweep_size,
                timeline.num_units,
                timeline.num_chunks,
                int(timeline.units_per_chunk.sum()),
                self.randomization.__dict__,
                self.frame_mode,
                self.truncation_length,
                self.data_slice,
            ],
            sort_keys=True,
        )
        return hashlib.sha256(description.encode()).hexdigest()[:16]

    def get_checkpoint_state(self) -> dict[str, Any]:
        """A small, versioned, JSON-serialisable dict; :meth:`restore_from_checkpoint` continues from it
        exactly (also in a new process, and with another partition count after :meth:`merge_checkpoints`)."""
        state: dict[str, Any] = {
            "version": CHECKPOINT_VERSION,
            "minibatchSourcePosition": self.position,
            "sweep": self._sweep,
            "cursor": self._cursor,
            "partitioning": list(self._partitioning) if self._partitioning else None,
            "layers": {str(s): [[n, list(c)] for n, c in layers] for s, layers in self._layers.items()},
            "fingerprint": self._fingerprint(),
            "epoch": self._epoch,
        }
        if self.truncation_length:
            state["bptt_slots"] = self._slots.state()
        return state

    def restore_from_checkpoint(self, state: Mapping[str, Any]) -> None:
        """Continues from a state of :meth:`get_checkpoint_state` (or CNTK's ``{'minibatchSourcePosition': n}``,
        rounded up to the next sequence boundary)."""
        if "sweep" not in state:
            self._restore_position(int(state["minibatchSourcePosition"]))
            return
        if int(state.get("version", CHECKPOINT_VERSION)) > CHECKPOINT_VERSION:
            raise ConfigError(f"checkpoint version {state['version']} is newer than this cntkio understands")
        if state.get("fingerprint") not in (None, self._fingerprint()):
            raise ConfigError("the checkpoint was taken with other data or another configuration (fingerprint differs)")
        self._sweep, self._cursor = int(state["sweep"]), int(state["cursor"])
        partitioning = state.get("partitioning")
        self._partitioning = (int(partitioning[0]), int(partitioning[1])) if partitioning else None
        self._layers = {
            int(s): [(int(n), [int(c) for c in cursors]) for n, cursors in layers]
            for s, layers in dict(state.get("layers", {})).items()
        }
        self._slots.restore(state.get("bptt_slots"))
        self._epoch = int(state.get("epoch", 0))
        self._epoch_end = self._compute_epoch_end()

    def _restore_position(self, position: int) -> None:
        self._sweep, within = divmod(position, self._timeline.sweep_size)
        plan = self._timeline.plan(self._sweep)
        self._cursor = int(np.searchsorted(plan.starts[:-1], within, side="left"))
        if self._cursor >= len(plan):
            self._sweep, self._cursor = self._sweep + 1, 0
        self._partitioning, self._layers = None, {}
        self._slots.restore(None)
        self._epoch_end = self._compute_epoch_end()

    merge_checkpoints = staticmethod(merge_checkpoints)

    @property
    def current_position(self) -> dict[str, Any]:
        return self.get_checkpoint_state()

    @current_position.setter
    def current_position(self, state: Mapping[str, Any]) -> None:
        self.restore_from_checkpoint(state)

    def iter_minibatches(self, minibatch_size_in_samples: int, **kwargs: Any) -> Iterator[dict[Any, MinibatchData]]:
        """Yields minibatches until the source is exhausted (forever if it is infinite)."""
        while True:
            minibatch = self.next_minibatch(minibatch_size_in_samples, **kwargs)
            if not minibatch:
                return
            yield minibatch

    def close(self) -> None:
        """Stops background parsing."""
        self._cache.close()
