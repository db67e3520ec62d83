"""Minibatches from ``DataLoader`` worker processes to the main process through reusable shared-memory slots.

torch's own transfer gives every tensor of every batch a new shared-memory file: created and filled by the worker,
passed as a file descriptor over a socket, mapped by the main process, every page faulted in by both — about as
long as reading the minibatch. Here no tensor crosses: a worker sends a batch's NumPy arrays (``torch_layouts``),
and the main process makes the tensors over them. Each worker keeps a few slot files (:class:`SlotPool`); a
message's arrays are copied into a free slot and only a pickle of the rest, naming each array by its place in the
slot, crosses the queue (:class:`Wire`); the main process maps each slot file once, removes its name, and unpickles
with arrays over the slot, without a copy. A slot is reused once every array of its message, views and tensors over
them included, is gone in the main process.

A message that finds every slot in use (a training loop keeping batches) gets a slot of its own, freed with its
arrays. One that gets no slot (``/dev/shm`` full) travels inline, pickled whole (:func:`inline`): never torch's way,
whose shared-memory files torch's queue feeder thread makes where an error reaches no one, and the batch would be
lost (the loader then waits forever). Whatever else goes wrong while a worker sends a batch is raised in the main
process (:func:`failed`).

The slots of a worker live in the job's private directory (:func:`cntkio._src.integrations.shm.job_directory`) under a
name no other pool has — the worker's PID and a random nonce, so that a later worker with a reused PID makes its
own — and each slot starts with a header (the pool's nonce, the slot, its generation and the serial number of the
message in it) that the main process checks against the :class:`Wire` before it trusts the slot.
"""

from __future__ import annotations

import contextlib
import ctypes
import io
import mmap
import os
import pickle
import secrets
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from cntkio._src.integrations import shm

MAX_SLOTS = 16  # per worker
ALIGN = 64
MIN_SLOT_BYTES = 1 << 20
HEADER = np.dtype([("owner", "<u8"), ("slot", "<u8"), ("generation", "<u8"), ("serial", "<u8")])  # (a slot's first)


@dataclass(frozen=True)
class Wire:
    """What crosses the worker's queue for one message: the slot holding its arrays (``pool``'s slot ``slot`` of
    generation ``generation``, holding message ``serial`` of the pool whose nonce is ``owner``), the pickle of the
    message (``data``) and the place of each array it names (``arrays``: offset in the slot, dtype, shape)."""

    pool: str
    worker: int
    owner: int
    slot: int
    generation: int
    serial: int
    data: bytes
    arrays: tuple[tuple[int, str, tuple[int, ...]], ...]


class _ArrayPickler(pickle.Pickler):
    """A plain pickler (not torch's, whose tensors go to shared memory) that leaves out NumPy arrays of plain dtypes,
    naming them by their place in ``arrays`` (a call of :func:`_slot_array`); anything else is pickled whole."""

    def __init__(self, file: io.BytesIO):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.arrays: list[np.ndarray] = []

    def reducer_override(self, obj: Any) -> Any:  # (not called for plain ints, strs, dicts, lists, tuples, ...)
        if type(obj) is not np.ndarray or obj.dtype.hasobject:
            return NotImplemented
        self.arrays.append(obj)
        return _slot_array, (len(self.arrays) - 1,)


def _slot_array(index: int) -> np.ndarray:
    """What :class:`_ArrayPickler` names an array by; :class:`_ArrayUnpickler` calls its own in its place."""
    raise RuntimeError(f"array {index} of a DataLoader worker's message, unpickled without its slot")


class _ArrayUnpickler(pickle.Unpickler):
    """Reads what :class:`_ArrayPickler` wrote, the arrays it named taken from ``arrays``."""

    def __init__(self, file: io.BytesIO, arrays: list[np.ndarray]):
        super().__init__(file)
        self.arrays = arrays

    def find_class(self, module: str, name: str) -> Any:
        if module == __name__ and name == "_slot_array":
            return self.arrays.__getitem__
        return super().find_class(module, name)


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

    def pack(self, message: Any) -> Wire | None:
        """``message`` pickled, its arrays copied into a free slot — all in use, into a slot of their own
        (:data:`MAX_SLOTS`, its generation the message's serial number) that the main process frees with them — or
        None (``/dev/shm`` full, or no array to copy)."""
        file = io.BytesIO()
        pickler = _ArrayPickler(file)
        pickler.dump(message)
        if not pickler.arrays:
            return None
        arrays = [array if array.flags.c_contiguous else np.ascontiguousarray(array) for array in pickler.arrays]
        places, end = [], ALIGN  # (the header first)
        for array in arrays:
            places.append((end, array.dtype.str, array.shape))
            end = _align(end + array.nbytes)
        with self.lock:
            self.serial += 1
            taken = self._acquire(end)
            if taken is None:
                return None
            slot, generation, mapping = taken
            try:
                _fill(mapping, (self.owner, slot, generation, self.serial), places, arrays)
            except BaseException:  # the slot goes back (a one-off slot's file goes), then the caller reports it
                if slot == MAX_SLOTS:
                    mapping.close()
                    shm.unlink(f"{self.name}-s{MAX_SLOTS}-g{generation}")
                else:
                    self.flags[8 + slot] = 0
                raise
            if slot == MAX_SLOTS:
                mapping.close()  # (the main process maps it)
        return Wire(self.name, os.getpid(), self.owner, slot, generation, self.serial, file.getvalue(), tuple(places))

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


def _fill(
    mapping: mmap.mmap,
    header: tuple[int, int, int, int],
    places: list[tuple[int, str, tuple[int, ...]]],
    arrays: list[np.ndarray],
) -> None:
    np.ndarray(1, HEADER, buffer=mapping)[0] = header
    for (offset, _, _), array in zip(places, arrays, strict=True):
        if array.nbytes:
            mapping[offset : offset + array.nbytes] = array.data  # (contiguous: its bytes, in one copy)


def _align(offset: int) -> int:
    return -(-offset // ALIGN) * ALIGN


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


def unpack(wire: Wire) -> Any:
    """The message a worker packed, its arrays over the slot (the slot is freed when they are gone)."""
    mapping, flags = _RECEIVER.slot(wire)
    buffer = (ctypes.c_char * len(mapping)).from_buffer(mapping)
    if flags is not None:
        buffer.lease = _Lease(flags, wire.slot)  # type: ignore[attr-defined]
    memory = memoryview(buffer).cast("B")  # (the arrays hold it, it holds the buffer, the buffer the lease)
    arrays = [np.ndarray(shape, dtype, memory, offset) for offset, dtype, shape in wire.arrays]
    return _ArrayUnpickler(io.BytesIO(wire.data), arrays).load()


def inline(message: Any) -> bytes:
    """``message`` pickled whole, for the queue's pipe: nothing goes to shared memory (see the module's notes)."""
    return pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)


def from_inline(data: bytes) -> Any:
    return pickle.loads(data)


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
