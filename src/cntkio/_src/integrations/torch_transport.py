"""Minibatches from ``DataLoader`` worker processes to the main process through reusable shared-memory slots.

torch's own transfer gives every tensor of every batch a new shared-memory file: created and filled by the worker,
passed as a file descriptor over a socket, mapped by the main process, every page faulted in by both — about as
long as reading the minibatch. Here each worker keeps a few slot files (:class:`SlotPool`); a batch's tensors are
copied into a free slot and only their places cross the queue (:class:`Wire`); the main process maps each slot
file once, removes its name, and builds the tensors over it without a copy. A slot is reused once every tensor of
its batch, views included, is gone in the main process.

A batch that finds every slot in use (a training loop keeping batches) gets a slot of its own, freed with its
tensors. One that gets no slot (``/dev/shm`` full) travels inline, in the pickle through the queue's pipe
(:func:`inline`): never torch's way, whose shared-memory files torch's queue feeder thread makes where an error
reaches no one, and the batch would be lost (the loader then waits forever). Whatever else goes wrong while a worker
sends a batch is raised in the main process (:func:`failed`).

The slots of a worker live in the job's private directory (:func:`cntkio._src.integrations.shm.job_directory`) under a
name no other
pool has — the worker's PID and a random nonce, so that a later worker with a reused PID makes its own — and each
slot starts with a header (the pool's nonce, the slot, its generation and the serial number of the batch in it) that
the main process checks against the :class:`Wire` before it trusts the slot.
"""

from __future__ import annotations

import contextlib
import ctypes
import io
import math
import mmap
import os
import pickle
import secrets
import threading
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch
from torch.nn.utils.rnn import PackedSequence

from cntkio._src.integrations import shm

MAX_SLOTS = 16  # per worker
ALIGN = 64
MIN_SLOT_BYTES = 1 << 20
HEADER = np.dtype([("owner", "<u8"), ("slot", "<u8"), ("generation", "<u8"), ("serial", "<u8")])  # (a slot's first)


class _Ref(NamedTuple):
    """A tensor in a slot, stored contiguous (tuples: made and pickled cheaply, several per batch)."""

    offset: int
    dtype: str
    shape: tuple[int, ...]


class _CSRRef(NamedTuple):
    crow: _Ref
    col: _Ref
    values: _Ref
    size: tuple[int, ...]


class _PackedRef(NamedTuple):
    parts: tuple[Any, ...]  # PackedSequence's fields: refs, or None


@dataclass(frozen=True)
class Wire:
    """What crosses the worker's queue for one batch: the slot holding its tensors (``pool``'s slot ``slot`` of
    generation ``generation``, holding batch ``serial`` of the pool whose nonce is ``owner``), the fields holding
    tensors (with refs to the slot in their place) and the other fields."""

    pool: str
    worker: int
    owner: int
    slot: int
    generation: int
    serial: int
    fields: dict[str, Any]
    refs: dict[str, Any]


class SlotPool:
    """A worker's slot files: ``<name>-flags`` (the pool's nonce, then one byte per slot: 1 while the main process
    may read it) and ``<name>-s<slot>-g<generation>`` (a slot grown for a larger batch gets a new generation), each
    starting with a :data:`HEADER`."""

    def __init__(self, name: str):
        self.name = name
        self.owner = secrets.randbits(64)
        self.flags = shm.create(f"{name}-flags", 8 + MAX_SLOTS)
        self.flags[:8] = self.owner.to_bytes(8, "little")
        self.maps: list[mmap.mmap | None] = [None] * MAX_SLOTS
        self.generations = [-1] * MAX_SLOTS
        self.serial = 0
        self.lock = threading.Lock()

    def pack(self, fields: dict[str, Any], tensor_fields: tuple[str, ...]) -> Wire | None:
        """The fields with the tensors of ``tensor_fields`` (tensors, or dicts of them) copied into a free slot —
        all in use, into a slot of their own (:data:`MAX_SLOTS`, its generation the batch's serial number) that the
        main process frees with them — or None (``/dev/shm`` full, or nothing to copy)."""
        tensors: list[tuple[int, np.ndarray]] = []  # (offset in the slot, array)
        end = [ALIGN]  # (the header first)
        refs = {name: _to_refs(fields[name], tensors, end) for name in tensor_fields}
        if not tensors:
            return None
        with self.lock:
            self.serial += 1
            taken = self._acquire(end[0])
            if taken is None:
                return None
            slot, generation, mapping = taken
            try:
                _fill(mapping, (self.owner, slot, generation, self.serial), tensors)
            except BaseException:  # the slot goes back (a one-off slot's file goes), then the caller reports it
                if slot == MAX_SLOTS:
                    mapping.close()
                    shm.unlink(f"{self.name}-s{MAX_SLOTS}-g{generation}")
                else:
                    self.flags[8 + slot] = 0
                raise
            if slot == MAX_SLOTS:
                mapping.close()  # (the main process maps it)
        others = {name: value for name, value in fields.items() if name not in refs}
        return Wire(self.name, os.getpid(), self.owner, slot, generation, self.serial, others, refs)

    def _acquire(self, size: int) -> tuple[int, int, mmap.mmap] | None:
        """A free slot of at least ``size`` bytes (the smallest; else a free one made larger; else one for this
        batch alone): (slot, generation, mapping), or None."""
        free = [i for i in range(MAX_SLOTS) if self.flags[8 + i] == 0]
        if not free:
            try:
                return MAX_SLOTS, self.serial, shm.create(f"{self.name}-s{MAX_SLOTS}-g{self.serial}", size)
            except OSError:  # /dev/shm full: inline
                return None
        fitting = [i for i in free if self._capacity(i) >= size]
        slot = min(fitting or free, key=self._capacity)
        if not fitting:
            if self.maps[slot] is not None:
                shm.unlink(f"{self.name}-s{slot}-g{self.generations[slot]}")
            self.generations[slot] += 1
            capacity = max(MIN_SLOT_BYTES, -(-size * 5 // 4 // mmap.PAGESIZE) * mmap.PAGESIZE)
            try:
                self.maps[slot] = shm.create(f"{self.name}-s{slot}-g{self.generations[slot]}", capacity)
            except OSError:  # /dev/shm full: inline
                self.maps[slot] = None
                return None
        mapping = self.maps[slot]
        assert mapping is not None
        self.flags[8 + slot] = 1
        return slot, self.generations[slot], mapping

    def _capacity(self, slot: int) -> int:
        mapping = self.maps[slot]
        return len(mapping) if mapping is not None else 0


def _fill(mapping: mmap.mmap, header: tuple[int, int, int, int], tensors: list[tuple[int, np.ndarray]]) -> None:
    np.ndarray(1, HEADER, buffer=mapping)[0] = header
    for offset, array in tensors:
        if array.nbytes:
            np.copyto(np.ndarray(array.shape, array.dtype, buffer=mapping, offset=offset), array)


def _align(offset: int) -> int:
    return -(-offset // ALIGN) * ALIGN


def _to_refs(value: Any, tensors: list[tuple[int, np.ndarray]], offset: list[int]) -> Any:
    """``value`` with its CPU tensors replaced by refs to where they go in a slot (appended to ``tensors``)."""
    if isinstance(value, dict):
        return {key: _to_refs(item, tensors, offset) for key, item in value.items()}
    if isinstance(value, list):
        return [_to_refs(item, tensors, offset) for item in value]
    if isinstance(value, PackedSequence):
        return _PackedRef(tuple(_to_refs(part, tensors, offset) for part in value))
    if not isinstance(value, torch.Tensor) or value.device.type != "cpu" or value.is_nested:
        return value
    if value.layout == torch.sparse_csr:
        parts = (value.crow_indices(), value.col_indices(), value.values())
        crow, col, values = (_to_refs(part, tensors, offset) for part in parts)
        return _CSRRef(crow, col, values, tuple(value.shape))
    if value.layout != torch.strided or value.requires_grad:
        return value
    try:
        array = value.numpy()  # (strided as it may be: the copy into the slot makes it contiguous)
    except TypeError:  # a dtype NumPy lacks
        return value
    ref = _Ref(offset[0], array.dtype.str, array.shape)
    tensors.append((offset[0], array))
    offset[0] = _align(offset[0] + array.nbytes)
    return ref


class _Lease:
    """Frees a slot for its worker when the last tensor over it is gone."""

    def __init__(self, flags: mmap.mmap, slot: int):
        self.flags, self.slot = flags, slot

    def __del__(self) -> None:
        with contextlib.suppress(ValueError, TypeError):  # (the mapping is closed at interpreter exit)
            self.flags[8 + self.slot] = 0


class _PoolView:
    """The main process's mappings of one worker's slots (each file unlinked once mapped)."""

    def __init__(self, name: str, worker: int, owner: int):
        self.worker = worker
        self.flags = _map_once(f"{name}-flags")
        found = int.from_bytes(self.flags[:8], "little")
        if found != owner:
            raise RuntimeError(f"{name}-flags: the flags of pool {found:#x}, not of pool {owner:#x}, which DataLoader "
                               f"worker {worker} sent a batch from")  # fmt: skip
        self.slots: dict[int, tuple[int, mmap.mmap]] = {}


def _map_once(path: str) -> mmap.mmap:
    mapped = shm.open_mapped(path, writable=True)
    shm.unlink(path)
    return mapped


class _Receiver:
    def __init__(self) -> None:
        self.pools: dict[str, _PoolView] = {}
        self.lock = threading.Lock()

    def slot(self, wire: Wire) -> tuple[mmap.mmap, mmap.mmap | None]:
        """(the slot's mapping, the pool's flags — None for a slot of one batch), once the slot's header says it
        holds the wire's batch."""
        name = f"{wire.pool}-s{wire.slot}-g{wire.generation}"
        with self.lock:
            pool = self.pools.get(wire.pool)
            if pool is None:  # (a pool of the same PID is a dead worker's: its PID was reused)
                self.pools = {key: view for key, view in self.pools.items()
                              if view.worker != wire.worker and shm.alive(view.worker)}  # fmt: skip
                pool = self.pools[wire.pool] = _PoolView(wire.pool, wire.worker, wire.owner)
            flags = pool.flags if wire.slot < MAX_SLOTS else None
            held = pool.slots.get(wire.slot) if flags is not None else None
            if held is None or held[0] < wire.generation:
                held = (wire.generation, _map_once(name))
                if flags is not None:
                    pool.slots[wire.slot] = held
        generation, mapping = held
        header = tuple(np.frombuffer(mapping, HEADER, 1)[0].tolist()) if generation == wire.generation else None
        expected = (wire.owner, wire.slot, wire.generation, wire.serial)
        if header != expected:
            found = "a later generation" if header is None else f"{header}"
            raise RuntimeError(f"{name}: DataLoader worker {wire.worker} sent batch {wire.serial} in this slot, "
                               f"which holds {found} (owner, slot, generation, batch), not {expected}")  # fmt: skip
        return mapping, flags


_RECEIVER = _Receiver()


def unpack(wire: Wire) -> dict[str, Any]:
    """The fields of a batch a worker packed, its tensors over the slot (the slot is freed when they are gone)."""
    mapping, flags = _RECEIVER.slot(wire)
    buffer = (ctypes.c_char * len(mapping)).from_buffer(mapping)
    if flags is not None:
        buffer.lease = _Lease(flags, wire.slot)  # type: ignore[attr-defined]
    return {**wire.fields, **{name: _from_refs(value, buffer) for name, value in wire.refs.items()}}


def _from_refs(value: Any, buffer: Any) -> Any:
    if isinstance(value, dict):
        return {key: _from_refs(item, buffer) for key, item in value.items()}
    if isinstance(value, list):
        return [_from_refs(item, buffer) for item in value]
    if isinstance(value, _Ref):
        count = math.prod(value.shape)
        array = np.frombuffer(buffer, value.dtype, count, value.offset).reshape(value.shape)
        return torch.from_numpy(array)
    if isinstance(value, _CSRRef):
        parts = (_from_refs(value.crow, buffer), _from_refs(value.col, buffer), _from_refs(value.values, buffer))
        # (the beta warning: torch.py; the device explicit: not the receiving thread's default device)
        return torch.sparse_csr_tensor(*parts, size=value.size, device="cpu", check_invariants=False)
    if isinstance(value, _PackedRef):
        return PackedSequence(*(_from_refs(part, buffer) for part in value.parts))
    return value


def inline(fields: dict[str, Any]) -> tuple[bytes, list[np.ndarray]]:
    """The fields as a pickle and the arrays of their tensors (which it names), for the queue's pipe: nothing goes
    to shared memory."""
    buffer = io.BytesIO()
    pickler = _InlinePickler(buffer)
    pickler.dump(fields)
    return buffer.getvalue(), pickler.arrays


def from_inline(data: bytes, arrays: list[np.ndarray]) -> dict[str, Any]:
    fields: dict[str, Any] = _InlineUnpickler(io.BytesIO(data), arrays).load()
    return fields


class _InlineUnpickler(pickle.Unpickler):
    """Reads what :class:`_InlinePickler` wrote, the tensors it named taken from ``arrays`` (a subclass: Python 3.13's
    unpickler no longer lets an instance's ``persistent_load`` be assigned)."""

    def __init__(self, file: io.BytesIO, arrays: list[np.ndarray]):
        super().__init__(file)
        self.arrays = arrays

    def persistent_load(self, pid: Any) -> torch.Tensor:
        return torch.from_numpy(self.arrays[int(pid)])


class _InlinePickler(pickle.Pickler):
    """A plain pickler (not torch's, whose tensors go to shared memory) that leaves out the tensors NumPy holds,
    naming them by their place in ``arrays``; the others are pickled the plain way, their bytes included."""

    def __init__(self, file: io.BytesIO):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.arrays: list[np.ndarray] = []

    def persistent_id(self, obj: Any) -> int | None:
        if not isinstance(obj, torch.Tensor) or obj.layout != torch.strided or obj.device.type != "cpu":
            return None
        if obj.requires_grad or obj.is_nested:
            return None
        try:
            self.arrays.append(obj.numpy())
        except TypeError:  # a dtype NumPy lacks
            return None
        return len(self.arrays) - 1


def failed(report: str) -> None:
    """Raises, in the main process, what went wrong in a worker sending a batch (see the module's notes)."""
    raise RuntimeError(f"a DataLoader worker could not send a batch:\n{report}")


_POOLS: dict[tuple[str, int], SlotPool | None] = {}


def worker_pool(job: str) -> SlotPool | None:
    """This worker process's slots for a job (None where shared memory is not available)."""
    key = (job, os.getpid())
    if key not in _POOLS:
        pool = None
        if shm.available():
            try:
                pool = SlotPool(str(shm.job_directory(job) / f"w{os.getpid()}-{secrets.token_hex(6)}"))
            except OSError:
                pool = None
        _POOLS[key] = pool
    return _POOLS[key]
