"""``MinibatchSource``: the public face of the reader (mirrors ``cntk.io.MinibatchSource``)."""

from __future__ import annotations

import enum
import math
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from .chunk_cache import ChunkCache
from .deserializer import Deserializer
from .errors import ConfigError
from .minibatch import MinibatchData
from .packer import pack
from .streams import Record, StreamInformation
from .timeline import SweepPlan, Timeline

INFINITELY_REPEAT = 2**64 - 1
FULL_DATA_SWEEP = 2**64 - 2
DEFAULT_RANDOMIZATION_WINDOW_IN_CHUNKS = 128
CHECKPOINT_VERSION = 1


class TraceLevel(enum.IntEnum):
    Error = 0
    Warning = 1
    Info = 2


class Minibatch(dict):  # type: ignore[type-arg]
    """``{StreamInformation: MinibatchData}`` that can also be indexed by stream name."""

    def __missing__(self, key: Any) -> MinibatchData:
        if isinstance(key, str):
            for info, data in self.items():
                if isinstance(info, StreamInformation) and info.name == key:
                    return data
        raise KeyError(key)


def _is_unbounded(value: Any) -> bool:
    return value is None or value == INFINITELY_REPEAT or (isinstance(value, float) and math.isinf(value))


class MinibatchSource:
    """Reads minibatches from one or more deserializers.

    Same arguments and defaults as ``cntk.io.MinibatchSource``. Sweeps run on from each other: a
    minibatch may hold the end of one sweep and the start of the next (``end_of_sweep`` is set).
    """

    def __init__(
        self,
        deserializers: Deserializer | list[Deserializer],
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
        prefetch: bool = True,
    ):
        deserializers = list(deserializers) if isinstance(deserializers, (list, tuple)) else [deserializers]
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
        if randomize and (randomization_window_in_chunks or randomization_window_in_samples):
            raise NotImplementedError("randomize=True (block randomization) is not implemented yet; pass randomize=False")
        if truncation_length > 0:
            raise NotImplementedError("truncated BPTT packing is not implemented yet")
        self._deserializer = deserializers[0]
        for deserializer in deserializers:
            if hasattr(deserializer, "trace_level"):
                deserializer.trace_level = int(trace_level)
                if hasattr(deserializer, "errors"):
                    deserializer.errors.trace_level = int(trace_level)
        self._infos = self._deserializer.stream_infos()
        self.streams = Record({info.name: info for info in self._infos})
        self.frame_mode = bool(frame_mode)
        self._timeline = Timeline(
            self._deserializer.sequence_lengths(), self._deserializer.chunk_sequence_counts(), self.frame_mode
        )
        if self._timeline.sweep_size == 0:
            raise ConfigError("the data has no samples")
        self.max_samples, self.max_sweeps = max_samples, max_sweeps
        self._epoch_end = self._compute_epoch_end()
        self._cache = ChunkCache(self._deserializer, capacity=3, prefetch=prefetch)
        self._sweep = 0
        self._cursor = 0

    def _compute_epoch_end(self) -> float:
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

    # --- reading ---------------------------------------------------------------------------------
    @property
    def position(self) -> int:
        """Global sample position of the next unit to read."""
        return self._sweep * self._timeline.sweep_size + int(self._timeline.plan(self._sweep).starts[self._cursor])

    def next_minibatch(
        self,
        minibatch_size_in_samples: int,
        input_map: Mapping[Any, Any] | None = None,
        device: Any = None,
        num_data_partitions: int | None = None,
        partition_index: int | None = None,
    ) -> dict[Any, MinibatchData]:
        """The next minibatch, or ``{}`` once ``max_samples``/``max_sweeps`` is reached."""
        del device  # arrays are returned on the host
        if minibatch_size_in_samples <= 0:
            raise ValueError(f"minibatch_size_in_samples must be positive, got {minibatch_size_in_samples}")
        partitions = 1 if num_data_partitions is None else int(num_data_partitions)
        index = 0 if partition_index is None else int(partition_index)
        if partitions < 1 or not 0 <= index < partitions:
            raise ValueError(f"invalid partition {partition_index} of {num_data_partitions}")
        budget = max(1, minibatch_size_in_samples // partitions + (index < minibatch_size_in_samples % partitions))
        units, end_of_sweep = self._select(budget, partitions, index)
        if len(units) == 0:
            return {}
        result = self._pack(units, end_of_sweep)
        if input_map is None:
            return result
        return {key: result[stream if isinstance(stream, str) else stream.name] for key, stream in input_map.items()}

    def _select(self, budget: int, partitions: int, index: int) -> tuple[np.ndarray, bool]:
        """Advances the cursor over the timeline; returns the units taken and whether a sweep ended."""
        timeline = self._timeline
        taken: list[np.ndarray] = []
        total = 0
        end_of_sweep = False
        while total < budget:
            plan = timeline.plan(self._sweep)
            base = self._sweep * timeline.sweep_size
            if base + plan.starts[self._cursor] >= self._epoch_end:
                break
            # Every unit has at least one sample, so the budget bounds how far to look ahead.
            stop = min(len(plan), self._cursor + (budget - total + 1) * partitions)
            candidates = np.arange(self._cursor, stop, dtype=np.int64)
            if partitions > 1:
                candidates = candidates[timeline.owners(plan, candidates, partitions) == index]
                if len(candidates) == 0 and self._cursor == 0 and stop == len(plan):
                    break  # this partition owns no unit of the sweep
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
                end_of_sweep = True
                self._sweep, self._cursor = self._sweep + 1, 0
                continue
            if in_epoch < fits:
                self._cursor = int(candidates[count])  # the epoch ends before this unit
            elif count:
                self._cursor = int(candidates[count - 1]) + 1
            break
        units = np.concatenate(taken) if taken else np.zeros(0, dtype=np.int64)
        return units, end_of_sweep

    def _pack(self, units: np.ndarray, end_of_sweep: bool) -> Minibatch:
        """Parses (or takes from the cache) the chunks the units live in and packs every stream."""
        chunks, sequences, frames = self._timeline.locate(units)
        unique, inverse = np.unique(chunks, return_inverse=True)
        order = None
        if len(unique) > 1:
            grouping = np.argsort(inverse, kind="stable")
            if np.any(np.diff(grouping) != 1):
                order = np.argsort(grouping)
        loaded = {int(c): self._cache.get(int(c)) for c in unique}
        self._prefetch_next(set(loaded))
        groups = [np.flatnonzero(inverse == i) for i in range(len(unique))] if len(unique) > 1 else [None]
        result = Minibatch()
        for info in self._infos:
            parts = []
            for chunk_id, group in zip(unique.tolist(), groups):
                selected = sequences if group is None else sequences[group]
                frame_part = None if frames is None else (frames if group is None else frames[group])
                parts.append((loaded[chunk_id][info.name], selected, frame_part))
            result[info] = pack(info, parts, order, end_of_sweep)
        return result

    def _prefetch_next(self, in_use: set[int]) -> None:
        upcoming = self._timeline.upcoming_chunks(self._timeline.plan(self._sweep), self._cursor)
        for chunk_id in upcoming:
            self._cache.prefetch(chunk_id)
        self._cache.evict_except(in_use | set(upcoming))

    # --- checkpoints -----------------------------------------------------------------------------
    def get_checkpoint_state(self) -> dict[str, Any]:
        """A small JSON-serialisable dict; restore it with :meth:`restore_from_checkpoint`."""
        return {
            "version": CHECKPOINT_VERSION,
            "minibatchSourcePosition": self.position,
            "sweep": self._sweep,
            "cursor": self._cursor,
        }

    def restore_from_checkpoint(self, state: Mapping[str, Any]) -> None:
        """Continues from a state of :meth:`get_checkpoint_state` (or CNTK's ``minibatchSourcePosition``)."""
        if "sweep" in state and "cursor" in state:
            self._sweep, self._cursor = int(state["sweep"]), int(state["cursor"])
        else:
            position = int(state["minibatchSourcePosition"])
            self._sweep, within = divmod(position, self._timeline.sweep_size)
            plan = self._timeline.plan(self._sweep)
            self._cursor = int(np.searchsorted(plan.starts[:-1], within, side="left"))
            if self._cursor >= len(plan):
                self._sweep, self._cursor = self._sweep + 1, 0
        self._epoch_end = self._compute_epoch_end()

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
        """Stops background prefetching."""
        self._cache.close()
