"""Remote data: any fsspec URL (``s3://``, ``gs://``, ``az://``/``abfs://``, ``http(s)://``, ``hf://``, ...) read by
byte range, as a local file is read by offset.

The native readers read a file descriptor with ``pread``. A remote object gets one too: a *staging file*, an unlinked
sparse file in the local cache directory with the object's size, into which exactly the byte ranges a read needs are
fetched (ranged GETs, split in parts fetched concurrently, each retried on transient errors) just before the native
reader reads them, and from which they are released (the range's disk blocks freed) right after. So a chunk read
fetches the chunk's bytes and nothing else, reads from several parse threads fetch concurrently, and every native
reader reads remote data through the same code, with the same checks, as local data.

An object is identified by its URL, version (ETag, generation or version id, whichever the filesystem reports) and
size, read once when it is opened; every read is followed by a check of the version and size (one metadata request),
so an object replaced or rewritten under the reader is an error naming what changed — never other data.

Storage options (credentials, endpoints) are fsspec's: its configuration (``fsspec.config.conf``, or environment
variables ``FSSPEC_<PROTOCOL>_<OPTION>``), or :func:`configure`.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import hashlib
import logging
import os
import re
import selectors
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from cntkio import _native
from cntkio._src.common.errors import ConfigError, FormatError, Location

__all__ = [
    "FetchStats",
    "RemoteObject",
    "RemoteSettings",
    "configure",
    "default_cache_dir",
    "expand",
    "fetch_stats",
    "is_remote",
    "settings",
]

T = TypeVar("T")
logger = logging.getLogger("cntkio")
_UNVERSIONED: set[str] = set()  # objects warned about
_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_LOCAL_PROTOCOLS = {"file", "local"}


def is_remote(path: str) -> bool:
    """Whether ``path`` names remote data: a URL of a protocol other than ``file://``, or a chained fsspec URL
    (``simplecache::s3://...``)."""
    last = _URL.match(path.split("::")[-1]) if "::" in path else None  # (a chain ends in a URL: a::b:: is a name)
    match = _URL.match(path)
    return last is not None or (match is not None and match.group(1).lower() not in _LOCAL_PROTOCOLS)


def default_cache_dir() -> str:
    """Where cntkio keeps local state for remote data (staging files, index caches): ``$CNTKIO_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/cntkio``, else ``~/.cache/cntkio``."""
    chosen = os.environ.get("CNTKIO_CACHE_DIR")
    if chosen:
        return chosen
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "cntkio")


@dataclasses.dataclass
class RemoteSettings:
    """How remote objects are read (process-wide; :func:`configure` sets them).

    ``retries``: attempts after the first for a failing range (transient errors: connection, timeout, 5xx, ...);
    ``backoff``: seconds before the first retry, doubled each time; ``part_bytes``: a range longer than this is
    fetched as parts of this size, ``concurrency`` parts at a time (a read holds their bytes); ``fetch_ahead``:
    whether the chunks the reader has queued are fetched ahead of their parse (:meth:`RemoteObject.prefetch`: their
    bytes wait in the staging file); ``cache_dir``: where
    staging files go (None: :func:`default_cache_dir`); ``storage_options``: per protocol, keyword arguments of its
    fsspec filesystem. A pickled deserializer of remote data carries the options of its protocol (as fsspec's
    filesystems pickle theirs), so workers it is sent to reach the same store."""

    retries: int = 5
    backoff: float = 0.1
    part_bytes: int = 8 << 20
    concurrency: int = 8
    fetch_ahead: bool = True
    cache_dir: str | None = None
    storage_options: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)


_SETTINGS = RemoteSettings()


def settings() -> RemoteSettings:
    """The current :class:`RemoteSettings`."""
    return _SETTINGS


def configure(
    protocol: str | None = None,
    *,
    retries: int | None = None,
    backoff: float | None = None,
    part_bytes: int | None = None,
    concurrency: int | None = None,
    fetch_ahead: bool | None = None,
    cache_dir: str | None = None,
    **storage_options: Any,
) -> RemoteSettings:
    """Sets how remote data is read: ``configure("s3", endpoint_url=..., key=..., secret=...)`` gives the ``s3``
    filesystem these options; ``retries``, ``backoff``, ``part_bytes``, ``concurrency``, ``fetch_ahead`` and
    ``cache_dir`` are for every protocol.
    Deserializers opened afterwards use them. Returns the settings."""
    if storage_options and protocol is None:
        raise TypeError("configure: storage options need the protocol they are for, e.g. configure('s3', ...)")
    if retries is not None:
        if retries < 0:
            raise ValueError(f"retries must be >= 0, got {retries}")
        _SETTINGS.retries = int(retries)
    if backoff is not None:
        _SETTINGS.backoff = max(0.0, float(backoff))
    if part_bytes is not None:
        if part_bytes < 1 << 16:
            raise ValueError(f"part_bytes must be at least 65536, got {part_bytes}")
        _SETTINGS.part_bytes = int(part_bytes)
    if concurrency is not None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        _SETTINGS.concurrency = int(concurrency)
    if fetch_ahead is not None:
        _SETTINGS.fetch_ahead = bool(fetch_ahead)
    if cache_dir is not None:
        _SETTINGS.cache_dir = os.fspath(cache_dir)
    if protocol is not None:
        _SETTINGS.storage_options[protocol] = dict(storage_options)
    return _SETTINGS


def carried(paths: list[str]) -> dict[str, dict[str, Any]] | None:
    """The storage options (:func:`configure`) of the protocols of the remote ``paths``, for a pickled deserializer
    to carry to the process it is sent to (None: nothing to carry)."""
    found = {}
    for path in paths:
        if is_remote(path):
            for layer in (part.split("://")[0].lower() for part in path.split("::")):
                if layer in _SETTINGS.storage_options:
                    found[layer] = _SETTINGS.storage_options[layer]
    return found or None


def adopt(options: dict[str, dict[str, Any]] | None) -> None:
    """Takes storage options a pickled deserializer carried (:func:`carried`) for the protocols this process has
    not configured itself."""
    for protocol, values in (options or {}).items():
        _SETTINGS.storage_options.setdefault(protocol, dict(values))


@dataclasses.dataclass(frozen=True)
class FetchStats:
    """What this process fetched from remote storage: ``bytes`` of data, ``requests`` (ranged reads),
    ``retries`` (reads repeated after a transient error), ``checks`` (version checks) and ``ahead`` (of the bytes,
    those fetched ahead of their read: :attr:`RemoteSettings.fetch_ahead`)."""

    bytes: int
    requests: int
    retries: int
    checks: int
    ahead: int


_counts = [0, 0, 0, 0, 0]
_counts_lock = threading.Lock()


def _reset_locks() -> None:  # (a forked child: the locks may have been held by another thread)
    global _counts_lock, _fetcher_lock
    _counts_lock = threading.Lock()
    _fetcher_lock = threading.Lock()


_parent_loop: Any = None  # fsspec's event loop, seen just before a fork
_INHERITED: list[Any] = []  # in a forked child: the parent's filesystems the child's remote objects replaced


def _note_loop() -> None:
    global _parent_loop
    asyn = sys.modules.get("fsspec.asyn")
    _parent_loop = asyn.loop[0] if asyn is not None else None


def _inert_parent_loop() -> None:
    """In a forked child: the parent's fsspec event loop (its thread is gone; fsspec makes the child another) is
    made inert. Its selector is the parent's epoll instance, shared across the fork: when the child drops a
    filesystem of the parent's (a remote object re-opens its filesystem in a child), closing its connections would
    take the parent's sockets out of that epoll, and the parent's next request would wait forever. The loop gets an
    empty selector of its own and counts as stopped, so closing them in the child touches nothing of the parent's
    (as eventlet and others clean the parent's hub out of a child)."""
    global _parent_loop
    loop, _parent_loop = _parent_loop, None
    if loop is not None and hasattr(loop, "_selector"):
        loop._selector = selectors.SelectSelector()  # (no descriptor of its own; empty)
        loop._thread_id = None  # (is_running() is False: fsspec closes sessions without it)


def _reset_in_child() -> None:
    _reset_locks()
    _inert_parent_loop()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_note_loop, after_in_child=_reset_in_child)


def _count(field: int, amount: int = 1) -> None:
    with _counts_lock:
        _counts[field] += amount


def fetch_stats() -> FetchStats:
    """The totals of this process so far (a difference of two calls measures a piece of work)."""
    with _counts_lock:
        return FetchStats(*_counts)


def _fsspec() -> Any:
    try:
        import fsspec
    except ImportError:
        raise ImportError(
            "reading remote data needs fsspec and the filesystem of its protocol: pip install 'cntkio[remote]' "
            "(plus s3fs, gcsfs, adlfs or huggingface_hub for s3://, gs://, az:// or hf://)"
        ) from None
    return fsspec


def filesystem(url: str) -> tuple[Any, str]:
    """The fsspec filesystem for ``url`` (with :func:`configure`'s options for its protocol) and the path in it."""
    fsspec = _fsspec()
    if "::" in url:  # a chain (simplecache::s3://...): each layer's options under its protocol's name
        layers = [part.split("://")[0].lower() for part in url.split("::")]
        options = {layer: _SETTINGS.storage_options[layer] for layer in layers if layer in _SETTINGS.storage_options}
    else:
        match = _URL.match(url)
        options = dict(_SETTINGS.storage_options.get(match.group(1).lower() if match else "", {}))
    try:
        fs, path = fsspec.core.url_to_fs(url, **options)
    except ImportError as error:
        raise ImportError(f"cannot read {url}: {error}") from None
    except ValueError as error:
        raise ConfigError(f"cannot read {url}: {error}") from None
    return fs, path


def expand(pattern: str) -> list[str]:
    """The URLs a remote glob pattern matches, sorted (one URL when it has no wildcard)."""
    if not any(c in pattern for c in "*?["):
        return [pattern]
    fs, path = filesystem(pattern)
    matches = sorted(fs.glob(path))
    return [fs.unstrip_protocol(match) for match in matches]


_VERSION_FIELDS = (
    "VersionId", "generation", "ETag", "etag", "version_id", "Last-Modified", "LastModified", "mtime", "created",
)  # fmt: skip


def _version(info: dict[str, Any]) -> str:
    """What identifies an object's contents besides its size, in the order filesystems report them: version id, GCS
    generation, ETag, then modification time (an HTTP server without ETags)."""
    parts = [f"{name}={info[name]}" for name in _VERSION_FIELDS if info.get(name) not in (None, "", "null")]
    return ";".join(parts)


_NOT_THERE = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)
_CREDENTIALS = {"NoCredentialsError", "PartialCredentialsError", "NoAuthTokenError"}  # (botocore's, by name)
_TRANSIENT_NAMES = ("Connect", "Disconnect", "Timeout")  # in the class names of aiohttp's and botocore's errors


def permanent(error: BaseException, *, found: bool = False) -> bool:
    """Whether ``error`` is final, not retried: bad data (a :class:`FormatError`), missing credentials, or an object
    that is not there or not allowed — unless the "not found" hides a transient failure (fsspec's HTTP filesystem
    reports a failing server so: a 5xx or 429 answer, a connection error or a timeout as its cause), or the object
    was ``found`` before (then it is retried, and its version check tells a deletion)."""
    if isinstance(error, FormatError) or type(error).__name__ in _CREDENTIALS:
        return True
    if not isinstance(error, _NOT_THERE):
        return False
    if found and isinstance(error, FileNotFoundError):
        return False
    cause = error.__cause__
    status = getattr(cause, "status", None)
    if isinstance(status, int):
        return not (status >= 500 or status == 429)
    named = any(name in type(cause).__name__ for name in _TRANSIENT_NAMES)
    return not (named or isinstance(cause, (ConnectionError, TimeoutError)))


def retried(call: Callable[[], T], what: str, *, found: bool = False) -> T:
    """``call()``, called again after a transient error (one not :func:`permanent`) up to the settings' ``retries``
    times with a doubling delay; then an ``OSError`` saying what could not be read (``what``), after how many
    attempts and the last error."""
    delay = _SETTINGS.backoff
    for attempt in range(_SETTINGS.retries + 1):
        try:
            return call()
        except Exception as error:
            if permanent(error, found=found):
                raise
            if attempt == _SETTINGS.retries:  # a transient error (connection, timeout, server error) every time
                raise OSError(
                    f"cannot read {what} after {attempt + 1} attempts: {type(error).__name__}: {error}"
                ) from error
            _count(2)
            time.sleep(delay)
            delay *= 2
    raise AssertionError("unreachable")


def read_object(url: str) -> bytes:
    """The whole object at ``url`` in one read, retried on transient errors (an image a map file names: read whole
    and current at each read, as a local image file is)."""
    fs, path = filesystem(url)
    data: bytes = retried(lambda: fs.cat_file(path), url)
    _count(0, len(data))
    _count(1)
    return data


class RemoteObject:
    """One remote object read by byte range: its URL, ``size`` and ``version`` (read when opened), a staging file
    (``fd``, per process) and the fetches that fill it (:meth:`staged`)."""

    def __init__(self, url: str, kind: str):
        self.url = url
        self._fs, self.path = filesystem(url)
        self._fs_pid = os.getpid()
        info = self._info(opening=True)
        if info.get("type") == "directory":
            raise FormatError(f"{kind} input is a directory, not an object", Location(url, 0))
        self.size = int(info.get("size") or 0)
        self.version = _version(info)
        if not self.version and url not in _UNVERSIONED:
            _UNVERSIONED.add(url)
            logger.warning(
                "%s: the store reports no version (ETag, generation, modification time) of this object: a change "
                "that keeps its size cannot be detected",
                url,
            )
        self._staging: _Staging | None = None
        self._lock = threading.Lock()
        self._lock_pid = os.getpid()

    @property
    def fs(self) -> Any:
        """The fsspec filesystem, made again in a forked child (an async filesystem's event loop and connections
        belong to the process that made them)."""
        if self._fs_pid != os.getpid():
            _INHERITED.append(self._fs)  # (never collected here: closing it would write on the parent's sockets)
            self._fs, _ = filesystem(self.url)
            self._fs_pid = os.getpid()
        return self._fs

    def _info(self, *, opening: bool = False) -> dict[str, Any]:
        """The object's metadata. Not found when ``opening`` is final; once opened, it is retried like any error
        (fsspec's HTTP filesystem reports a failing server as not found)."""
        _count(3)
        with contextlib.suppress(Exception):
            self.fs.invalidate_cache(self.path)
        result: dict[str, Any] = retried(lambda: self.fs.info(self.path), f"metadata of {self.url}", found=not opening)
        return result

    # --- identity ---------------------------------------------------------------------------------------------
    def identity_number(self) -> int:
        """The version as a number (63 bits of its SHA-256), for the columns local files keep inodes in."""
        return int.from_bytes(hashlib.sha256(self.version.encode()).digest()[:8], "little") >> 1

    def check_unchanged(self, since: str) -> None:
        """Raises a :class:`FormatError` naming the URL and what changed when the object's version or size is not
        what it was when opened (one metadata request)."""
        info = self._info()
        size, version = int(info.get("size") or 0), _version(info)
        changes = []
        if version != self.version:
            changes.append(f"another version ({self.version or '?'} -> {version or '?'})")
        if size != self.size:
            changes.append(f"size {self.size} -> {size} bytes")
        if changes:
            raise FormatError(
                f"the object changed since it was {since} ({'; '.join(changes)}); reopen it to read the new contents",
                Location(self.url, min(size, self.size)),
            )

    # --- staging ----------------------------------------------------------------------------------------------
    @property
    def fd(self) -> int:
        """The staging file's descriptor in this process (a forked child gets its own staging file)."""
        return self._stage_file().fd

    def _guard(self) -> threading.Lock:
        """The object's lock, made again in a forked child (another thread may have held it at the fork)."""
        if self._lock_pid != os.getpid():
            self._lock, self._lock_pid = threading.Lock(), os.getpid()
        return self._lock

    def _stage_file(self) -> _Staging:
        with self._guard():
            if self._staging is None:
                self._staging = _Staging(self.size)
            elif self._staging.pid != os.getpid():  # a forked child: a staging file of its own, under the number
                inherited = self._staging.fd  # the parent's had (native readers may keep the number: CbfFile)
                self._staging = _Staging(self.size)
                if inherited >= 0:
                    os.dup2(self._staging.fd, inherited)  # (closes the inherited descriptor)
                    os.close(self._staging.fd)
                    self._staging.fd = inherited
            return self._staging

    def staged(self, ranges: list[tuple[int, int]]) -> contextlib.AbstractContextManager[None]:
        """Fetches the byte ranges ``[start, end)`` into the staging file (those no other read holds ready) and
        releases them when the block ends. The caller checks the object unchanged after reading them
        (:meth:`check_unchanged`), as it checks a local file."""
        return staged_together([(self, ranges)])

    def prefetch(self, ranges: list[tuple[int, int]]) -> None:
        """Starts fetching the byte ranges into the staging file in the background, for a read coming soon (a chunk
        the reader has queued): their parts go to this process's ``concurrency`` fetch threads, in the order asked,
        so the parse threads parse while the next chunks arrive. The read takes the bytes over when it ends
        (:meth:`staged`); a read that comes before the fetch started fetches them itself; a fetch that fails leaves
        them to the read, which reports the error."""
        if not _SETTINGS.fetch_ahead:
            return
        staging = self._stage_file()
        held = staging.hold_ahead(self.spans(ranges), _SETTINGS.part_bytes)
        if held is None:
            return
        token, pieces = held
        parts = _parts(self, staging, pieces)
        for i, part in enumerate(parts):
            try:
                _fetcher().submit(_fetch_ahead, part, token)
            except RuntimeError:  # (the pool was replaced meanwhile, or the interpreter is exiting: not fetched)
                for _ in parts[i:]:
                    staging.end_ahead_part(token, False)
                break

    def spans(self, ranges: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
        """``ranges`` within the object, merged (:func:`_merged`)."""
        return _merged([(max(0, int(a)), min(self.size, int(b))) for a, b in ranges])

    def cancel_prefetch(self, ranges: list[tuple[int, int]]) -> None:
        """The read :meth:`prefetch` announced for ``ranges`` will not come: what was fetched ahead within them is
        released, what is queued is not fetched."""
        with self._guard():
            staging = self._staging if self._staging is not None and self._staging.pid == os.getpid() else None
        if staging is not None:
            staging.drop_ahead(self.spans(ranges))

    def close(self) -> None:
        with self._guard():
            if self._staging is not None and self._staging.pid == os.getpid():
                self._staging.close()
            self._staging = None


class _Staging:
    """The staging file of one object in one process, and the ranges reads hold in it: a range is fetched unless a
    ready one covers it, and released (its blocks freed) once no held range overlaps it."""

    def __init__(self, size: int):
        directory = _where()
        os.makedirs(directory, exist_ok=True)
        self.fd, path = tempfile.mkstemp(prefix="object-", dir=directory)
        os.unlink(path)  # gone with the last descriptor
        os.ftruncate(self.fd, size)  # sparse: no block is written until fetched
        self.pid = os.getpid()
        self.punch = True  # (False once the filesystem refused to free a range)
        self._lock = threading.Lock()
        self._held: dict[int, tuple[list[tuple[int, int]], bool]] = {}  # token -> (spans, ready)
        self._ahead: dict[int, _Ahead] = {}  # of the tokens: those fetched ahead of their read (prefetch)
        self._next = 0

    def hold(self, spans: list[tuple[int, int]]) -> int:
        with self._lock:
            self._next += 1
            self._held[self._next] = (spans, False)
            return self._next

    def mark_ready(self, token: int) -> None:
        with self._lock:
            self._held[token] = (self._held[token][0], True)

    # --- ranges fetched ahead of their read (RemoteObject.prefetch) --------------------------------------------
    def hold_ahead(self, spans: list[tuple[int, int]], step: int) -> tuple[int, list[tuple[int, int]]] | None:
        """Holds the pieces of ``spans`` no other range holds (ready, being fetched, or being read) for a fetch ahead
        of their read in parts of ``step`` bytes: (its token, the pieces), or None when every byte is held."""
        with self._lock:
            others = [s for spans_, _ in self._held.values() for s in spans_]
            pieces = [piece for span in spans for piece in _subtract(span, others)]
            if not pieces:
                return None
            self._next += 1
            self._held[self._next] = (pieces, False)
            self._ahead[self._next] = _Ahead(sum(-(-(b - a) // step) for a, b in pieces))
            return self._next, pieces

    def start_ahead(self, token: int) -> bool:
        """Whether a part of the fetch ahead ``token`` is to run (False: a read took it over, the file closed, or
        another part failed)."""
        with self._lock:
            ahead = self._ahead.get(token)
            if ahead is None or ahead.cancelled or ahead.failed or self.fd < 0:
                return False
            ahead.started = True
            return True

    def end_ahead_part(self, token: int, fetched: bool) -> None:
        """A part of the fetch ahead ``token`` ended (``fetched`` or not); after the last, its spans are ready for
        their read, or let go if a part was not fetched."""
        with self._lock:
            ahead = self._ahead.get(token)
            if ahead is None:  # (taken over by a read before any part started)
                return
            ahead.left -= 1
            ahead.failed |= not fetched
            if ahead.left:
                return
            dropped = ahead.failed or ahead.cancelled  # (cancelled while running: its read will not come)
            if dropped:
                del self._ahead[token]
        if dropped:
            self.release(token)
        else:
            self.mark_ready(token)
        ahead.done.set()

    def await_ahead(self, spans: list[tuple[int, int]]) -> None:
        """Before a read of ``spans``: fetches ahead overlapping them that have not started are taken over (the read
        fetches their bytes itself), those running are waited for."""
        running = []
        with self._lock:
            for token, ahead in list(self._ahead.items()):
                if ahead.done.is_set() or not _overlap(self._held[token][0], spans):
                    continue
                if ahead.started:
                    running.append(ahead.done)
                else:
                    self._cancel_queued(token, ahead)
        for done in running:
            done.wait()

    def _cancel_queued(self, token: int, ahead: _Ahead) -> None:
        """Forgets a fetch ahead none of whose parts started (the lock is held): nothing was fetched into it."""
        ahead.cancelled = True
        del self._ahead[token]
        del self._held[token]
        ahead.done.set()

    def drop_ahead(self, spans: list[tuple[int, int]]) -> None:
        """The fetches ahead lying within ``spans`` are done with: a read of them took them over, or their read will
        not come (the reader dropped their chunk). Those queued never run, those running are let go when they end,
        those fetched are released."""
        fetched = []
        with self._lock:
            for token, ahead in list(self._ahead.items()):
                if any(_subtract(span, spans) for span in self._held[token][0]):
                    continue
                if ahead.done.is_set():
                    del self._ahead[token]
                    fetched.append(token)
                elif ahead.started:
                    ahead.cancelled = True
                else:
                    self._cancel_queued(token, ahead)
        for token in fetched:
            self.release(token)

    def missing(self, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """The pieces of ``spans`` no ready range holds."""
        with self._lock:
            ready = [s for spans_, done in self._held.values() if done for s in spans_]
        return [piece for span in spans for piece in _subtract(span, ready)]

    def write(self, offset: int, data: bytes) -> None:
        view = memoryview(data)
        while view:
            done = os.pwrite(self.fd, view, offset)
            view, offset = view[done:], offset + done

    def release(self, token: int) -> None:
        with self._lock:
            spans, _ = self._held.pop(token)
            others = [s for spans_, _ in self._held.values() for s in spans_]
            free = [self._whole_blocks(piece, others) for span in spans for piece in _subtract(span, others)]
            if self.fd >= 0 and self.punch:
                for a, b in free:
                    try:
                        _native.release_range(self.fd, a, b - a)
                    except RuntimeError as error:  # (a filesystem that cannot free ranges: the blocks stay)
                        logger.warning("staging file in %s: %s; its space is kept until it closes", _where(), error)
                        self.punch = False
                        break

    def _whole_blocks(self, piece: tuple[int, int], others: list[tuple[int, int]]) -> tuple[int, int]:
        """``piece`` widened to whole blocks of the staging file where no range of ``others`` lies in the widening
        (a hole punched in part of a block zeroes it but keeps it allocated)."""
        a, b = piece
        start, end = a - a % STAGING_BLOCK, -(-b // STAGING_BLOCK) * STAGING_BLOCK  # (past the end: the last block)
        if start < a and _overlap([(start, a)], others):
            start = a
        if end > b and _overlap([(b, end)], others):
            end = b
        return start, end

    def close(self) -> None:
        with self._lock:  # fetches ahead: those queued never run, those running are waited for (they write to fd)
            for ahead in self._ahead.values():
                ahead.cancelled = True
            running = [ahead.done for ahead in self._ahead.values() if ahead.started]
        for done in running:
            done.wait()
        with self._lock:
            if self.fd >= 0:
                os.close(self.fd)
                self.fd = -1

    def __del__(self) -> None:  # (an object dropped without close: its staging file goes with it)
        if getattr(self, "fd", -1) >= 0 and self.pid == os.getpid():
            os.close(self.fd)
            self.fd = -1


@contextlib.contextmanager
def staged_together(requests: Sequence[tuple[RemoteObject, list[tuple[int, int]]]]) -> Iterator[None]:
    """:meth:`RemoteObject.staged` for several objects at once (a chunk of HTK features in many files): their
    missing ranges fetched together, ``concurrency`` parts at a time whatever object they belong to."""
    held: list[tuple[_Staging, int, list[tuple[int, int]]]] = []
    try:
        parts: list[_Part] = []
        for owner, ranges in requests:
            staging = owner._stage_file()
            spans = owner.spans(ranges)
            held.append((staging, staging.hold(spans), spans))
            staging.await_ahead(spans)
            parts += _parts(owner, staging, staging.missing(spans))
        batch = _SETTINGS.concurrency
        for first in range(0, len(parts), batch):  # (at most `concurrency` parts in memory; each batch written)
            _fetch_parts(parts[first : first + batch])
        for staging, token, _ in held:
            staging.mark_ready(token)
        yield
    finally:
        for staging, token, spans in held:
            staging.drop_ahead(spans)  # (the fetches ahead this read took over)
            staging.release(token)


@dataclasses.dataclass
class _Ahead:
    """A fetch ahead of its read: ``left`` parts to fetch; ``started`` (a part did), ``failed`` (a part was not
    fetched), ``cancelled`` (taken over by the read, or the file closed), ``done`` (fetched or let go)."""

    left: int
    started: bool = False
    failed: bool = False
    cancelled: bool = False
    done: threading.Event = dataclasses.field(default_factory=threading.Event)


def _fetch_ahead(part: _Part, token: int) -> None:
    """Fetches a part of a fetch ahead (:meth:`RemoteObject.prefetch`) on a fetch thread, once, without retries: a
    part not fetched leaves the bytes to the read, which fetches them again and reports what fails."""
    staging = part.staging
    if not staging.start_ahead(token):
        staging.end_ahead_part(token, False)
        return
    fetched = False
    try:
        data = part.owner.fs.cat_file(part.owner.path, start=part.start, end=part.end)
        if len(data) == part.end - part.start:
            staging.write(part.start, data)
            _count(0, len(data))
            _count(1)
            _count(4, len(data))
            fetched = True
    except Exception as error:
        logger.debug("%s: fetching bytes [%d, %d) ahead failed: %s", part.owner.url, part.start, part.end, error)
    finally:
        staging.end_ahead_part(token, fetched)


_FETCHER: tuple[tuple[int, int], concurrent.futures.ThreadPoolExecutor] | None = None
_fetcher_lock = threading.Lock()


def _fetcher() -> concurrent.futures.ThreadPoolExecutor:
    """This process's fetch threads, ``concurrency`` of them (a forked child makes its own; a new setting, new
    threads, the old ones ending once their queued parts are done)."""
    global _FETCHER
    with _fetcher_lock:
        owner = (os.getpid(), _SETTINGS.concurrency)
        if _FETCHER is None or _FETCHER[0] != owner:
            if _FETCHER is not None and _FETCHER[0][0] == owner[0]:
                _FETCHER[1].shutdown(wait=False)
            pool = concurrent.futures.ThreadPoolExecutor(_SETTINGS.concurrency, thread_name_prefix="cntkio-fetch")
            _FETCHER = (owner, pool)
        return _FETCHER[1]


def _overlap(spans: list[tuple[int, int]], others: list[tuple[int, int]]) -> bool:
    return any(a < d and c < b for a, b in spans for c, d in others)


@dataclasses.dataclass(frozen=True)
class _Part:
    """Bytes ``[start, end)`` of an object to fetch into its staging file."""

    owner: RemoteObject
    staging: _Staging
    start: int
    end: int


def _parts(owner: RemoteObject, staging: _Staging, spans: list[tuple[int, int]]) -> list[_Part]:
    """``spans`` of ``owner`` cut into parts of ``part_bytes``."""
    step = _SETTINGS.part_bytes
    return [_Part(owner, staging, a, min(b, a + step)) for a, b in spans for a in range(a, b, step)]


def _fetch_parts(parts: list[_Part]) -> None:
    """Fetches ``parts`` concurrently (one ``cat_ranges`` per filesystem), retrying those that fail."""
    pending = parts
    delay = _SETTINGS.backoff
    for attempt in range(_SETTINGS.retries + 1):
        failed: list[_Part] = []
        last: BaseException | None = None
        groups: dict[int, list[_Part]] = {}
        for part in pending:
            groups.setdefault(id(part.owner.fs), []).append(part)
        for group in groups.values():
            results = group[0].owner.fs.cat_ranges(
                [p.owner.path for p in group], [p.start for p in group], [p.end for p in group], on_error="return"
            )
            for part, data in zip(group, results):
                if isinstance(data, BaseException):
                    if isinstance(data, FormatError) or type(data).__name__ in _CREDENTIALS:
                        raise data
                    if isinstance(data, _NOT_THERE) and permanent(data):
                        where = f"{part.owner.url} bytes [{part.start}, {part.end})"
                        raise type(data)(f"cannot read {where}: {data}") from data
                    failed.append(part)
                    last = data
                    continue
                _count(0, len(data))
                _count(1)
                if len(data) != part.end - part.start:
                    part.owner.check_unchanged("indexed")
                    raise FormatError(
                        f"the store returned {len(data)} bytes for a range of {part.end - part.start} (a server "
                        "without ranged reads, or an object shorter than when it was opened)",
                        Location(part.owner.url, part.start + len(data)),
                    )
                part.staging.write(part.start, data)
        if not failed:
            return
        for owner in {id(p.owner): p.owner for p in failed}.values():
            owner.check_unchanged("indexed")  # (a range past a shortened object fails: the change is the error)
        if attempt == _SETTINGS.retries:
            part = failed[0]
            raise OSError(
                f"cannot read {part.owner.url} bytes [{part.start}, {part.end}) after {attempt + 1} attempts: "
                f"{type(last).__name__}: {last}"
            ) from last
        _count(2, len(failed))
        time.sleep(delay)
        delay *= 2
        pending = failed


STAGING_BLOCK = 4096  # the filesystem block a released range is widened to (where nothing else is held)
MERGE_GAP = 4096  # ranges this close are fetched as one (the gap's bytes too): the payloads of a Base64 chunk


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Non-empty ``spans`` sorted, with those that overlap or lie within :data:`MERGE_GAP` bytes of each other
    joined."""
    out: list[tuple[int, int]] = []
    for a, b in sorted(span for span in spans if span[1] > span[0]):
        if out and a - out[-1][1] <= MERGE_GAP:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _where() -> str:
    """The folder of the staging files."""
    return os.path.join(_SETTINGS.cache_dir or default_cache_dir(), "staging")


def _subtract(span: tuple[int, int], others: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The parts of ``span`` no span of ``others`` covers."""
    pieces = [span]
    for a, b in others:
        pieces = [p for x, y in pieces for p in ((x, min(y, a)), (max(x, b), y)) if p[1] > p[0]]
        if not pieces:
            break
    return pieces
