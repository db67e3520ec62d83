"""Persisted indexes (``cache_index=True``): a deserializer's index of a data file, written once and loaded on the
next open instead of scanning the file again — CNTK's ``cacheIndex`` done so that it can be trusted.

A cache file holds the index arrays and a few scalars, with a header naming the format version, the index kind and
the options that shape the index, and the identity of the data file it was built from: inode, size, modification
time, change time (ctime) and CRC-32C checksums of its first and last 64 KiB. It ends with a CRC-32C (hardware) of
everything before. A cache is used only when all of that matches; otherwise (stale, corrupt, truncated, another
version or other options) the index is built again with a warning and the cache rewritten.

The change time and the inode are what a user cannot set back (:class:`~cntkio._src.formats.data_file.FileIdentity`,
as git's index uses them): a file rewritten in place with its size and modification time put back has a new
ctime, a copied or restored one a new inode, and its cache is built again once (then used again). The device is
left out: one file on shared storage has other device numbers on other machines, which share its cache.

Writing is atomic (a temporary file in the same directory, flushed, then renamed over the old one), so a reader
never sees a half-written cache and concurrent writers leave one complete file. Caches go next to the data file
(``<data file>.<options digest>.cntkio-index``), or into ``index_cache_dir`` (for read-only data), named after the
data file's absolute path. A cache that cannot be written (read-only directory, full disk) is a warning, never an
error.

Layout (little-endian)::

    "CNTKIOIX"  uint32 format version  uint32 header bytes  header (JSON, UTF-8)  zero padding to 64
    array 0 (padded to 64) ... array n-1 (padded to 64)
    uint64 bytes before the trailer  uint32 CRC-32C of them  "IXND"
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import struct
import tempfile
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from cntkio import _native
from cntkio._src.formats import remote

if TYPE_CHECKING:
    from cntkio._src.formats.data_file import DataFile

logger = logging.getLogger("cntkio")

__all__ = ["IndexCache", "narrowest"]

FORMAT_VERSION = 3  # 3: a CTF index with the checkpoint identity's digests of it and of its file (cntkio.identity)
MAGIC = b"CNTKIOIX"
END = b"IXND"
SUFFIX = ".cntkio-index"
ALIGN = 64
PROBE_BYTES = 64 << 10  # the data file's first and last bytes checksummed
_PREFIX = struct.Struct("<8sII")
_TRAILER = struct.Struct("<QI4s")
_SCALARS = (bool, int, float, str, type(None))


class IndexCache:
    """The persisted index of one data file for one index ``kind`` and set of ``options``.

    Example::

        cache = IndexCache(data_file, "ctf", {"streams": [...], "chunk_size": 32 << 20}, directory=None)
        index = cache.load()            # None: missing, stale or corrupt (a warning says which but missing)
        if index is None:
            index = build_index()
            cache.store(index)          # arrays (numpy) and JSON scalars
    """

    def __init__(self, data_file: DataFile, kind: str, options: Mapping[str, Any], directory: str | None = None):
        self.data_file = data_file
        self.kind = kind
        self.options = json.loads(json.dumps(options, sort_keys=True))  # plain JSON values, compared as loaded
        digest = hashlib.sha256(json.dumps([kind, self.options], sort_keys=True).encode()).hexdigest()[:12]
        data_path = data_file.cache_name
        if directory is None and data_file.is_remote:  # (not next to remote data: in the local cache directory)
            directory = os.path.join(remote.settings().cache_dir or remote.default_cache_dir(), "index")
        if directory is None:
            self.path = f"{data_path}.{digest}{SUFFIX}"
        else:
            where = hashlib.sha256(data_path.encode("utf-8", "surrogateescape")).hexdigest()[:12]
            self.path = os.path.join(os.fspath(directory), f"{os.path.basename(data_path)}.{where}.{digest}{SUFFIX}")

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """Holds an exclusive lock (``flock``) while the block loads, builds and stores the index: processes opening
        the same data at once (the ranks of a job on one node, or sharing a cache directory) wait for the first to
        build it, then load it. A local data file is itself the lock (no file is added beside it); a remote object's
        lock is ``<cache file>.lock`` in the local cache directory. Where locks are not available (a filesystem
        without them, a cache directory that cannot be written) the block runs unlocked."""
        if not self.data_file.is_remote:
            descriptor = os.dup(self.data_file.fd)
        else:
            try:
                os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
                descriptor = os.open(self.path + ".lock", os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o666)
            except OSError:
                yield
                return
        try:
            with contextlib.suppress(OSError):
                fcntl.flock(descriptor, fcntl.LOCK_EX)
            yield
        finally:
            with contextlib.suppress(OSError):
                fcntl.flock(descriptor, fcntl.LOCK_UN)  # (the data file's own descriptor stays open)
            os.close(descriptor)

    # --- identity of the data ----------------------------------------------------------------------------------
    def _identity(self) -> dict[str, Any]:
        """Inode, size, modification and change times, and checksums of the first and last bytes of the data file
        as opened."""
        identity = self.data_file.identity
        size = identity.size
        head, tail = self.data_file.read_ranges(
            [(0, min(PROBE_BYTES, size)), (max(0, size - PROBE_BYTES), size)]
        )  # fmt: skip
        return {
            "inode": identity.inode,
            "size": size,
            "mtime_ns": identity.mtime_ns,
            "ctime_ns": identity.ctime_ns,
            "head": _native.crc32c(head),
            "tail": _native.crc32c(tail),
        }

    # --- loading -----------------------------------------------------------------------------------------------
    def load(self) -> dict[str, Any] | None:
        """The cached index, or None when there is no cache or it cannot be used (a warning says why)."""
        try:
            with open(self.path, "rb", buffering=0) as file:
                content = np.empty(os.fstat(file.fileno()).st_size, dtype=np.uint8)  # not zero-filled: read over
                view = content.data
                got = 0
                while got < len(content):
                    count = file.readinto(view[got:])
                    if not count:
                        break
                    got += count
        except FileNotFoundError:
            return None
        except OSError as error:
            logger.warning(
                "index cache %s cannot be read (%s): indexing %s again", self.path, error, self.data_file.path
            )
            return None
        try:
            return self._parse(content[:got])
        except _Unusable as reason:
            logger.warning("index cache %s is %s: indexing %s again", self.path, reason, self.data_file.path)
            return None

    def _parse(self, content: np.ndarray) -> dict[str, Any]:
        if len(content) < _PREFIX.size + _TRAILER.size:
            raise _Unusable("truncated")
        magic, version, header_bytes = _PREFIX.unpack_from(content.data, 0)
        if magic != MAGIC:
            raise _Unusable("not a cntkio index cache")
        length, crc, end = _TRAILER.unpack_from(content.data, len(content) - _TRAILER.size)
        if end != END or length != len(content) - _TRAILER.size:
            raise _Unusable("truncated")
        if _native.crc32c(content[:length]) != crc:
            raise _Unusable("corrupt (checksum mismatch)")
        if version != FORMAT_VERSION:
            raise _Unusable(f"of format version {version}, not {FORMAT_VERSION}")
        try:
            header = json.loads(content[_PREFIX.size : _PREFIX.size + header_bytes].tobytes())
        except ValueError:
            raise _Unusable("corrupt (header)") from None
        if header.get("kind") != self.kind or header.get("options") != self.options:
            raise _Unusable("for other options")
        written, now = header.get("data"), self._identity()
        if written != now:
            differ = [_WHAT[key] for key in _WHAT if not isinstance(written, dict) or written.get(key) != now[key]]
            raise _Unusable(f"stale (the data file's {', '.join(differ)} differ from when it was written)")
        index: dict[str, Any] = dict(header.get("scalars", {}))
        for entry in header.get("arrays", []):
            dtype, shape = np.dtype(entry["dtype"]), entry["shape"]
            if "constant" in entry:
                index[entry["name"]] = np.full(shape, entry["constant"], dtype=dtype)
                continue
            offset, count = int(entry["offset"]), int(np.prod(shape, dtype=np.int64))
            stored = np.dtype(entry["stored"])
            if offset < 0 or offset + count * stored.itemsize > length:
                raise _Unusable("corrupt (an array lies outside the file)")
            array = content[offset : offset + count * stored.itemsize].view(stored).reshape(shape)
            index[entry["name"]] = array if stored == dtype else array.astype(dtype)
        return index

    # --- storing -----------------------------------------------------------------------------------------------
    def store(self, index: Mapping[str, Any]) -> bool:
        """Writes ``index`` (NumPy arrays and JSON scalars) atomically; False (with a warning) when it cannot."""
        arrays = {name: np.ascontiguousarray(value) for name, value in index.items() if isinstance(value, np.ndarray)}
        scalars = {name: value for name, value in index.items() if name not in arrays}
        for name, value in scalars.items():
            if not isinstance(value, _SCALARS):
                raise TypeError(f"index cache: {name!r} is neither an array nor a JSON scalar ({type(value).__name__})")
        entries: list[dict[str, Any]] = []
        stored: list[np.ndarray] = []
        offset = 0
        for name, array in arrays.items():
            if array.dtype.hasobject:
                raise TypeError(f"index cache: array {name!r} holds Python objects")
            entry: dict[str, Any] = {"name": name, "dtype": array.dtype.str, "shape": list(array.shape)}
            compact, constant = _compact(array)
            if constant is not None:
                entry["constant"] = constant
            else:
                entry.update({"stored": compact.dtype.str, "at": offset})
                stored.append(compact)
                offset += _padded(compact.nbytes)
            entries.append(entry)
        header = {"kind": self.kind, "options": self.options, "data": self._identity(), "scalars": scalars}
        # Offsets in the file depend on the header's length, which depends on the offsets: lay the arrays out
        # after a header written with the final offsets (their digits only grow the header, so iterate to a fix).
        base = 0
        while True:
            header["arrays"] = [
                {key: value for key, value in e.items() if key != "at"}
                | ({"offset": base + e["at"]} if "at" in e else {})
                for e in entries
            ]
            text = json.dumps(header, sort_keys=True).encode()
            start = _padded(_PREFIX.size + len(text))
            if start == base:
                break
            base = start
        directory = os.path.dirname(self.path) or "."
        temporary = None
        try:
            os.makedirs(directory, exist_ok=True)
            descriptor, temporary = tempfile.mkstemp(prefix=".", suffix=".tmp", dir=directory)
            with os.fdopen(descriptor, "wb") as file:
                crc = 0
                for piece in _pieces(text, start, stored):
                    file.write(piece)
                    crc = _native.crc32c(piece, crc)
                file.write(_TRAILER.pack(start + offset, crc, END))
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, self.path)
            temporary = None
            return True
        except OSError as error:
            logger.warning("index cache %s cannot be written (%s); the index is used without it", self.path, error)
            return False
        finally:
            if temporary is not None:
                with contextlib.suppress(OSError):
                    os.unlink(temporary)


_WHAT = {
    "inode": "inode (a copied, restored or replaced file)",
    "size": "size",
    "mtime_ns": "modification time",
    "ctime_ns": "change time (ctime: rewritten, or its permissions or name changed)",
    "head": "first 64 KiB",
    "tail": "last 64 KiB",
}  # the data file's identity in a cache header, in words


class _Unusable(Exception):
    """Why a cache file cannot be used."""


def narrowest(array: np.ndarray) -> np.ndarray:
    """An integer array in the narrowest integer type that holds its values (itself when none is narrower)."""
    if not array.size or array.dtype.kind not in "iu":
        return array
    low, high = array.min(), array.max()
    for narrow in (np.uint8, np.int8, np.uint16, np.int16, np.uint32, np.int32):
        info = np.iinfo(narrow)
        if np.dtype(narrow).itemsize < array.dtype.itemsize and info.min <= low and high <= info.max:
            return array.astype(narrow)
    return array


def _compact(array: np.ndarray) -> tuple[np.ndarray, int | float | bool | None]:
    """How an array is stored: (it in the narrowest integer type holding its values, None), or (it, the value)
    when every element has that one value (then nothing is stored)."""
    if array.size and array.dtype.kind in "iub" and array.min() == array.max():
        return array, array.reshape(-1)[0].item()
    return narrowest(array), None


def _padded(size: int) -> int:
    return (size + ALIGN - 1) // ALIGN * ALIGN


def _pieces(header: bytes, start: int, arrays: Any) -> Any:
    """The bytes of the file up to the trailer, piece by piece (arrays without copies)."""
    yield _PREFIX.pack(MAGIC, FORMAT_VERSION, len(header)) + header + bytes(start - _PREFIX.size - len(header))
    for array in arrays:
        data = memoryview(array.reshape(-1).view(np.uint8))
        yield data
        yield bytes(_padded(len(data)) - len(data))
