"""Parsed chunks shared by the ``DataLoader`` worker processes of one dataset, so that each chunk is parsed once
per epoch whatever the number of workers.

Every worker reads the same order (it skips the minibatches of the other workers), so every worker wants much the
same chunks at much the same time. The first to start loading a chunk *claims* it (a file made atomically), parses
it and publishes it as a shared-memory file (:mod:`cntkio._src.integrations.shm`); the others wait for that file and
map it — zero
copies, one physical copy for all workers. The claim is a file lock, which the kernel drops if its holder dies (then
another worker takes the chunk over); a claimant's load never waits for anybody, so waiting cannot deadlock.

Sharing never decides what a worker reads, only who parses: whatever goes wrong — ``/dev/shm`` full, a file
removed under a worker, a parse that fails — the worker parses the chunk itself, as without sharing. A chunk
whose parse counted errors is not shared either: each worker parses it and counts its errors, as before.

Files are removed by their claimant once every worker has passed the minibatch from which on the claimant's
reader no longer needed the chunk (each worker publishes the minibatch it is at), and what is left when the
last worker ends an epoch goes with the epoch's directory.

Everything lives in the job's private directory (:func:`cntkio._src.integrations.shm.job_directory`:
``chunks-e<epoch>/`` and the
``positions`` table), which no other user can enter: a file another user planted at a name it saw or guessed is
never read, mapped or written through.
"""

from __future__ import annotations

import contextlib
import fcntl
import heapq
import json
import mmap
import os
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from cntkio._src.formats.protocol import DenseStream, ParsedChunk, SparseStream
from cntkio._src.integrations import shm
from cntkio._src.reading.chunk_cache import Chunk, ChunkName

MAX_WORKERS = 256
_EPOCH_SHIFT = 40
_DONE = (1 << _EPOCH_SHIFT) - 1  # the position of a worker that ended its epoch
_ALIGN = 64
_LOCAL = -1  # (in place of an inode: the claimant left a ".local" marker, not a file)



class ChunkExchange:
    """One worker's side of the exchange for one epoch (see the module).

    Args:
        job: the dataset's shared-memory name (:func:`cntkio._src.integrations.shm.job_name`).
        epoch, worker, workers: which epoch this worker reads, and its place among the workers.
        corpus: identifies the data and configuration (workers whose sources differ do not share).

    Raises :class:`cntkio._src.integrations.shm.NotPrivate` when something other than a private directory of this user
    is found where the job's directory, or the epoch's, belongs.
    """

    splits_chunks = False  # (a ChunkLoader: the worker processes are the parallelism)
    reads_here = False  # (whichever worker claims a chunk reads it)

    def __init__(self, job: str, epoch: int, worker: int, workers: int, corpus: str):
        if not 0 <= worker < workers <= MAX_WORKERS:
            raise ValueError(f"worker {worker} of {workers}")
        self.worker, self.workers, self.epoch = worker, workers, epoch
        root = shm.job_directory(job)
        self.directory = root / f"chunks-e{epoch}"
        self.corpus = corpus
        for stale in root.glob("chunks-e*"):  # earlier epochs: no worker reads them any more
            if stale != self.directory:
                shm.unlink(str(stale))
        shm.private_directory(self.directory)
        self.positions = _positions(str(root / "positions"))
        self._pending: list[tuple[int, str, int]] = []  # (position it was released at, file, inode)
        self._mine: dict[str, int] = {}  # file -> inode of the chunks this worker published
        self._lock = threading.Lock()
        self.at(0)

    # --- positions -----------------------------------------------------------------------------
    def at(self, index: int) -> None:
        """This worker reads (or skips) minibatch ``index`` next; files no worker needs any more are removed."""
        self.index = index
        self.positions[self.worker] = (self.epoch << _EPOCH_SHIFT) | min(index, _DONE)
        self._collect()

    def _slowest(self) -> int:
        """The earliest minibatch any worker of this epoch may still read (a worker still in an earlier epoch
        may read any)."""
        slowest = _DONE
        for value in self.positions[: self.workers].tolist():
            epoch, index = value >> _EPOCH_SHIFT, value & _DONE
            if epoch < self.epoch:
                return 0
            if epoch == self.epoch:
                slowest = min(slowest, index)
        return slowest

    def _collect(self) -> None:
        """Removes the files this worker published that every worker has passed."""
        if not self._pending:
            return
        slowest = self._slowest()
        with self._lock:
            while self._pending and self._pending[0][0] <= slowest:
                _, path, inode = heapq.heappop(self._pending)
                with contextlib.suppress(FileNotFoundError):
                    if inode == _LOCAL:
                        shm.unlink(path + ".local")
                    elif os.lstat(path).st_ino == inode:  # (not a later copy published by another worker)
                        shm.unlink(path)
                    else:
                        continue
                    shm.unlink(path + ".claim")

    def close(self) -> None:
        """This worker ended its epoch: its files go once nobody needs them, the directory with the last worker."""
        self.at(_DONE)
        if self._slowest() == _DONE:
            shm.unlink(str(self.directory))

    # --- chunks --------------------------------------------------------------------------------
    def load(self, name: ChunkName, parse: Callable[[], Chunk], *, wait: bool = True) -> Chunk | None:
        """The chunk ``name``: mapped from the worker that parsed it, or parsed here (and published). While another
        worker parses it: waits, or (``wait=False``) returns None at once, so the caller's thread can parse
        another chunk meanwhile and ask again."""
        path = self._path(name)
        while True:
            with contextlib.suppress(FileNotFoundError):
                return _read(path)
            if os.path.lexists(path + ".local"):  # its parse counted errors: every worker counts them itself
                return parse()
            try:  # the claim: an exclusive lock on <path>.claim while parsing (the kernel drops it if we die)
                claim = os.open(path + ".claim", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            except FileNotFoundError:  # the directory is gone (another epoch began): no sharing
                return parse()
            try:
                try:
                    fcntl.flock(claim, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:  # another worker parses it
                    if not wait:
                        return None
                    fcntl.flock(claim, fcntl.LOCK_SH)  # until it has published it (or died)
                    continue
                if os.path.lexists(path) or os.path.lexists(path + ".local"):  # published meanwhile
                    continue
                return self._parse_and_publish(path, parse)
            finally:
                os.close(claim)  # (releases the lock)

    def _parse_and_publish(self, path: str, parse: Callable[[], Chunk]) -> Chunk:
        data = parse()
        try:
            if _shareable(data):  # (read back from the file: one copy of the chunk in memory, not two)
                self._mine[path] = _publish(path, data)
                del data
                return _read(path)
        except OSError:  # /dev/shm full: the others parse it themselves
            pass
        with contextlib.suppress(OSError):
            os.close(os.open(path + ".local", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
        self._mine[path] = _LOCAL
        return data

    def _path(self, name: ChunkName) -> str:
        return str(self.directory / f"{self.corpus}-{name[0]}-{name[1]}-{name[2]}")

    def release(self, name: ChunkName) -> None:
        """This worker's reader dropped the chunk ``name``: it needs it no more from its current minibatch on."""
        path = self._path(name)
        with self._lock:
            inode = self._mine.pop(path, None)
            if inode is not None:
                heapq.heappush(self._pending, (self.index, path, inode))
        self._collect()


def _positions(path: str) -> np.ndarray:
    """The job's table of worker positions (made by the first worker to ask)."""
    try:
        mapping = shm.open_mapped(path, writable=True)
    except FileNotFoundError:
        temporary = f"{path}.{os.getpid()}"
        mapping = shm.create(temporary, MAX_WORKERS * 8)
        try:
            os.link(temporary, path)
        except FileExistsError:
            mapping = shm.open_mapped(path, writable=True)
        finally:
            shm.unlink(temporary)
    return np.frombuffer(mapping, dtype=np.int64, count=MAX_WORKERS)


def _shareable(data: Any) -> bool:
    invalid = getattr(data, "invalid", None)
    if invalid is not None and np.any(invalid):
        return False
    return isinstance(data, dict) and all(isinstance(s, (DenseStream, SparseStream)) for s in data.values())


def _arrays(stream: DenseStream | SparseStream) -> dict[str, np.ndarray]:
    if isinstance(stream, SparseStream):
        return {"values": stream.values, "indices": stream.indices, "indptr": stream.indptr,
                "seq_offsets": stream.seq_offsets}  # fmt: skip
    return {"values": stream.values, "seq_offsets": stream.seq_offsets}


def _publish(path: str, data: Chunk) -> int:
    """Writes the chunk to ``path``, atomically: written (not mapped: a full ``/dev/shm`` is an error here) under
    another name, then renamed. Returns the file's inode."""
    header: dict[str, Any] = {}
    pieces: list[Any] = []
    offset = 0
    for name, stream in data.items():
        arrays = {}
        for field, array in _arrays(stream).items():
            array = np.ascontiguousarray(array)
            arrays[field] = [offset, array.dtype.str, list(array.shape)]
            end = -(-(offset + array.nbytes) // _ALIGN) * _ALIGN
            pieces += [array.reshape(-1).view(np.uint8).data, bytes(end - offset - array.nbytes)]
            offset = end
        dim = stream.dim if isinstance(stream, SparseStream) else None
        header[name] = {"arrays": arrays, "dim": dim}
    text = json.dumps(header).encode()
    start = -(-(8 + len(text)) // _ALIGN) * _ALIGN
    pieces = [len(text).to_bytes(8, "little") + text + bytes(start - 8 - len(text)), *pieces]
    temporary = f"{path}.{os.getpid()}.{threading.get_ident()}"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        try:
            _write_all(fd, [piece for piece in pieces if len(piece)])
            inode = os.fstat(fd).st_ino
        finally:
            os.close(fd)
        os.rename(temporary, path)
        return inode
    except BaseException:
        shm.unlink(temporary)
        raise


def _write_all(fd: int, pieces: list[Any]) -> None:
    while pieces:
        written = os.writev(fd, pieces[:1024])
        while pieces and written >= len(pieces[0]):
            written -= len(pieces[0])
            pieces.pop(0)
        if written:
            pieces[0] = memoryview(pieces[0])[written:]


def _read(path: str) -> ParsedChunk:
    return _views(shm.open_mapped(path, populate=True))


def _views(mapping: mmap.mmap) -> ParsedChunk:
    length = int.from_bytes(mapping[:8], "little")
    header = json.loads(mapping[8 : 8 + length])
    start = -(-(8 + length) // _ALIGN) * _ALIGN
    chunk = ParsedChunk()
    for name, entry in header.items():
        arrays = {}
        for field, (at, dtype, shape) in entry["arrays"].items():
            kind = np.dtype(dtype)
            array = np.frombuffer(mapping, kind, int(np.prod(shape, dtype=np.int64)), start + at).reshape(shape)
            array.flags.writeable = False
            arrays[field] = array
        if entry["dim"] is None:
            chunk[name] = DenseStream(arrays["values"], arrays["seq_offsets"])
        else:
            chunk[name] = SparseStream(arrays["values"], arrays["indices"], arrays["indptr"], arrays["seq_offsets"],
                                       entry["dim"])  # fmt: skip
    return chunk
