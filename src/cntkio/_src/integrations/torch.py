"""PyTorch integration: an ``IterableDataset`` of minibatches with exactly-once reading and exact resume.

Use it with ``DataLoader(dataset, batch_size=None, num_workers=...)`` — or :func:`loader`, which builds that
``DataLoader``; minibatching is done by cntkio (a ``DataLoader`` left at ``batch_size=1`` works too; a larger batch
size is refused with an explanation).

* Epochs: each new pass over a finite dataset reads the next epoch (``MinibatchSource.start_epoch``: later,
  reshuffled sweeps) — a ``DataLoader`` pass one epoch in all its workers, persistent ones too, whatever passes of
  other loaders or iterations in the main process came before; :meth:`MinibatchDataset.set_epoch` picks the epoch the
  next pass reads (the ones after it follow on).

* Ranks: each ``torch.distributed`` rank (rank and world size taken from ``torch.distributed`` when it is
  initialised) reads its own partition of every sweep, so across ranks each sequence is read once.
* Equal steps (:mod:`cntkio.equal_steps`): with ``torch.distributed`` initialised with more than one rank, every rank
  yields the same number of minibatches per epoch (``equal_steps="carry"``, the default: all stop at the fewest and
  carry the rest into the next epoch, none more than ``max_carry`` behind; ``"pad"``: all go on to the most, a rank
  out of data yielding empty batches of ``weight`` 0), so ranks stepping together do not hang at the end of an
  epoch; ``equal_steps=None`` turns it off.
* In the process that trains (no loader workers, the recommended way for CNTK formats) the next minibatches are
  read and made tensors on a background thread while the step runs (``ahead``), and each pass goes on with the
  source of the last one.
* Workers: a rank's minibatches are numbered 0, 1, 2, ... and dealt to the loader workers in turn, in bundles of
  consecutive ones (1 in a plain ``DataLoader``; :func:`loader` sends up to 8 per message, after a ramp of smaller
  ones: see ``cntkio._src.integrations.workers``); a worker skips the others' without reading them. The loader hands
  them out round-robin, so the stream a rank sees is the same for every ``num_workers``.
* Resume: every batch carries ``state``, the checkpoint right after it. ``load_state_dict(batch.state)``
  on a new dataset continues with the next batch under a new ``DataLoader``. ``state_dict()`` and
  ``load_state_dict()`` also follow the protocol of torchdata's ``StatefulDataLoader`` (per worker).
  :func:`gather_state` merges the states of all ranks so that a job can resume with another world size.
"""

from __future__ import annotations

import functools
import hashlib
import json
import multiprocessing
import os
import traceback
import uuid
import warnings
import weakref
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.utils.rnn import PackedSequence
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from cntkio._src.api.source import MinibatchSource
from cntkio._src.assemble.minibatch import Minibatch, MinibatchData
from cntkio._src.common.errors import ConfigError
from cntkio._src.formats.error_ledger import ledgers_of
from cntkio._src.formats.image import ImageDeserializerBase
from cntkio._src.formats.shards import ShardedDeserializer
from cntkio._src.integrations import shm, torch_transport
from cntkio._src.integrations.ahead import Ahead
from cntkio._src.integrations.equal_steps import (
    MAX_CARRY,
    EqualSteps,
    RankStream,
    SharedCarry,
    check_max_carry,
    check_rule,
)
from cntkio._src.integrations.shared_chunks import ChunkExchange
from cntkio._src.integrations.torch_layouts import (
    LAYOUTS,
    Converter,
    StreamArrays,
    stream_arrays,
    tensors_of,
)
from cntkio._src.integrations.workers import deal
from cntkio._src.reading.checkpoint import PendingCheckpoint
from cntkio._src.reading.chunk_cache import ParseHere


class BatchState:
    """The state after a batch, kept compact: the source's :class:`PendingCheckpoint`, the batch's number, its epoch,
    the epoch's equal-steps plan and the worker numbering's base. The dict ``batch.state`` shows is built when first
    asked for (then kept), so a batch that is never checkpointed costs no JSON; it pickles small."""

    __slots__ = ("_dict", "checkpoint", "epoch", "minibatch_index", "plan", "worker_base")

    def __init__(self, checkpoint: PendingCheckpoint, minibatch_index: int, epoch: int, plan: Any, worker_base: int):
        self.checkpoint = checkpoint
        self.minibatch_index = minibatch_index
        self.epoch = epoch
        self.plan = plan  # EpochSteps (immutable) or None
        self.worker_base = worker_base
        self._dict: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        """``{"source": checkpoint, "minibatch_index": n, "epoch": e[, "equal_steps": plan]}``."""
        if self._dict is None:
            state = {"source": self.checkpoint.state(), "minibatch_index": self.minibatch_index, "epoch": self.epoch}
            if self.plan is not None:
                state["equal_steps"] = self.plan.state()
            self._dict = state
        return self._dict

    def with_worker_base(self) -> dict[str, Any]:
        """:meth:`as_dict` and the worker assignment (``MinibatchDataset.state_dict``)."""
        return {**self.as_dict(), "worker_base": self.worker_base}

    def __getstate__(self) -> tuple[Any, ...]:
        return self.checkpoint, self.minibatch_index, self.epoch, self.plan, self.worker_base

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        self.checkpoint, self.minibatch_index, self.epoch, self.plan, self.worker_base = state
        self._dict = None


_TENSOR_FIELDS = frozenset({"tensors", "lengths", "masks", "offsets"})


class TorchMinibatch:
    """One minibatch as tensors, each stream in the layout asked for (see :data:`LAYOUTS`).

    ``tensors[name]`` is the stream; ``lengths[name]`` holds the samples of each sequence; ``masks[name]`` (padded
    layouts) is ``[batch, max_len]`` bool, True on real samples; ``offsets[name]`` (``"token_offsets"``) the first
    id of each sequence. By default (``"auto"``) dense streams are ``[batch, *shape]`` when every sequence has one
    sample (zero-copy from NumPy), otherwise padded ``[batch, max_len, *shape]``, and sparse streams are CSR tensors
    with one row per sample (int32 indices; int64 past 2**31 entries) — except an image deserializer's label stream,
    which comes as int64 class ids ``[batch]`` (``"per_sequence"``; name ``"csr"`` for its CSR rows). ``keys`` (the
    provenance of each sequence) is computed when first asked for, or when the batch leaves a loader worker process.
    ``state`` is the checkpoint right after this batch (built when first asked for). ``weight`` is 0 on the empty
    batches that pad a rank's epoch to the steps of the others (``equal_steps="pad"``; one zero sample in layouts
    that cannot be empty), else 1.
    """

    def __init__(
        self,
        tensors: dict[str, Any],
        lengths: dict[str, torch.Tensor],
        provenance: Any,
        state: dict[str, Any] | BatchState | None = None,
        end_of_sweep: bool = False,
        index: int = 0,
        masks: dict[str, torch.Tensor] | None = None,
        offsets: dict[str, torch.Tensor] | None = None,
        weight: float = 1.0,
    ):
        self.tensors = tensors
        self.lengths = lengths
        self.provenance = provenance
        self._state = state
        self.end_of_sweep = end_of_sweep
        self.index = index
        self.masks = {} if masks is None else masks
        self.offsets = {} if offsets is None else offsets
        self.weight = weight

    @classmethod
    def _of_arrays(
        cls,
        arrays: dict[str, StreamArrays],
        lengths: dict[str, np.ndarray],
        provenance: Any,
        state: BatchState,
        end_of_sweep: bool,
        index: int,
        weight: float = 1.0,
        *,
        now: bool = True,
    ) -> TorchMinibatch:
        """A batch of the arrays of its streams (``torch_layouts``), its tensors made now or (``now=False``: in a
        loader worker, where the arrays are sent and the tensors made in the main process) when first asked for."""
        batch = cls.__new__(cls)
        batch.__dict__.update(_arrays=arrays, _array_lengths=lengths, provenance=provenance, _state=state,
                              end_of_sweep=end_of_sweep, index=index, weight=weight)  # fmt: skip
        if now:
            batch._make_tensors()
        return batch

    def _make_tensors(self) -> None:
        arrays, lengths = self.__dict__.pop("_arrays"), self.__dict__.pop("_array_lengths")
        made = {name: tensors_of(stream) for name, stream in arrays.items()}
        self.tensors = {name: tensors.value for name, tensors in made.items()}
        self.lengths = {name: torch.from_numpy(array) for name, array in lengths.items()}
        self.masks = {name: tensors.mask for name, tensors in made.items() if tensors.mask is not None}
        self.offsets = {name: tensors.offsets for name, tensors in made.items() if tensors.offsets is not None}

    def __getattr__(self, name: str) -> Any:
        # (only for what the instance lacks: a batch of arrays not yet made tensors, see _of_arrays)
        if name in _TENSOR_FIELDS and "_arrays" in self.__dict__:
            self._make_tensors()
            return self.__dict__[name]
        raise AttributeError(f"'TorchMinibatch' object has no attribute {name!r}")

    @property
    def state(self) -> dict[str, Any]:
        """The checkpoint right after this batch: ``MinibatchDataset.load_state_dict(batch.state)`` on a new dataset
        continues with the next batch."""
        state = self._state
        if isinstance(state, BatchState):
            return state.as_dict()
        if state is None:
            state = self._state = {}
        return state

    @property
    def keys(self) -> list[Any]:
        return list(self.provenance.keys)

    def __repr__(self) -> str:
        sequences = len(next(iter(self.lengths.values()))) if self.lengths else 0
        return (f"TorchMinibatch(index={self.index}, streams={list(self.tensors)}, sequences={sequences}, "
                f"weight={self.weight})")  # fmt: skip

    def __getstate__(self) -> dict[str, Any]:
        state = {**self.__dict__, "provenance": _Keys.of(self.provenance)}
        state.pop("_transport", None)
        return state

    def __reduce__(self) -> tuple[Any, ...]:
        if get_worker_info() is None:
            return _minibatch_from_state, (self.__getstate__(),)
        # Leaving a loader worker, from torch's queue feeder thread, where an exception would drop the batch (and the
        # loader would wait for it forever): through a shared-memory slot, else inline; anything else raises in the
        # main process (see cntkio.torch_transport). The keys are computed here too (__getstate__).
        try:
            state = self.__getstate__()
            transport = self.__dict__.get("_transport")
            wire = transport.pack(state) if transport is not None else None
            if wire is not None:
                return _unpacked_minibatch, (wire,)
            return _inline_minibatch, (torch_transport.inline(state),)
        except Exception:
            return torch_transport.failed, (traceback.format_exc(),)

    def __getitem__(self, name: str) -> torch.Tensor:
        return self.tensors[name]

    def pin_memory(self) -> TorchMinibatch:
        self.tensors = {name: _pinned(value) for name, value in self.tensors.items()}
        return self


class _Bundle:
    """Consecutive minibatches a loader worker sends as one message, their arrays in one shared-memory slot
    (:func:`loader`, whose :class:`MinibatchLoader` hands them out one by one): the per-message cost of torch's
    queue and of the slot is paid once per bundle."""

    def __init__(self, batches: list[TorchMinibatch]):
        self.batches = batches

    def pin_memory(self) -> _Bundle:
        for batch in self.batches:
            batch.pin_memory()
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        try:  # (in the worker's queue feeder thread: see TorchMinibatch.__reduce__)
            fields = {"batches": [batch.__getstate__() for batch in self.batches]}
            transport = self.batches[0].__dict__.get("_transport")
            wire = transport.pack(fields) if transport is not None else None
            if wire is not None:
                return _unpacked_bundle, (wire,)
            return _inline_bundle, (torch_transport.inline(fields),)
        except Exception:
            return torch_transport.failed, (traceback.format_exc(),)


def _bundle_of(fields: dict[str, Any]) -> _Bundle:
    return _Bundle([_minibatch_from_state(state) for state in fields["batches"]])


def _unpacked_bundle(wire: torch_transport.Wire) -> _Bundle:
    return _bundle_of(torch_transport.unpack(wire))


def _inline_bundle(data: bytes) -> _Bundle:
    return _bundle_of(torch_transport.from_inline(data))


def _marked(batch: TorchMinibatch, transport: Any, sent: tuple[Any, ...] | None, bundle: int) -> TorchMinibatch:
    """``batch`` with what a loader worker sends it with: its transport, its pass (``sent``) and its bundle size."""
    batch._transport = transport  # type: ignore[attr-defined]
    batch._pass = sent  # type: ignore[attr-defined]
    batch._bundle = bundle  # type: ignore[attr-defined]
    return batch


def _bundled(batches: Iterator[TorchMinibatch]) -> Iterator[TorchMinibatch | _Bundle]:
    """A loader worker's minibatches grouped as it reads them: consecutive ones, up to the bundle size each carries
    (``_bundle``); a bundle leaves as soon as it is whole (or the data ends)."""
    group: list[TorchMinibatch] = []
    for batch in batches:
        if group and batch.index != group[-1].index + 1:
            yield _Bundle(group)
            group = []
        group.append(batch)
        if len(group) >= batch.__dict__.get("_bundle", 1):
            yield _Bundle(group)
            group = []
    if group:
        yield _Bundle(group)


def _minibatch_from_state(state: dict[str, Any]) -> TorchMinibatch:
    batch = TorchMinibatch.__new__(TorchMinibatch)
    batch.__dict__.update(state)
    sent = batch.__dict__.pop("_pass", None)
    if sent is not None:
        _check_pass(*sent)
    if "_arrays" in batch.__dict__:  # (from a loader worker: the tensors are made here)
        batch._make_tensors()
    return batch


_EPOCHS_SEEN: dict[tuple[str, int, int, int, int], tuple[int, int]] = {}  # a pass -> (its epoch, a worker that read it)


def _check_pass(job: str, workers: int, base_seed: int, number: int, group: int, epoch: int, pid: int) -> None:
    """Raises when a batch of a loader pass read another epoch than a batch of the same pass from another worker
    still running (the workers of a pass disagree; see _Passes). In the main process."""
    key = (job, workers, base_seed, number, group)
    seen = _EPOCHS_SEEN.get(key)
    if seen is not None and seen[0] == epoch:
        return
    if seen is not None and seen[1] != pid and shm.alive(seen[1]):
        raise RuntimeError(
            f"the workers of one DataLoader pass ({workers} workers, base seed {base_seed}) read different epochs: "
            f"{seen[0]} (worker process {seen[1]}) and {epoch} (worker process {pid}); their batches would repeat "
            "some sequences and miss others"
        )
    _EPOCHS_SEEN[key] = (epoch, pid)
    if len(_EPOCHS_SEEN) > 256:  # (the oldest passes are long over)
        del _EPOCHS_SEEN[next(iter(_EPOCHS_SEEN))]


def _unpacked_minibatch(wire: torch_transport.Wire) -> TorchMinibatch:
    return _minibatch_from_state(torch_transport.unpack(wire))


def _inline_minibatch(data: bytes) -> TorchMinibatch:
    return _minibatch_from_state(torch_transport.from_inline(data))


def _pinned(value: Any) -> Any:
    if isinstance(value, PackedSequence):
        return value._replace(data=value.data.pin_memory())
    return value.pin_memory()


@dataclass(frozen=True)
class _Keys:
    """Provenance keys as a batch carries them across processes: a table of the files this batch uses and, per
    sequence, the row of its file (uint8 up to 256 files) and its key (an integer array when every key is an
    integer)."""

    files: tuple[str, ...]
    file_rows: np.ndarray
    ids: Any

    @classmethod
    def of(cls, provenance: Any) -> _Keys:
        if isinstance(provenance, _Keys):
            return provenance
        files, rows, ids = provenance.columns()
        rows = rows.reshape(-1)
        if len(files) == 1:  # (the common case: one file)
            table, rows = tuple(files), np.zeros(len(rows), dtype=np.uint8)
        else:  # the files this batch uses, numbered in a small table
            used, inverse = np.unique(rows, return_inverse=True)
            table = tuple(files[i] for i in used.tolist())
            rows = inverse.reshape(-1).astype(np.uint8 if len(used) <= 256 else np.uint32)
        if not isinstance(ids, np.ndarray) and ids and all(type(key) is int for key in ids):
            low, high = min(ids), max(ids)
            if low >= -(2**63) and high < 2**63:
                ids = np.array(ids, dtype=np.int64)
            elif low >= 0 and high < 2**64:
                ids = np.array(ids, dtype=np.uint64)
        return cls(table, rows, ids)

    @property
    def keys(self) -> list[tuple[str, Any]]:
        ids = self.ids.tolist() if isinstance(self.ids, np.ndarray) else self.ids
        return [(self.files[row], key) for row, key in zip(self.file_rows.tolist(), ids, strict=True)]


def _collate_minibatches(batch: list[TorchMinibatch], *, collate_fn_map: Any = None) -> TorchMinibatch:
    """What a ``DataLoader`` left with a ``batch_size`` does with cntkio minibatches: one is passed through."""
    del collate_fn_map
    if len(batch) == 1:
        return batch[0]
    raise TypeError(
        f"a DataLoader with batch_size={len(batch)} would batch cntkio minibatches, which are already batched "
        "(minibatch_size samples each): build it with DataLoader(dataset, batch_size=None, ...) or "
        "cntkio.torch.loader(make_source, minibatch_size, ...)"
    )


def _register_collate() -> None:
    try:  # torch's documented way to extend default_collate (torch >= 1.13)
        from torch.utils.data._utils.collate import default_collate_fn_map
    except ImportError:  # pragma: no cover - older torch: DataLoader(..., batch_size=None) is needed
        return
    default_collate_fn_map[TorchMinibatch] = _collate_minibatches


_register_collate()


STATE_KEY = "cntkio"  # MinibatchDataset.state_dict(): {STATE_KEY: the state as JSON text}

def _fresh_thread_state() -> Any:
    """What batches made on the training thread are made in (see Ahead): torch's state of a fresh thread, so that
    a batch is the same whichever thread made it (inference mode off; devices are explicit where they matter)."""
    return torch.inference_mode(False)


def _reusable(source: MinibatchSource) -> bool:
    """Whether the next pass in this process may read ``source`` on: a finite, open source that counted no errors
    (a new pass starts with a clean error budget, as with a new source)."""
    if source.closed or source.is_infinite():
        return False
    return not any(ledger.count for ledger, _ in ledgers_of(source.deserializers))


def class_id_streams(source: MinibatchSource) -> set[str]:
    """The streams of ``source`` that :class:`MinibatchDataset` gives as class ids under ``"auto"``: the label streams
    of image deserializers (one-hot by construction, one sample per sequence)."""
    names: set[str] = set()
    for deserializer in source.deserializers:
        parts = deserializer.shards if isinstance(deserializer, ShardedDeserializer) else [deserializer]
        if parts and all(isinstance(part, ImageDeserializerBase) for part in parts):
            names.update(info.name for info in deserializer.stream_infos() if info.is_sparse)
    return names


def distributed_partition() -> tuple[int, int]:
    """(world size, rank) of ``torch.distributed``, or (1, 0) when it is not initialised."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(), dist.get_rank()
    return 1, 0


def gather_state(state: dict[str, Any]) -> dict[str, Any]:
    """Merges every rank's last state (collective call) into one any world size can resume from."""
    world, _ = distributed_partition()
    states: list[Any] = [None] * world
    if world > 1:
        dist.all_gather_object(states, state)
    else:
        states = [state]
    return merge_states(states)


def merge_states(states: list[dict[str, Any]]) -> dict[str, Any]:
    """Merges the last states of all ranks (see :meth:`MinibatchSource.merge_checkpoints`): each a ``batch.state`` or a
    :meth:`MinibatchDataset.state_dict` (that of a rank that has not stepped since its restore is the state it
    restored)."""
    states = [json.loads(s[STATE_KEY]) if set(s) == {STATE_KEY} else s for s in states]
    if not all(s for s in states):
        raise ConfigError("merge_states: a rank's dataset has neither read a batch nor loaded a state")
    return {
        "source": MinibatchSource.merge_checkpoints([s["source"] for s in states]),
        "minibatch_index": 0,
        "epoch": max(int(s.get("epoch", 0)) for s in states),
    }


MAX_BUNDLE = 8  # minibatches a loader worker sends at most in one message (loader())
BUNDLE_BYTES = 4 << 20  # ... and at most about this many bytes of them
SPARSE_GUESS = 32  # entries per sample of a sparse stream, guessed to size bundles

PASS_TABLE_BYTES = 1 << 16  # the open passes of one dataset, as JSON in shared memory
KEPT_PASSES = 64  # open passes kept in it: the oldest are long abandoned


@dataclass(frozen=True)
class _WorkerPass:
    """What tells the loader workers of one ``DataLoader`` pass from those of any other: their number, the pass's base
    seed (``worker_info.seed - worker_info.id``, drawn once per loader iterator), how many passes this worker process
    began before (persistent workers begin one per pass, new ones their first) and the worker processes' group: the
    number ``multiprocessing`` gave the pass's first worker process when the loader iterator made them (each
    worker's own number less its worker id; -1 where a worker has none) — so that passes with the same seed, as
    after ``torch.manual_seed`` before each, are told apart too."""

    workers: int
    worker: int
    base_seed: int
    number: int
    group: int = -1

    @property
    def key(self) -> list[int]:
        return [self.workers, self.base_seed, self.number, self.group]


class _Passes:
    """The epoch each pass over the dataset reads, decided once per pass: ``next`` (set by ``set_epoch`` or a loaded
    state), then the one after it for the next pass.

    A pass in the process that iterates (no loader workers) takes the next epoch. Of the workers of a ``DataLoader``
    pass, each of which begins an iteration once, the first to begin takes the next epoch and opens a record of the
    pass; the others read the epoch there (:class:`_WorkerPass` tells passes apart) — also a worker that begins late,
    after the others of its pass are gone (a pass abandoned early). A record is dropped once every worker of its pass
    has read it, or when :data:`KEPT_PASSES` later ones are open. Workers that cannot tell two open passes apart
    raise rather than guess. Kept in shared memory (inherited by worker processes, persistent ones
    included); a plain table where shared memory is not available or once pickled outside a spawn."""

    def __init__(self) -> None:
        self._local: dict[str, Any] = {"next": 0, "open": []}
        self._shared: Any = None
        try:
            # (a lock made for spawned processes serves forked ones too; one made for forking cannot be spawned)
            self._shared = multiprocessing.get_context("spawn").Array("c", PASS_TABLE_BYTES, lock=True)
            self._shared.value = json.dumps(self._local).encode()
        except OSError:  # no shared memory here: one process only
            self._shared = None

    def set(self, epoch: int) -> None:
        def change(table: dict[str, Any]) -> int:
            table["next"] = int(epoch)
            return int(epoch)

        self._update(change)

    def begin(self, worker: _WorkerPass | None) -> int:
        """The epoch of an iteration starting now, in a loader worker of ``worker`` or (None) in the process that
        iterates."""
        return self._update(functools.partial(_begin_pass, worker=worker))

    def _update(self, change: Callable[[dict[str, Any]], int]) -> int:
        if self._shared is None:
            return change(self._local)
        with self._shared.get_lock():
            table = json.loads(self._shared.value)
            result = change(table)
            text = json.dumps(table).encode()
            if len(text) >= PASS_TABLE_BYTES:
                raise RuntimeError(f"{len(table['open'])} DataLoader passes over one dataset are open at once: more "
                                   f"than its table of passes holds ({PASS_TABLE_BYTES} bytes)")  # fmt: skip
            self._shared.value = text
            return result

    def __getstate__(self) -> dict[str, Any]:
        from multiprocessing.context import get_spawning_popen

        if self._shared is not None and get_spawning_popen() is None:  # an ordinary pickle: the table only
            with self._shared.get_lock():
                return {"_shared": None, "_local": json.loads(self._shared.value)}
        return self.__dict__


def _begin_pass(table: dict[str, Any], worker: _WorkerPass | None) -> int:
    """Takes the epoch of an iteration beginning now in ``table`` (see :class:`_Passes`)."""
    if worker is None:
        epoch = int(table["next"])
        table["next"] = epoch + 1
        return epoch
    same = [p for p in table["open"] if p["key"] == worker.key and str(worker.worker) not in p["joined"]]
    if len(same) > 1:  # (passes without a group: one whose workers are all gone was abandoned, not this one's)
        same = [p for p in same if any(shm.alive(pid) for pid in p["joined"].values())]
    if len(same) > 1:
        raise RuntimeError(
            f"DataLoader worker {worker.worker}: {len(same)} passes over this dataset with {worker.workers} workers "
            f"and base seed {worker.base_seed} run at once, and their workers cannot tell which pass is theirs (and "
            "so which epoch to read): give each loader iterator its own seed (torch.manual_seed or the DataLoader's "
            "generator) rather than the same one twice"
        )
    if same:
        record = same[0]
    else:
        record = {"key": worker.key, "epoch": int(table["next"]), "joined": {}}
        table["next"] = record["epoch"] + 1
        table["open"].append(record)
        del table["open"][:-KEPT_PASSES]
    record["joined"][str(worker.worker)] = os.getpid()
    if len(record["joined"]) == worker.workers:
        table["open"].remove(record)
    return int(record["epoch"])


def _remove_job_files(owner_pid: int, token: str) -> None:
    if os.getpid() == owner_pid:  # not in a forked worker's copy
        shm.remove_job(owner_pid, token)


class MinibatchDataset(IterableDataset):  # type: ignore[misc]  # (torch is Any to the type checker)
    """Minibatches of a :class:`MinibatchSource` for a PyTorch ``DataLoader`` (``batch_size=None``).

    Example::

        with MinibatchDataset(functools.partial(make_source, "train.ctf"), 1024) as dataset:
            for batch in DataLoader(dataset, batch_size=None, num_workers=2):
                x = batch["features"]

    Args:
        make_source: builds the source (called once per iteration, in each worker process; a
            top-level function or ``functools.partial`` so that it pickles).
        minibatch_size: samples per minibatch for the whole job (split across ranks like
            ``next_minibatch(n, num_data_partitions=world, partition_index=rank)``).
        num_partitions, partition_index: override the rank split (default: torch.distributed).
        layout: one of :data:`LAYOUTS` for every stream, or ``{stream name: layout}`` (streams not named:
            ``"auto"``), e.g. ``{"words": "token_ids", "intent": "per_sequence"}`` for ATIS-like data. Under
            ``"auto"`` the label stream of an image deserializer (:func:`class_id_streams`) is int64 class ids
            ``[batch]``, what ``nn.CrossEntropyLoss`` takes; ``{"labels": "csr"}`` gives its one-hot CSR rows.
        pad_id: the id padding ``"token_ids"`` streams (their ``masks`` tell padding apart).
        equal_steps: ``"carry"`` or ``"pad"``: every rank yields the same number of minibatches per epoch by that
            rule (:mod:`cntkio.equal_steps`); None: each rank reads its partition to its end; ``"auto"``: ``"carry"``
            when the ranks come from ``torch.distributed`` with more than one and the source has epochs.
        max_carry: under ``"carry"``, the most minibatches a rank may leave for the next epoch (a rank short of the
            steps then takes padding steps of ``weight`` 0; see the README for a loss that padding keeps finite).
        ahead: iterated in the process that trains (no loader workers), up to this many minibatches are read and
            made tensors ahead on a background thread while the step runs (:mod:`cntkio._src.integrations.ahead`:
            the parse and the gather run in C++ without the GIL, as the step's kernels do); 0 reads each when it
            is asked for. Order, ``state`` and resume are the same either way. Ignored in loader workers, which
            run ahead already (``prefetch_factor``).
        bundle: loader workers send several consecutive minibatches per message (a few MB at most), which
            :class:`MinibatchLoader` (what :func:`loader` builds) hands out one by one — a plain ``DataLoader``
            would yield the bundles: leave it False there.
    """

    def __init__(
        self,
        make_source: Callable[[], MinibatchSource],
        minibatch_size: int,
        *,
        num_partitions: int | None = None,
        partition_index: int | None = None,
        layout: str | Mapping[str, str] = "auto",
        pad_id: int = 0,
        equal_steps: str | None = "auto",
        max_carry: int = MAX_CARRY,
        ahead: int = 2,
        bundle: bool = False,
    ):
        super().__init__()
        self.bundle = bool(bundle)
        if int(ahead) < 0:
            raise ValueError(f"ahead must be >= 0, got {ahead}")
        self.ahead = int(ahead)
        if equal_steps not in (None, "auto"):
            check_rule(equal_steps)
        self.max_carry = check_max_carry(max_carry)
        layouts = [layout] if isinstance(layout, str) else list(layout.values())
        for name in layouts:
            if name not in LAYOUTS:
                raise ValueError(f"unknown layout {name!r}; one of {', '.join(LAYOUTS)}")
        self.make_source = make_source
        self.minibatch_size = minibatch_size
        self.num_partitions = num_partitions
        self.partition_index = partition_index
        self.layout = layout if isinstance(layout, str) else dict(layout)
        self.pad_id = int(pad_id)
        self.equal_steps = equal_steps
        self._carry = SharedCarry()  # what the latest epoch planned carries into the next, for every process
        self._planner: EqualSteps | None = None
        self._resume: dict[str, Any] | None = None
        self._last_state: BatchState | None = None  # of the last batch delivered by this process's iterations
        self._restored: dict[str, Any] | None = None  # the state the current iteration resumed from
        self._live: set[MinibatchSource] = set()
        self._spare: list[tuple[int, MinibatchSource]] = []  # (pid, source) of the last pass, for the next one
        self._template: tuple[int, MinibatchSource] | None = None  # (pid, source) built for forked workers
        self._workers_persist = False  # loader workers live on between passes (MinibatchLoader tells)
        self._epochs = _Passes()
        self._begun_here = (os.getpid(), 0)  # (process, iterations it began): a worker's pass number
        # The shared-memory files loader workers make for this dataset are named after it (shm.job_name) and removed
        # with it, or by the next job if this process is killed.
        self._job = (os.getpid(), uuid.uuid4().hex[:12])
        shm.remove_stale()
        weakref.finalize(self, _remove_job_files, *self._job)

    def _layout_of(self, stream: str) -> str:
        """The layout asked for ``stream`` (``"auto"`` when none is)."""
        return self.layout if isinstance(self.layout, str) else self.layout.get(stream, "auto")

    def _layouts(self, source: MinibatchSource) -> dict[str, str]:
        """Every stream's layout for ``source``: the one asked for, ``"auto"`` an image label stream's class ids."""
        labels = class_id_streams(source)
        chosen = {info.name: self._layout_of(info.name) for info in source.stream_infos()}
        return {name: "per_sequence" if layout == "auto" and name in labels else layout
                for name, layout in chosen.items()}  # fmt: skip

    def set_epoch(self, epoch: int) -> None:
        """The next iteration reads epoch ``epoch`` of a finite source (see ``MinibatchSource.start_epoch``):
        later epochs read later sweeps, each in its own order; the iterations after it read the epochs after it.
        Without it each iteration reads the next epoch by itself; calling it before each epoch, like
        ``DistributedSampler.set_epoch``, works too — also with ``persistent_workers=True``."""
        if int(epoch) < 0:
            raise ValueError(f"epoch must be >= 0, got {epoch}")
        self._epochs.set(int(epoch))

    def _partition(self) -> tuple[int, int]:
        if self.num_partitions is not None:
            return self.num_partitions, self.partition_index or 0
        return distributed_partition()

    def __iter__(self) -> Iterator[TorchMinibatch]:
        # The pass and its epoch are taken when the iteration begins (a loader worker begins one when its pass
        # starts), not when its first batch is asked for.
        worker = get_worker_info()
        worker_pass = self._worker_pass(worker) if worker is not None else None
        epoch = self._epochs.begin(worker_pass)
        resume, self._resume = self._resume, None  # a loaded state applies to the next iteration only
        if resume is not None:
            self._last_state = None
            self._restored = resume  # (what state_dict() reports until the first batch)
        sent = None if worker_pass is None else (self._job[1], *worker_pass.key, epoch, os.getpid())
        batches: Iterator[Any] = self._minibatches(epoch, resume, worker, sent)
        if worker is None and self.ahead:
            batches = Ahead(batches, self.ahead, name="cntkio-torch-ahead", inline=_fresh_thread_state)
        elif worker is not None and self.bundle:
            batches = _bundled(batches)
        return self._delivered(batches)

    def _delivered(self, batches: Iterator[Any]) -> Iterator[Any]:
        """The batches (or bundles) as the caller takes them, the last one's state kept as this dataset's last
        (``state_dict``)."""
        try:
            while True:
                try:
                    batch = next(batches)
                except StopIteration:
                    return
                last = batch.batches[-1] if isinstance(batch, _Bundle) else batch
                state = last._state
                self._last_state = state if isinstance(state, BatchState) else None
                del last
                yield batch
                del batch  # only the caller holds the batch: once it lets go, a later read may reuse its memory
        finally:
            if isinstance(batches, Ahead):
                batches.close()

    def _worker_pass(self, worker: Any) -> _WorkerPass:
        pid, begun = self._begun_here
        number = begun if pid == os.getpid() else 0
        self._begun_here = (os.getpid(), number + 1)
        identity = multiprocessing.current_process()._identity
        group = identity[-1] - worker.id if identity else -1
        return _WorkerPass(worker.num_workers, worker.id, worker.seed - worker.id, number, group)

    def _minibatches(
        self, epoch: int, resume: dict[str, Any] | None, worker: Any, sent: tuple[Any, ...] | None
    ) -> Iterator[TorchMinibatch]:
        """The minibatches of a pass; in a loader worker, ``sent`` marks them with the pass and the epoch read (the
        main process checks that the workers of a pass agree: _check_pass)."""
        workers, worker_id = (worker.num_workers, worker.id) if worker is not None else (1, 0)
        partitions, rank = self._partition()
        transport = torch_transport.worker_pool(shm.job_name(*self._job)) if worker is not None else None
        source = self._spare_source()
        reused = source is not None
        if source is None and worker is not None:
            source = self._inherited_source()
        if source is None:
            source = self.make_source()
        self._live.add(source)
        exchange = self._exchange(source, epoch, worker_id, workers)
        chosen = self._layouts(source)
        convert = Converter(chosen, self.pad_id)
        bundle = self._bundle_size(source, partitions) if worker is not None else 1
        index = base = 0
        try:
            planner = self._equal_steps_planner(source, partitions)
            stream = None if planner is None else self._rank_stream(planner, source, epoch, rank, resume)
            if resume is None and (epoch or reused) and not source.is_infinite() and stream is None:
                source.start_epoch(epoch)
            if resume is not None:
                if stream is None:
                    source.restore_from_checkpoint(resume["source"])
                index = int(resume["minibatch_index"])
                base = int(resume.get("worker_base", index))
            # The next pass reads on with this source (see _spare_source) where this process lives on: near the end
            # of this epoch, the next one's first chunks are prefetched — but not by workers sharing chunks, whose
            # exchange is the epoch's (another worker would parse them again in the next).
            source.engine.epochs_follow = worker is None or (self._workers_persist and exchange is None)
            while stream is None or not stream.done:  # (equal steps: the plan's steps; else to the data's end)
                if exchange is not None:
                    exchange.at(index)
                owner, size = deal(index, workers, base, bundle)
                mine = owner == worker_id
                if stream is not None and stream.padding:
                    stream.pad()
                    index += 1
                    if mine:
                        padding = self._padding(source, stream, epoch, index, base, chosen, worker is None)
                        yield _marked(padding, transport, sent, size)
                    continue
                if not mine:
                    if stream is not None:
                        stream.read(gather=False)
                    elif not source.skip_minibatch(self.minibatch_size, partitions, rank):
                        return
                    index += 1
                    continue
                if stream is not None:
                    minibatch: Minibatch | dict[Any, MinibatchData] | None = stream.read()
                else:
                    minibatch = source.next_minibatch(self.minibatch_size, num_data_partitions=partitions,
                                                      partition_index=rank)  # fmt: skip
                if not isinstance(minibatch, Minibatch):
                    return
                index += 1
                batch = TorchMinibatch._of_arrays(
                    convert(minibatch),
                    {info.name: data.sequence_lengths for info, data in minibatch.items()},
                    minibatch.provenance,
                    self._state(source, stream, epoch, index, base),
                    any(data.end_of_sweep for data in minibatch.values()),
                    index - 1,
                    now=worker is None,
                )
                _marked(batch, transport, sent, size)
                del minibatch  # only the caller holds the batch: once it lets go, the next read reuses its memory
                yield batch
                del batch
        finally:
            self._live.discard(source)
            if exchange is not None:
                source.engine.use_loader(ParseHere())
                exchange.close()
            if _reusable(source):
                self._spare.append((os.getpid(), source))  # (the next pass in this process goes on with it)
            else:
                source.close()

    def prepare_workers(self) -> None:
        """Builds the source once here, before loader workers are forked (:class:`MinibatchLoader` calls it): each
        worker starts from its inherited copy — the index built once and shared copy-on-write, no parse thread
        started yet — instead of building and indexing its own."""
        if self._template is None or self._template[1].closed:
            self._template = (os.getpid(), self.make_source())

    def _inherited_source(self) -> MinibatchSource | None:
        """In a forked loader worker, the copy of the source :meth:`prepare_workers` built (once per worker)."""
        template, self._template = self._template, None
        if template is None or template[0] == os.getpid() or template[1].closed:
            return None
        return template[1]

    def _spare_source(self) -> MinibatchSource | None:
        """The source the last pass in this process read, if it can read the next one (then it is not built again:
        no second indexing, and the chunks it still holds serve the next epoch without a parse). Not one a forked
        worker inherited from the main process: its parse threads are not in this process."""
        while self._spare:
            pid, source = self._spare.pop()
            if pid == os.getpid():
                return source
        return None

    def _bundle_size(self, source: MinibatchSource, partitions: int) -> int:
        """Minibatches a loader worker sends in one message when bundling (:func:`loader`): as many as fit
        :data:`BUNDLE_BYTES` by the streams' declared sample sizes (sparse ones guessed), at most :data:`MAX_BUNDLE`;
        1 when not bundling. The same in every worker of a pass (decided from the source's streams alone)."""
        if not self.bundle:
            return 1
        per_sample = 0
        for info in source.stream_infos():
            width = int(np.prod(info.shape, dtype=np.int64))
            itemsize = np.dtype(info.dtype).itemsize
            per_sample += (min(width, SPARSE_GUESS) * (itemsize + 4)) if info.is_sparse else width * itemsize
        samples = max(1, self.minibatch_size // partitions)
        return int(max(1, min(MAX_BUNDLE, BUNDLE_BYTES // max(1, per_sample * samples))))

    def _equal_steps_planner(self, source: MinibatchSource, partitions: int) -> EqualSteps | None:
        """The planner of this dataset's equal steps (kept across the iterations of this process), or None."""
        rule = self.equal_steps
        if rule == "auto":
            rule = "carry" if self.num_partitions is None and partitions > 1 and not source.is_infinite() else None
        if rule is None:
            return None
        if source.is_infinite():
            raise ValueError(f"equal_steps={rule!r} needs epochs: set max_samples or max_sweeps on the source")
        planner = self._planner
        if planner is None or (planner.rule, planner.minibatch_size, planner.partitions, planner.max_carry) != (
            rule, self.minibatch_size, partitions, self.max_carry if rule == "carry" else 0
        ):
            planner = self._planner = EqualSteps(rule, self.minibatch_size, partitions, self._carry, self.max_carry)
        return planner

    def _rank_stream(
        self, planner: EqualSteps, source: MinibatchSource, epoch: int, rank: int, resume: dict[str, Any] | None
    ) -> RankStream:
        """This rank's stream of ``epoch`` under the equal-steps plan, positioned at its first minibatch, or where
        ``resume`` was taken (:meth:`EqualSteps.stream`: a state of this partitioning carries its epoch's plan; a
        merged state starts a plan of its own)."""
        if resume is None:
            return planner.stream(source, epoch, rank)
        step = int(resume.get("minibatch_index", 0))
        return planner.stream(source, epoch, rank, resume["source"], resume.get("equal_steps"), step)

    def _state(
        self, source: MinibatchSource, stream: RankStream | None, epoch: int, index: int, base: int
    ) -> BatchState:
        """The state after minibatch ``index - 1`` (compact: its dict is built when asked for)."""
        return BatchState(source.pending_checkpoint(), index, epoch, None if stream is None else stream.plan, base)

    def _padding(
        self,
        source: MinibatchSource,
        stream: RankStream,
        epoch: int,
        index: int,
        base: int,
        chosen: dict[str, str],
        now: bool,
    ) -> TorchMinibatch:
        """An empty batch of weight 0: this rank's step while the others still read data (rule "pad"). Layouts that
        cannot be empty (``packed``, ``nested``) get one sequence of one zero sample (still no keys, weight 0)."""
        arrays, lengths = {}, {}
        for info in source.stream_infos():
            layout = chosen[info.name]
            count = 1 if layout in ("packed", "nested") else 0
            sparse = info.is_sparse
            empty = MinibatchData(
                info,
                np.zeros(0 if sparse else (count, *info.shape), dtype=info.dtype),
                np.full(count, 1, dtype=np.int64),
                False,
                indices=np.zeros(0, dtype=np.int32) if sparse else None,
                indptr=np.zeros(1 + count, dtype=np.int64) if sparse else None,
            )
            arrays[info.name] = stream_arrays(empty, layout, self.pad_id)
            lengths[info.name] = empty.sequence_lengths
        keys = _Keys((), np.zeros(0, dtype=np.uint8), np.zeros(0, dtype=np.int64))
        state = self._state(source, stream, epoch, index, base)
        return TorchMinibatch._of_arrays(arrays, lengths, keys, state, False, index - 1, 0.0, now=now)

    def _exchange(self, source: MinibatchSource, epoch: int, worker: int, workers: int) -> ChunkExchange | None:
        """Loader workers share the chunks they parse (each chunk parsed once per epoch by one of them)."""
        if workers < 2 or not shm.available():
            return None
        streams = [(info.name, info.storage_format, str(info.dtype), info.shape) for info in source.stream_infos()]
        identity = hashlib.sha256(json.dumps([source.fingerprint(), streams], default=str).encode()).hexdigest()
        try:
            exchange = ChunkExchange(shm.job_name(*self._job), epoch, worker, workers, identity[:16])
        except shm.NotPrivate as error:  # another user's doing: nothing found there is used
            warnings.warn(f"loader workers parse their chunks each: {error}", RuntimeWarning, stacklevel=2)
            return None
        except (OSError, ValueError):
            return None
        source.engine.use_loader(exchange)
        return exchange

    def close(self) -> None:
        """Closes the sources of iterations still open in this process, and the one kept for the next pass (their
        parse threads stop)."""
        template, self._template = self._template, None
        spare = [source for pid, source in self._spare if pid == os.getpid()]
        for source in [*self._live, *spare, *([template[1]] if template is not None else [])]:
            source.close()
        self._live.clear()
        self._spare.clear()

    def __enter__(self) -> MinibatchDataset:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __getstate__(self) -> dict[str, Any]:
        # (open sources stay in the process that opened them; forked workers inherit the template without a pickle)
        return {**self.__dict__, "_live": set(), "_spare": [], "_template": None}

    def state_dict(self) -> dict[str, Any]:
        """State after the last minibatch this dataset (or this loader worker) produced, as
        ``{"cntkio": <JSON text>}`` — one value, so ``torch.distributed.checkpoint`` (whose ``Stateful``
        protocol this follows) finds the same structure in a fresh dataset to load into.

        Unlike ``batch.state``, it keeps the worker assignment, as a ``StatefulDataLoader`` restoring
        each worker with its own state expects.
        """
        if self._last_state is not None:
            state = self._last_state.with_worker_base()
        else:
            state = self._resume or self._restored or {}
        return {STATE_KEY: json.dumps(state)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """The next iteration continues right after the minibatch the state was taken at.

        With ``batch.state`` (or a merged state) the next minibatch comes from worker 0, as a new
        ``DataLoader`` expects; with :meth:`state_dict` the worker assignment is kept. Loader worker
        processes work on copies of the dataset, so with ``num_workers > 0`` build a new dataset (or
        call ``load_state_dict({})``) for the iterations after the resumed one.
        """
        if set(state) == {STATE_KEY}:  # from state_dict()
            state = json.loads(state[STATE_KEY]) if state[STATE_KEY] else {}
        self._resume = dict(state) if state else None
        self._last_state = self._restored = None
        if state:
            self._epochs.set(int(state.get("epoch", 0)))  # the resumed epoch; the iterations after it follow on


def loader(
    make_source: Callable[[], MinibatchSource],
    minibatch_size: int,
    *,
    num_workers: int = 0,
    persistent_workers: bool = False,
    pin_memory: bool = False,
    prefetch_factor: int | None = None,
    multiprocessing_context: Any = None,
    **dataset_options: Any,
) -> DataLoader:
    """A ``DataLoader`` over ``MinibatchDataset(make_source, minibatch_size, **dataset_options)``, set up for
    cntkio's minibatches (``batch_size=None``); ``loader.dataset`` is the dataset (``set_epoch``,
    ``load_state_dict``).

    Example::

        train = cntkio.torch.loader(functools.partial(make_source, "train.ctf"), 1024, num_workers=2)
        for epoch in range(10):          # each pass reads the next, reshuffled epoch
            for batch in train:
                loss = model(batch["features"]).sum()
    """
    dataset_options.setdefault("bundle", num_workers > 0)
    dataset = MinibatchDataset(make_source, minibatch_size, **dataset_options)
    options: dict[str, Any] = {}
    if num_workers > 0:
        options["persistent_workers"] = persistent_workers
        if prefetch_factor is not None:
            options["prefetch_factor"] = prefetch_factor
        if multiprocessing_context is not None:
            options["multiprocessing_context"] = multiprocessing_context
    return MinibatchLoader(dataset, batch_size=None, num_workers=num_workers, pin_memory=pin_memory, **options)


class MinibatchLoader(DataLoader):  # type: ignore[misc]  # (torch is Any to the type checker)
    """The ``DataLoader`` :func:`loader` builds: the minibatches of its workers' bundles one by one (each message
    from a worker holds several; see ``MinibatchDataset(bundle=True)``), in the order of the rank's minibatches;
    forked workers start from a source built once before they fork (``MinibatchDataset.prepare_workers``)."""

    def _forks_workers(self) -> bool:
        context = self.multiprocessing_context
        method = context.get_start_method() if context is not None else multiprocessing.get_start_method()
        return bool(method == "fork")

    def __iter__(self) -> Iterator[TorchMinibatch]:
        if isinstance(self.dataset, MinibatchDataset):
            self.dataset._workers_persist = bool(self.persistent_workers)  # (the workers get it when they start)
            if self.num_workers > 0 and self._forks_workers():
                self.dataset.prepare_workers()
        for item in super().__iter__():
            if isinstance(item, _Bundle):
                batches, item.batches = item.batches, []
                while batches:
                    yield batches.pop(0)  # (a minibatch handed out is held by the caller alone)
            else:
                yield item
