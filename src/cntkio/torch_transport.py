"""Minibatches from ``DataLoader`` worker processes to the main process through reusable shared-memory slots.

torch's own transfer gives every tensor of every batch a new shared-memory file: created and filled by the worker,
passed as a file descriptor over a socket, mapped by the main process, every page faulted in by both — about as
long as reading the minibatch. Here each worker keeps a few slot files (:class:`SlotPool`); a batch's tensors are
copied into a free slot and only their places cross the queue (:class:`Wire`); the main process maps each slot
file once, removes its name, and builds the tensors over it without a copy. A slot is reused once every tensor of
its batch, views included, is gone in the main process; when all are in use (a training loop keeping batches),
batches travel torch's way.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import threading
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.nn.utils.rnn import PackedSequence

from . import shm

MAX_SLOTS = 16  # per worker
ALIGN = 64
MIN_SLOT_BYTES = 1 << 20


@dataclass(frozen=True)
class _Ref:
    """A strided tensor in a slot."""

    offset: int
    dtype: str
    shape: tuple[int, ...]


@dataclass(frozen=True)
class _CSRRef:
    crow: _Ref
    col: _Ref
    values: _Ref
    size: tuple[int, ...]


@dataclass(frozen=True)
class _PackedRef:
    parts: tuple[Any, ...]  # PackedSequence's fields: refs, or None


@dataclass(frozen=True)
class Wire:
    """What crosses the worker's queue for one batch: the slot holding its tensors, the fields holding tensors (with
    refs to the slot in their place) and the other fields."""

    pool: str
    worker: int
    slot: int
    generation: int
    fields: dict[str, Any]
    refs: dict[str, Any]


class SlotPool:
    """A worker's slot files: ``<name>-flags`` (one byte per slot: 1 while the main process may read it) and
    ``<name>-s<slot>-g<generation>`` (a slot grown for a larger batch gets a new generation)."""

    def __init__(self, name: str):
        self.name = name
        self.flags = shm.create(f"{name}-flags", MAX_SLOTS)
        self.maps: list[mmap.mmap | None] = [None] * MAX_SLOTS
        self.generations = [-1] * MAX_SLOTS
        self.lock = threading.Lock()

    def pack(self, fields: dict[str, Any], tensor_fields: tuple[str, ...]) -> Wire | None:
        """The fields with the tensors of ``tensor_fields`` (tensors, or dicts of them) copied into a free slot, or
        None (no slot free, or nothing to copy)."""
        tensors: list[tuple[int, np.ndarray]] = []  # (offset in the slot, array)
        end = [0]
        refs = {name: _to_refs(fields[name], tensors, end) for name in tensor_fields}
        if not tensors:
            return None
        with self.lock:
            taken = self._acquire(end[0])
            if taken is None:
                return None
            slot, generation, buffer = taken
            for offset, array in tensors:
                if array.nbytes:
                    np.copyto(np.ndarray(array.shape, array.dtype, buffer=buffer, offset=offset), array)
        others = {name: value for name, value in fields.items() if name not in refs}
        return Wire(self.name, os.getpid(), slot, generation, others, refs)

    def _acquire(self, size: int) -> tuple[int, int, mmap.mmap] | None:
        """A free slot of at least ``size`` bytes (the smallest; else a free one made larger): (slot, generation,
        mapping), or None."""
        free = [i for i in range(MAX_SLOTS) if self.flags[i] == 0]
        if not free:
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
            except OSError:  # /dev/shm full: torch's way
                self.maps[slot] = None
                return None
        mapping = self.maps[slot]
        assert mapping is not None
        self.flags[slot] = 1
        return slot, self.generations[slot], mapping

    def _capacity(self, slot: int) -> int:
        mapping = self.maps[slot]
        return len(mapping) if mapping is not None else 0


def _align(offset: int) -> int:
    return -(-offset // ALIGN) * ALIGN


def _to_refs(value: Any, tensors: list[tuple[int, np.ndarray]], offset: list[int]) -> Any:
    """``value`` with its CPU tensors replaced by refs to where they go in a slot (appended to ``tensors``)."""
    if isinstance(value, dict):
        return {key: _to_refs(item, tensors, offset) for key, item in value.items()}
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
        array = value.detach().contiguous().numpy()
    except TypeError:  # a dtype NumPy lacks
        return value
    ref = _Ref(offset[0], array.dtype.str, tuple(array.shape))
    tensors.append((offset[0], array))
    offset[0] = _align(offset[0] + array.nbytes)
    return ref


class _Lease:
    """Frees a slot for its worker when the last tensor over it is gone."""

    def __init__(self, flags: mmap.mmap, slot: int):
        self.flags, self.slot = flags, slot

    def __del__(self) -> None:
        with contextlib.suppress(ValueError, TypeError):  # (the mapping is closed at interpreter exit)
            self.flags[self.slot] = 0


class _PoolView:
    """The main process's mappings of one worker's slots (each file unlinked once mapped)."""

    def __init__(self, name: str, worker: int):
        self.worker = worker
        self.flags = _map_once(f"{name}-flags")
        self.slots: dict[int, tuple[int, mmap.mmap]] = {}


def _map_once(path: str) -> mmap.mmap:
    mapped = shm.open_mapped(path, writable=True)
    shm.unlink(path)
    return mapped


class _Receiver:
    def __init__(self) -> None:
        self.pools: dict[str, _PoolView] = {}
        self.lock = threading.Lock()

    def slot(self, wire: Wire) -> tuple[mmap.mmap, mmap.mmap]:
        """(the slot's mapping, the pool's flags)."""
        with self.lock:
            pool = self.pools.get(wire.pool)
            if pool is None:
                self.pools = {name: view for name, view in self.pools.items() if shm.alive(view.worker)}
                pool = self.pools[wire.pool] = _PoolView(wire.pool, wire.worker)
            held = pool.slots.get(wire.slot)
            if held is None or held[0] != wire.generation:
                mapping = _map_once(f"{wire.pool}-s{wire.slot}-g{wire.generation}")
                held = pool.slots[wire.slot] = (wire.generation, mapping)
            return held[1], pool.flags


_RECEIVER = _Receiver()


def unpack(wire: Wire) -> dict[str, Any]:
    """The fields of a batch a worker packed, its tensors over the slot (the slot is freed when they are gone)."""
    mapping, flags = _RECEIVER.slot(wire)
    buffer = (ctypes.c_char * len(mapping)).from_buffer(mapping)
    buffer.lease = _Lease(flags, wire.slot)  # type: ignore[attr-defined]
    return {**wire.fields, **{name: _from_refs(value, buffer) for name, value in wire.refs.items()}}


def _from_refs(value: Any, buffer: Any) -> Any:
    if isinstance(value, dict):
        return {key: _from_refs(item, buffer) for key, item in value.items()}
    if isinstance(value, _Ref):
        dtype = np.dtype(value.dtype)
        count = int(np.prod(value.shape, dtype=np.int64))
        array = np.frombuffer(buffer, dtype, count, value.offset).reshape(value.shape)
        return torch.from_numpy(array)
    if isinstance(value, _CSRRef):
        parts = (_from_refs(value.crow, buffer), _from_refs(value.col, buffer), _from_refs(value.values, buffer))
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "Sparse CSR tensor support is in beta", UserWarning)
            return torch.sparse_csr_tensor(*parts, size=value.size, check_invariants=False)
    if isinstance(value, _PackedRef):
        return PackedSequence(*(_from_refs(part, buffer) for part in value.parts))
    return value


_POOLS: dict[str, SlotPool | None] = {}


def worker_pool(job: str) -> SlotPool | None:
    """This worker process's slots for a job (None where shared memory is not available)."""
    if job not in _POOLS:
        pool = None
        if shm.available():
            try:
                pool = SlotPool(str(shm.SHM_DIR / f"{job}-w{os.getpid()}"))
            except OSError:
                pool = None
        _POOLS[job] = pool
    return _POOLS[job]
