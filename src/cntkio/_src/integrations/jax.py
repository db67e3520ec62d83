"""JAX integration: minibatches of a JAX process's partition as fixed-shape arrays for ``jit``.

Each JAX process reads its own partition of every sweep (``jax.process_index()`` of ``jax.process_count()``), so
across processes every sequence is read once. Batches are padded to a few shapes (the sequences and the steps
rounded up to ``batch_buckets`` / ``length_buckets``, powers of two by default), so a sweep compiles a handful of
programs instead of one per minibatch. With ``sharding=`` the batches are global ``jax.Array``s assembled from every
process's local data (``jax.make_array_from_process_local_data``); the processes then agree on each step's shape
and keep stepping together until every partition is done (a process with no data left contributes padding).
Each iteration over a finite source (``max_sweeps`` or ``max_samples``) reads one epoch, as :mod:`cntkio.torch`'s
passes do: the next one (``MinibatchSource.start_epoch``: later, reshuffled sweeps) once the one before was read to
its end, else the rest of the epoch being read (a loop left early, a restored state: what the iterator's
``get_state()`` would resume); :meth:`JaxIterator.set_epoch` picks the epoch the next iteration reads.
With ``equal_steps`` (:mod:`cntkio.equal_steps`, the rule :mod:`cntkio.torch` uses too) the processes know every
process's count of the epoch from the index: ``"pad"`` (the default with
``sharding``: every process steps as often as the one with the most, padding when its data has ended) or ``"carry"``
(all stop at the fewest, none more than ``max_carry`` behind; the rest comes first in the next epoch). Every batch
carries the ``(source, key)`` of each of its rows in ``batch.sequence_keys`` (padding rows have none), so exactly-once
can be checked as with torch's ``batch.keys``. ``get_state()`` is JSON; ``set_state()`` resumes exactly after the
last batch.

Install with ``pip install "cntkio[jax]"``.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from cntkio._src.api.source import MinibatchSource
from cntkio._src.assemble import layouts
from cntkio._src.assemble.minibatch import Minibatch, MinibatchData
from cntkio._src.integrations.ahead import Ahead
from cntkio._src.integrations.equal_steps import MAX_CARRY, EqualSteps, RankStream, check_max_carry, check_rule

__all__ = ["JaxBatch", "JaxIterator", "bucket"]

LAYOUTS = ("padded", "token_ids", "per_sequence")


def _jax() -> Any:
    try:
        return importlib.import_module("jax")
    except ImportError as error:  # pragma: no cover - exercised where jax is missing
        raise ImportError('cntkio.jax needs JAX: pip install "cntkio[jax]" (or jax[cpu])') from error


class JaxBatch(dict):  # type: ignore[type-arg]
    """A batch: ``{stream name: array, "lengths": {...}, "mask": {...}}`` (each stream's mask has the leading axes
    of its values: ``[B]`` for ``per_sequence``, ``[B, T]`` otherwise) and, beside the arrays,
    ``sequence_keys``: the ``(source, key)`` of the sequence in each row (rows past them are padding). A pytree of
    its arrays alone (the keys stay out of ``jit``'s cache key); a batch rebuilt from its leaves has no keys."""

    sequence_keys: list[Any]

    def __init__(self, *args: Any, sequence_keys: list[Any] | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.sequence_keys = list(sequence_keys or [])


_registered: list[bool] = []


def _register_batch(jax: Any) -> None:
    """Makes :class:`JaxBatch` a pytree node like ``dict`` (once)."""
    if _registered:
        return
    jax.tree_util.register_pytree_node(
        JaxBatch,
        lambda batch: ([batch[name] for name in sorted(batch)], tuple(sorted(batch))),
        lambda names, leaves: JaxBatch(zip(names, leaves, strict=True)),
    )
    _registered.append(True)


def bucket(size: int, buckets: tuple[int, ...] | None) -> int:
    """The smallest bucket >= ``size`` (the next power of two without buckets); an error past the largest."""
    if buckets is None:
        return 1 << max(int(size) - 1, 0).bit_length()
    for candidate in sorted(buckets):
        if candidate >= size:
            return int(candidate)
    raise ValueError(f"{size} does not fit the largest bucket {max(buckets)}: add a larger one")


class _Snapshot:
    """A :class:`JaxIterator`'s position after a batch: the source's pending checkpoint, the steps taken and (equal
    steps) the epoch's plan and the step in it; :meth:`state` builds ``get_state()``'s dict."""

    def __init__(self, source: Any, steps: int, plan: Any = None, step: int = 0):
        self.source = source  # a PendingCheckpoint, or a checkpoint dict already built
        self.steps = steps
        self.plan = plan
        self.step = step
        self.epoch: int | None = None
        self.at_epoch_start = False
        self._state: dict[str, Any] | None = None

    @classmethod
    def of(cls, state: dict[str, Any]) -> _Snapshot:
        snapshot = cls(state["source"], int(state["steps"]))
        snapshot._state = state
        return snapshot

    def state(self) -> dict[str, Any]:
        built = self._state
        if built is None:
            source = self.source if isinstance(self.source, dict) else self.source.state()
            built = {"source": source, "steps": self.steps}
            if self.plan is not None:
                built.update(epoch=self.plan.epoch, step=self.step, equal_steps=self.plan.state())
            self._state = built
        copy: dict[str, Any] = json.loads(json.dumps(built))  # (the caller's to change)
        return copy


class JaxIterator:
    """Fixed-shape batches of a source's partition for this JAX process.

    Example::

        batches = JaxIterator(functools.partial(make_source, "train.ctf"), 1024,
                              layout={"words": "token_ids", "intent": "per_sequence"})
        for epoch in range(10):                   # each iteration reads the next epoch of a finite source
            for batch in batches:                 # {"words": int64 [B, T], "intent": int64 [B], "lengths": {...},
                state = train_step(state, batch)  #  "mask": {"words": bool [B, T], "intent": bool [B]}}
        checkpoint = batches.get_state()          # JSON: batches.set_state(checkpoint) resumes after it

    Args:
        source: a :class:`MinibatchSource`, or a function that builds one (called once).
        minibatch_size: samples per minibatch for the whole job (each process reads its share).
        layout: ``"padded"`` (values ``[B, T, *shape]``, sparse streams densified), ``"token_ids"`` (one-hot
            streams: int64 ``[B, T]``) or ``"per_sequence"`` (one sample per sequence: ``[B, *shape]``, class ids
            for one-hot streams), for every stream or ``{name: layout}`` (others ``"padded"``). A stream's mask is
            ``[B, T]`` (True on real samples), or ``[B]`` (True on real sequences) for ``"per_sequence"``.
        batch_buckets, length_buckets: the sizes the sequences (B) and steps (T) are padded to.
        partition: ``(count, index)`` instead of ``jax.process_count()``, ``jax.process_index()``.
        sharding: a ``jax.sharding.Sharding`` of the batch axis: yield global arrays.
        pad_id: the id padding token ids (``mask`` tells padding apart).
        equal_steps: ``"pad"`` or ``"carry"``: every process takes the same number of steps per epoch by that rule
            (the source needs epochs: ``max_sweeps`` or ``max_samples``); None: each process reads its partition of
            the epoch to its end; ``"auto"``: ``"pad"`` with ``sharding`` over more than
            one process and a source with epochs, else None.
        max_carry: under ``"carry"``, the most minibatches a process may leave for the next epoch
            (:mod:`cntkio.equal_steps`).
        ahead: up to this many batches are read and padded ahead on a background thread while the step runs (the
            reader's C++ and JAX's dispatch run without the GIL); 0 reads each when asked. ``get_state()`` is the
            state after the last batch *delivered*, and a loop left early continues, in the next iteration, right
            after it (batches read ahead and not delivered are read again). Not with ``sharding`` (its processes
            agree on each step's shape with a collective, which stays on the thread that steps).
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
        equal_steps: str | None = "auto",
        max_carry: int = MAX_CARRY,
        ahead: int = 2,
    ):
        if int(ahead) < 0:
            raise ValueError(f"ahead must be >= 0, got {ahead}")
        self.ahead = int(ahead)
        if equal_steps not in (None, "auto"):
            check_rule(equal_steps)
        self.max_carry = check_max_carry(max_carry)
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
        self.equal_steps = equal_steps
        self.epoch: int | None = None  # the epoch the next iteration reads (or goes on reading), once known
        self._at_epoch_start = True  # the source is where an epoch starts (not continuing one read in part)
        self._planner: EqualSteps | None = None
        self._epoch_stream: RankStream | None = None  # the epoch being read (equal steps)
        self._delivered: _Snapshot | None = None  # while batches are read ahead: the state after the last delivered

    @property
    def source(self) -> MinibatchSource:
        if self._source is None:
            assert self._make is not None
            self._source = self._make()
        return self._source

    def get_state(self) -> dict[str, Any]:
        """JSON-able: the position after the last batch (of this process's partition)."""
        if self._delivered is not None:  # (batches are being read ahead: the last one the loop took)
            return self._delivered.state()
        stream, planner = self._epoch_stream, self._equal_steps_planner()
        if stream is None and planner is not None:  # (before the first step: the plan of the epoch to read)
            plan = planner.plan(self.source, self._next_epoch())
            return _Snapshot(self.source.pending_checkpoint(), self.steps, plan, 0).state()
        return self._snapshot().state()

    def _snapshot(self) -> _Snapshot:
        """The position now, taken in microseconds (its dict built by ``state()``)."""
        stream = self._epoch_stream
        if stream is None:
            return _Snapshot(self.source.pending_checkpoint(), self.steps)
        return _Snapshot(self.source.pending_checkpoint(), self.steps, stream.plan, stream.index)

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Resumes right after the batch ``state`` was taken at, or (equal steps) from a merged state of every
        process (``{"source": MinibatchSource.merge_checkpoints(...)}``, any partitioning)."""
        self.source.restore_from_checkpoint(dict(state["source"]))
        self.steps = int(state.get("steps", 0))
        self._at_epoch_start = False
        planner = self._equal_steps_planner()
        self._epoch_stream = None
        if planner is None:
            self.epoch = None if self.source.is_infinite() else self.source.current_epoch
            return
        epoch = int(state.get("epoch", self.source.current_epoch))
        stream = self._epoch_stream = planner.stream(
            self.source, epoch, self.index, state["source"], state.get("equal_steps"), int(state.get("step", 0))
        )
        self.epoch = epoch + 1 if stream.done else epoch

    def set_epoch(self, epoch: int) -> None:
        """The next iteration reads epoch ``epoch`` of the (finite) source from its start
        (``MinibatchSource.start_epoch``: later epochs read later, reshuffled sweeps); the iterations after it read
        the epochs after it, as without it. Like ``cntkio.torch``'s ``set_epoch``; with ``sharding``, every process
        calls it alike."""
        if int(epoch) < 0:
            raise ValueError(f"epoch must be >= 0, got {epoch}")
        if self.source.is_infinite():
            raise ValueError("an infinite source has no epochs: set max_samples or max_sweeps on the source")
        self.epoch = int(epoch)
        self._epoch_stream = None  # (equal steps: the next iteration plans this epoch)
        if self._equal_steps_planner() is None:
            self.source.start_epoch(self.epoch)
            self._at_epoch_start = True

    def _equal_steps_planner(self) -> EqualSteps | None:
        rule = self.equal_steps
        if rule == "auto":
            rule = "pad" if self.sharding is not None and self.partitions > 1 else None
            if rule is not None and self.source.is_infinite():
                rule = None
        if rule is None:
            return None
        if self._planner is None:
            if self.source.is_infinite():
                raise ValueError(f"equal_steps={rule!r} needs epochs: set max_samples or max_sweeps on the source")
            self._planner = EqualSteps(rule, self.minibatch_size, self.partitions, max_carry=self.max_carry)
        return self._planner

    def _next_epoch(self) -> int:
        if self.epoch is None:
            self.epoch = self.source.current_epoch
        return self.epoch

    def _equal_stream(self) -> RankStream | None:
        """The epoch this iteration reads under equal steps (the one a state was taken in, else the next), or None."""
        planner = self._equal_steps_planner()
        if planner is None:
            return None
        if self._epoch_stream is None or self._epoch_stream.done:
            self._epoch_stream = planner.stream(self.source, self._next_epoch(), self.index)
        return self._epoch_stream

    def __iter__(self) -> Iterator[JaxBatch]:
        _register_batch(_jax())
        if not self.ahead or self.sharding is not None or self._delivered is not None:
            for batch in self._batches():
                self.last_keys = batch.sequence_keys
                yield batch
                del batch
            return
        self._delivered = start = self._start_snapshot()
        batches = Ahead(self._snapshotted(self._batches()), self.ahead, name="cntkio-jax-ahead")
        finished = False
        try:
            for batch, snapshot in batches:
                self._delivered = snapshot
                self.last_keys = batch.sequence_keys
                yield batch
                del batch
            finished = True
        finally:
            batches.close()
            last, self._delivered = self._delivered, None
            if not finished:  # (a loop left early, or an error: go on right after the last batch delivered)
                self.set_state(last.state())
                if last is start:
                    self.epoch, self._at_epoch_start = start.epoch, start.at_epoch_start

    def _start_snapshot(self) -> _Snapshot:
        """:meth:`get_state` as a snapshot, with where the epochs stand (to put back a loop left before its first
        batch)."""
        snapshot = _Snapshot.of(self.get_state())
        snapshot.epoch, snapshot.at_epoch_start = self.epoch, self._at_epoch_start
        return snapshot

    def _snapshotted(self, batches: Iterator[JaxBatch]) -> Iterator[tuple[JaxBatch, _Snapshot]]:
        """Each batch with the position right after it (on the thread reading ahead)."""
        for batch in batches:
            yield batch, self._snapshot()
            del batch

    def _batches(self) -> Iterator[JaxBatch]:
        stream = self._equal_stream()
        if stream is None:
            yield from self._read_epoch()
            return
        while not stream.done:
            if stream.padding:
                stream.pad()
                local = None
            else:
                local = stream.read()
            if self.sharding is None:
                if local is not None:
                    batch = self._arrays(local, *self._shape(local))
                else:
                    batch = self._padding(bucket(1, self.batch_buckets), bucket(1, self.length_buckets))
            else:
                shape, _ = self._agree(local)
                batch = self._global(self._arrays(local, *shape) if local is not None else self._padding(*shape))
            self.steps += 1  # (before the batch leaves: a state taken with it counts it)
            yield batch
        self.epoch = stream.plan.epoch + 1

    def _read_epoch(self) -> Iterator[JaxBatch]:
        """Without equal steps: the rest of the epoch being read (an infinite source: all of it), then the next epoch
        is started for the next iteration. An iteration that continues an epoch already over (a state taken at its
        last batch, a loop left right after it) reads the next one instead of nothing."""
        source = self.source
        finite = not source.is_infinite()
        continued = not self._at_epoch_start
        while True:
            minibatch = source.next_minibatch(
                self.minibatch_size, num_data_partitions=self.partitions, partition_index=self.index
            )
            local = minibatch if isinstance(minibatch, Minibatch) else None
            shape, any_left = self._agree(local) if self.sharding is not None else ((0, 0), local is not None)
            if not any_left:  # (with sharding: no process has data left)
                if not (continued and finite):
                    break
                source.start_epoch(source.current_epoch + 1)
                continued = False
                continue
            continued = self._at_epoch_start = False
            if self.sharding is None:
                assert local is not None
                batch = self._arrays(local, *self._shape(local))
            else:
                batch = self._global(self._arrays(local, *shape) if local is not None else self._padding(*shape))
            self.steps += 1  # (before the batch leaves: a state taken with it counts it)
            yield batch
        if finite:
            self.epoch = source.current_epoch + 1
            source.start_epoch(self.epoch)  # (now: a state taken from here on resumes in it)
            self._at_epoch_start = True

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

    def _arrays(self, minibatch: Minibatch, rows: int, steps: int) -> JaxBatch:
        self.shapes.add((rows, steps))
        batch = JaxBatch({"lengths": {}, "mask": {}}, sequence_keys=minibatch.sequence_keys)
        for info, data in minibatch.items():
            batch[info.name] = self._stream(data, self._layout_of(info.name), rows, steps)
            lengths = np.zeros(rows, dtype=np.int32)
            lengths[: data.num_sequences] = data.sequence_lengths
            batch["lengths"][info.name] = lengths
            batch["mask"][info.name] = self._mask(data, self._layout_of(info.name), rows, steps)
        return batch

    @staticmethod
    def _mask(data: MinibatchData, layout: str, rows: int, steps: int) -> np.ndarray:
        """The stream's mask, of the leading axes of its values: ``[B]`` for ``per_sequence``, else ``[B, T]``."""
        if layout == "per_sequence":
            return np.arange(rows) < data.num_sequences
        return layouts.mask(data, rows, steps)

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

    def _padding(self, rows: int, steps: int) -> JaxBatch:
        """A batch of nothing but padding, shaped as this process's data would be (a partition with no data left
        still takes part in a global step)."""
        self.shapes.add((rows, steps))
        batch = JaxBatch({"lengths": {}, "mask": {}})
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
            batch["mask"][info.name] = np.zeros(rows if layout == "per_sequence" else (rows, steps), dtype=bool)
        return batch

    def _global(self, batch: JaxBatch) -> JaxBatch:
        """Global arrays of every process's rows; ``sequence_keys`` are this process's rows'."""
        jax = _jax()
        result = jax.tree_util.tree_map(
            lambda local: jax.make_array_from_process_local_data(self.sharding, local), batch
        )
        return JaxBatch(result, sequence_keys=batch.sequence_keys)
