"""JAX integration: minibatches of a JAX process's partition as fixed-shape arrays for ``jit``.

Each JAX process reads its own partition of every sweep (``jax.process_index()`` of ``jax.process_count()``), so
across processes every sequence is read once. Batches are padded to a few shapes (the sequences and the steps
rounded up to ``batch_buckets`` / ``length_buckets``, powers of two by default), so a sweep compiles a handful of
programs instead of one per minibatch. With ``sharding=`` the batches are global ``jax.Array``s assembled from every
process's local data (``jax.make_array_from_process_local_data``); the processes then agree on each step's shape
and keep stepping together until every partition is done (a process with no data left contributes padding).
``get_state()`` is JSON; ``set_state()`` resumes exactly after the last batch.

Install with ``pip install "cntkio[jax]"``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from . import layouts
from .minibatch import Minibatch, MinibatchData
from .source import MinibatchSource

__all__ = ["JaxIterator", "bucket"]

LAYOUTS = ("padded", "token_ids", "per_sequence")


def _jax() -> Any:
    try:
        return importlib.import_module("jax")
    except ImportError as error:  # pragma: no cover - exercised where jax is missing
        raise ImportError('cntkio.jax needs JAX: pip install "cntkio[jax]" (or jax[cpu])') from error


def bucket(size: int, buckets: tuple[int, ...] | None) -> int:
    """The smallest bucket >= ``size`` (the next power of two without buckets); an error past the largest."""
    if buckets is None:
        return 1 << max(int(size) - 1, 0).bit_length()
    for candidate in sorted(buckets):
        if candidate >= size:
            return int(candidate)
    raise ValueError(f"{size} does not fit the largest bucket {max(buckets)}: add a larger one")


class JaxIterator:
    """Fixed-shape batches of a source's partition for this JAX process.

    Example::

        batches = JaxIterator(functools.partial(make_source, "train.ctf"), 1024,
                              layout={"words": "token_ids", "intent": "per_sequence"})
        for batch in batches:                     # {"words": int64 [B, T], "intent": int64 [B],
            state = train_step(state, batch)      #  "lengths": {...}, "mask": {...}}, B and T from the buckets
        checkpoint = batches.get_state()          # JSON: batches.set_state(checkpoint) resumes after it

    Args:
        source: a :class:`MinibatchSource`, or a function that builds one (called once).
        minibatch_size: samples per minibatch for the whole job (each process reads its share).
        layout: ``"padded"`` (values ``[B, T, *shape]``, sparse streams densified), ``"token_ids"`` (one-hot
            streams: int64 ``[B, T]``) or ``"per_sequence"`` (one sample per sequence: ``[B, *shape]``, class ids
            for one-hot streams), for every stream or ``{name: layout}`` (others ``"padded"``).
        batch_buckets, length_buckets: the sizes the sequences (B) and steps (T) are padded to.
        partition: ``(count, index)`` instead of ``jax.process_count()``, ``jax.process_index()``.
        sharding: a ``jax.sharding.Sharding`` of the batch axis: yield global arrays.
        pad_id: the id padding token ids (``mask`` tells padding apart).
    """

    def __init__(
        self,
        source: MinibatchSource | Callable[[], MinibatchSource],
        minibatch_size: int,
        *,
        layout: str | Mapping[str, str] = "padded",
        batch_buckets: tuple[int, ...] | None = None,
        length_buckets: tuple[int, ...] | None = None,
        partition: tuple[int, int] | None = None,
        sharding: Any = None,
        pad_id: int = 0,
    ):
        for name in [layout] if isinstance(layout, str) else list(layout.values()):
            if name not in LAYOUTS:
                raise ValueError(f"unknown layout {name!r}; one of {', '.join(LAYOUTS)}")
        self._make = source if callable(source) and not isinstance(source, MinibatchSource) else None
        self._source: MinibatchSource | None = source if isinstance(source, MinibatchSource) else None
        self.minibatch_size = int(minibatch_size)
        self.layout = layout if isinstance(layout, str) else dict(layout)
        self.batch_buckets = batch_buckets
        self.length_buckets = length_buckets
        self.sharding = sharding
        self.pad_id = int(pad_id)
        if partition is None:
            jax = _jax()
            partition = (jax.process_count(), jax.process_index())
        self.partitions, self.index = (int(partition[0]), int(partition[1]))
        self.shapes: set[tuple[int, int]] = set()  # the (B, T) of the batches so far: the programs jit compiles
        self.last_keys: list[Any] = []  # provenance (source, key) of the sequences of the last batch
        self.steps = 0

    @property
    def source(self) -> MinibatchSource:
        if self._source is None:
            assert self._make is not None
            self._source = self._make()
        return self._source

    def get_state(self) -> dict[str, Any]:
        """JSON-able: the position after the last batch (of this process's partition)."""
        return {"source": self.source.get_checkpoint_state(), "steps": self.steps}

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Resumes right after the batch ``state`` was taken at."""
        self.source.restore_from_checkpoint(dict(state["source"]))
        self.steps = int(state.get("steps", 0))

    def __iter__(self) -> Iterator[dict[str, Any]]:
        while True:
            minibatch = self.source.next_minibatch(
                self.minibatch_size, num_data_partitions=self.partitions, partition_index=self.index
            )
            local = minibatch if isinstance(minibatch, Minibatch) else None
            if self.sharding is None:
                if local is None:
                    return
                batch = self._arrays(local, *self._shape(local))
            else:
                shape, any_left = self._agree(local)
                if not any_left:
                    return
                batch = self._global(self._arrays(local, *shape) if local is not None else self._padding(*shape))
            self.steps += 1  # (before the batch leaves: a state taken with it counts it)
            yield batch

    # --- shapes -------------------------------------------------------------------------------------------------
    def _shape(self, minibatch: Minibatch) -> tuple[int, int]:
        first = next(iter(minibatch.values()))
        steps = max(data.max_length for data in minibatch.values())
        return bucket(first.num_sequences, self.batch_buckets), bucket(max(steps, 1), self.length_buckets)

    def _agree(self, local: Minibatch | None) -> tuple[tuple[int, int], bool]:
        """Every process's (B, T) and whether it has data, gathered; the largest shape for all."""
        from jax.experimental import multihost_utils

        mine = np.array([*self._shape(local), 1] if local is not None else [1, 1, 0], dtype=np.int64)
        everyone = np.asarray(multihost_utils.process_allgather(mine)).reshape(-1, 3)
        return (int(everyone[:, 0].max()), int(everyone[:, 1].max())), bool(everyone[:, 2].any())

    # --- arrays -------------------------------------------------------------------------------------------------
    def _layout_of(self, name: str) -> str:
        return self.layout if isinstance(self.layout, str) else self.layout.get(name, "padded")

    def _arrays(self, minibatch: Minibatch, rows: int, steps: int) -> dict[str, Any]:
        self.shapes.add((rows, steps))
        self.last_keys = minibatch.sequence_keys
        batch: dict[str, Any] = {"lengths": {}, "mask": {}}
        for info, data in minibatch.items():
            batch[info.name] = self._stream(data, self._layout_of(info.name), rows, steps)
            lengths = np.zeros(rows, dtype=np.int32)
            lengths[: data.num_sequences] = data.sequence_lengths
            batch["lengths"][info.name] = lengths
            batch["mask"][info.name] = layouts.mask(data, rows, steps)
        return batch

    def _stream(self, data: MinibatchData, layout: str, rows: int, steps: int) -> np.ndarray:
        if layout == "token_ids":
            return layouts.padded_ids(data, self.pad_id, rows, steps)
        if layout == "per_sequence":
            values = layouts.one_per_sequence(
                data, layouts.one_hot_ids(data, layout) if data.is_sparse else data.values
            )
            out = np.zeros((rows, *values.shape[1:]), dtype=values.dtype)
            out[: len(values)] = values
            return out
        return layouts.padded_values(data, rows, steps)

    def _padding(self, rows: int, steps: int) -> dict[str, Any]:
        """A batch of nothing but padding, shaped as this process's data would be (a partition with no data left
        still takes part in a global step)."""
        batch: dict[str, Any] = {"lengths": {}, "mask": {}}
        for info in self.source.stream_infos():
            layout = self._layout_of(info.name)
            if layout == "token_ids":
                batch[info.name] = np.full((rows, steps), self.pad_id, dtype=np.int64)
            elif layout == "per_sequence":
                shape = () if info.is_sparse else tuple(info.shape)
                batch[info.name] = np.zeros((rows, *shape), dtype=np.int64 if info.is_sparse else info.dtype)
            else:
                batch[info.name] = np.zeros((rows, steps, *info.shape), dtype=info.dtype)
            batch["lengths"][info.name] = np.zeros(rows, dtype=np.int32)
            batch["mask"][info.name] = np.zeros((rows, steps), dtype=bool)
        self.last_keys = []
        return batch

    def _global(self, batch: dict[str, Any]) -> dict[str, Any]:
        jax = _jax()
        return jax.tree_util.tree_map(lambda local: jax.make_array_from_process_local_data(self.sharding, local), batch)
