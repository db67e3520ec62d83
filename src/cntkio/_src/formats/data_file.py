"""A data file a deserializer keeps open and reads by offset (``pread``), checked for in-place changes;
:class:`FileIdentity`, what every file-backed format (and the index cache) compares to tell a file's bytes
from what they were when it was indexed; and :func:`replacement_file`, where the writers write a file before
renaming it into place."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import sys
import tempfile
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, TypeVar

from cntkio._src.common.errors import ConfigError, FormatError, Location
from cntkio._src.formats import remote

T = TypeVar("T")
REMOTE_DEVICE = (1 << 63) - 1  # a remote object's device; its inode and mtime are a number of its version


def _umask() -> int:
    try:  # Linux 4.7+: read, not set (setting it is process-wide, so racy with other threads)
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def replacement_file(directory: str | os.PathLike[str], prefix: str, suffix: str = "") -> tuple[int, str]:
    """A new, empty file in ``directory`` (a descriptor open for writing, and its path) that a writer fills and then
    renames over its target (``os.replace``), so a reader never sees half a file. It has the mode ``open()`` would
    give a new file (0o666 less the umask: readable by the others a data file is shared with), not ``mkstemp``'s
    0o600."""
    descriptor, path = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=directory)
    if hasattr(os, "fchmod"):  # (not on Windows before 3.13, where modes are not POSIX's anyway)
        with contextlib.suppress(OSError):  # a filesystem without modes: keep what it gave
            os.fchmod(descriptor, 0o666 & ~_umask())
    return descriptor, path


class FileIdentity(NamedTuple):
    """What tells a file's bytes apart from what they were: device, inode, size, modification time and change
    time (ctime), in nanoseconds, from one ``stat``.

    The modification time alone does not: anyone can put it back (``os.utime``, ``touch -d``, ``rsync
    --inplace -t``) after rewriting the file with the same size. The change time is set by the kernel on every
    write (and chmod, chown, rename or link) and cannot be set back; the inode changes when the file is replaced
    or copied. So, as git's index does, a file is taken as unchanged only when all of them are: a copy or a
    restored file counts as changed (its index is built again once), never the other way round. (Times have the
    filesystem's granularity: where it is coarse, a rewrite within the clock tick of the change just before the
    file was opened leaves no trace — git's "racy" case; kernels with multigrain timestamps, 6.13+, leave none.)
    """

    device: int
    inode: int
    size: int
    mtime_ns: int
    ctime_ns: int

    @classmethod
    def of(cls, info: os.stat_result) -> FileIdentity:
        return cls(info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)

    def changes(self, now: FileIdentity) -> list[str]:
        """What differs in ``now`` (empty when nothing does), in words, for error messages."""
        found = []
        if REMOTE_DEVICE in (self.device, now.device):
            if (now.device, now.inode) != (self.device, self.inode):
                found.append("another version of the object (its ETag, generation or version id changed)")
            if now.size != self.size:
                found.append(f"size {self.size} -> {now.size} bytes")
            return found
        if (now.device, now.inode) != (self.device, self.inode):
            found.append(f"another file (inode {self.inode} -> {now.inode}: replaced, copied or restored)")
        if now.size != self.size:
            found.append(f"size {self.size} -> {now.size} bytes")
        if now.mtime_ns != self.mtime_ns:
            found.append("a new modification time")
        if now.ctime_ns != self.ctime_ns:
            found.append(
                "a new change time (ctime)" if len(found) > 0 else
                "a new change time (ctime) with the same size and modification time: rewritten in place with the "
                "modification time put back, or its permissions, owner or name changed"
            )  # fmt: skip
        return found


def check_open_file(fd: int, path: str, identity: FileIdentity, since: str) -> None:
    """Raises a :class:`FormatError` naming ``path`` and what changed when the file open as ``fd`` is no longer
    as ``identity`` says (one ``fstat``); see :meth:`DataFile.check_unchanged`."""
    info = os.fstat(fd)
    now = FileIdentity.of(info)
    if now == identity or (info.st_nlink == 0 and now[:4] == identity[:4]):
        return
    raise FormatError(
        f"the file changed since it was {since} ({'; '.join(identity.changes(now))}); reopen it to read the new "
        "contents",
        Location(path, min(info.st_size, identity.size)),
    )


def file_kind(mode: int) -> str:
    """What a file of ``st_mode`` ``mode`` (from ``stat`` or ``lstat``) is, for messages: "a FIFO", "a symlink", ..."""
    return (
        "a regular file" if stat.S_ISREG(mode)
        else "a symlink" if stat.S_ISLNK(mode)
        else "a FIFO" if stat.S_ISFIFO(mode)
        else "a character device" if stat.S_ISCHR(mode)
        else "a directory" if stat.S_ISDIR(mode)
        else "a socket" if stat.S_ISSOCK(mode)
        else "a block device" if stat.S_ISBLK(mode)
        else "not a regular file"
    )  # fmt: skip


def checked_name(path: str, what: str, location: Location | None = None) -> str:
    """``path``, refused when no file can have that name — it holds a NUL byte, which the OS calls refuse with a bare
    ``ValueError`` — with a :class:`FormatError` naming ``what`` and ``path`` at ``location`` (where the data named
    it), or at the file itself. Every name a deserializer is given or finds in its data passes here before the OS
    opens it (:func:`require_regular_file`, :class:`DataFile`)."""
    if "\x00" in path:
        raise FormatError(
            f"{what} {path!r}: a file name cannot hold a NUL byte (\\x00)",
            location or Location(path.replace("\x00", "\\x00"), 0),
        )
    return path


def require_regular_file(path: str, what: str, location: Location | None = None, *, pipe: bool = False) -> None:
    """Refuses ``path`` unless it is a regular file (or, with ``pipe``, a pipe: a listing given as ``<(...)`` is read
    once), from one ``stat`` before it is opened: opening a FIFO waits for a writer, and a device such as
    ``/dev/zero`` never ends. A :class:`FormatError` names ``what`` and ``path`` at ``location`` (where the data
    named it), or at the file itself; so does a name no file can have (:func:`checked_name`). A path that cannot be
    stat'ed is left to the open that follows."""
    try:
        mode = os.stat(checked_name(path, what, location)).st_mode
    except OSError:
        return
    if stat.S_ISREG(mode) or (pipe and stat.S_ISFIFO(mode)):
        return
    raise FormatError(
        f"{what} {path!r} is {file_kind(mode)}, not a regular file{' or a pipe' if pipe else ''}",
        location or Location(path, 0),
    )


def open_data_file(path: str, kind: str, *, allow_empty: bool = False) -> DataFile:
    """The data file ``path`` open for reading by offset: a :class:`DataFile`, or a :class:`RemoteDataFile` when
    ``path`` is a URL of remote storage (:func:`~cntkio._src.formats.remote.is_remote`)."""
    if remote.is_remote(path):
        return RemoteDataFile(path, kind, allow_empty=allow_empty)
    return DataFile(path, kind, allow_empty=allow_empty)


def refuse_remote(path: str, what: str) -> None:
    """Raises a :class:`ConfigError` when ``path`` is remote: ``what`` is read from local files only."""
    if remote.is_remote(path):
        raise ConfigError(
            f"{path}: {what} are read from local files only (remote storage is read for CTF, CBF, HTK features with "
            "their SCP and MLF files, image maps and Base64 image files); copy the data to a local disk"
        )


class DataFile:
    """An open regular file: ``fd``, ``size`` and its :class:`FileIdentity` when it was opened (``identity``).

    FIFOs, devices and directories are refused (data is read by offset); an empty file is an error unless
    ``allow_empty``. A file replaced or deleted while open keeps being read as it was (the open file still holds
    the indexed bytes); one rewritten in place is detected by :meth:`check_unchanged`, even with its size and
    modification time kept.
    """

    def __init__(self, path: str, kind: str, *, allow_empty: bool = False):
        self.path = path
        self._fd = -1
        refuse_remote(path, f"{kind} files")
        checked_name(path, f"{kind} file")
        try:
            # O_NONBLOCK: opening a FIFO must not wait for a writer (it is then refused below)
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0))
        except OSError as e:  # the same kind of error (missing, no permission, too many open files), named
            limit = " (the open-file limit, `ulimit -n`: a sharded corpus keeps each file open)"
            error = type(e)(f"cannot open {kind} file '{path}': {e.strerror}{limit if e.errno == errno.EMFILE else ''}")
            error.errno = e.errno  # (not strerror or filename: str(error) would drop the message)
            raise error from e
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            os.close(fd)
            what = file_kind(info.st_mode)
            raise FormatError(f"input is {what}, not a regular file; {kind} is read by offset", Location(path, 0))
        if info.st_size == 0 and not allow_empty:
            os.close(fd)
            raise FormatError("input file is empty", Location(path, 0, 1, 1))
        self._fd = fd
        self.size = info.st_size
        self.identity = FileIdentity.of(info)

    @property
    def fd(self) -> int:
        """The descriptor to read by offset (-1 once closed)."""
        return self._fd

    @property
    def cache_name(self) -> str:
        """What an index cache is named after: the absolute path (a URL for remote data)."""
        return os.path.abspath(self.path)

    @property
    def is_remote(self) -> bool:
        return False

    def staged(self, ranges: Sequence[tuple[int, int]]) -> contextlib.AbstractContextManager[None]:
        """Makes the byte ranges ``[start, end)`` readable through ``fd`` while the block runs (a local file's
        are; a remote object's are fetched, :class:`RemoteDataFile`)."""
        del ranges
        return contextlib.nullcontext()

    def prefetch(self, ranges: Sequence[tuple[int, int]]) -> None:
        """A hint that the byte ranges ``[start, end)`` will be read soon (a local file: nothing to do; a remote
        object starts fetching them, :class:`RemoteDataFile`)."""
        del ranges

    def cancel_prefetch(self, ranges: Sequence[tuple[int, int]]) -> None:
        """The read :meth:`prefetch` announced will not come (what a remote object fetched for it is released)."""
        del ranges

    def read_ranges(self, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """The bytes of each range ``[start, end)`` (fewer at the end of the file)."""
        self.require_open()
        with self.staged(ranges):
            return [_pread_all(self.fd, end - start, start) for start, end in ranges]

    def require_open(self) -> None:
        """Raises ``ValueError`` once the file is closed (before a read, which would otherwise fail on a bad fd)."""
        if self.fd < 0:
            raise ValueError(f"{self.path}: the deserializer is closed")

    def check_unchanged(self, since: str) -> None:
        """Raises a :class:`FormatError` naming the file and what changed if it is not as it was opened: its size,
        modification or change time (one ``fstat``). Called once per chunk read, after the read (a change made
        before or during it is seen). A file deleted or replaced (renamed over) while open is still read as it
        was: the change time its unlinking set, with the size and modification time kept, is not a change.
        """
        self.require_open()
        check_open_file(self.fd, self.path, self.identity, since)

    def fingerprint(self) -> list[Any]:
        """Name, size and modification time: what a pickled deserializer checks on this machine (checkpoints identify
        the data by content instead: :mod:`cntkio._src.formats.identity`)."""
        return [os.path.basename(self.path), self.identity.size, self.identity.mtime_ns]

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class RemoteDataFile(DataFile):
    """A remote object (any fsspec URL) read by offset like a :class:`DataFile`: ``fd`` is its staging file, in
    which :meth:`staged` fetches the ranges a read needs (:class:`~cntkio._src.formats.remote.RemoteObject`). Its
    ``identity`` holds its version (ETag, generation or version id) as a number in place of the inode, and
    :data:`REMOTE_DEVICE`; :meth:`check_unchanged` asks the store for the version and size (one request)."""

    def __init__(self, path: str, kind: str, *, allow_empty: bool = False):  # (no super: no local file to open)
        self.path = path
        self._closed = False
        self.object = remote.RemoteObject(checked_name(path, f"{kind} file"), kind)
        self.size = self.object.size
        if self.size == 0 and not allow_empty:
            raise FormatError("input object is empty", Location(path, 0, 1, 1))
        version = self.object.identity_number()
        self.identity = FileIdentity(REMOTE_DEVICE, version, self.size, version, 0)

    @property
    def fd(self) -> int:
        return -1 if self._closed else self.object.fd

    @property
    def cache_name(self) -> str:
        return self.path

    @property
    def is_remote(self) -> bool:
        return True

    def require_open(self) -> None:
        if self._closed:
            raise ValueError(f"{self.path}: the deserializer is closed")

    def staged(self, ranges: Sequence[tuple[int, int]]) -> contextlib.AbstractContextManager[None]:
        self.require_open()
        return self.object.staged(list(ranges))

    def prefetch(self, ranges: Sequence[tuple[int, int]]) -> None:
        if not self._closed:
            self.object.prefetch(list(ranges))

    def cancel_prefetch(self, ranges: Sequence[tuple[int, int]]) -> None:
        if not self._closed:
            self.object.cancel_prefetch(list(ranges))

    def check_unchanged(self, since: str) -> None:
        self.require_open()
        self.object.check_unchanged(since)

    def read_ranges(self, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        result = super().read_ranges(ranges)
        self.check_unchanged("indexed")
        return result

    def fingerprint(self) -> list[Any]:
        return [os.path.basename(self.path), self.size, self.object.version]

    def close(self) -> None:
        if not getattr(self, "_closed", True):
            self._closed = True
            self.object.close()


def _pread_all(fd: int, count: int, offset: int) -> bytes:
    """``count`` bytes at ``offset`` (fewer only at the end of the file)."""
    parts = []
    while count > 0:
        part = os.pread(fd, count, offset)
        if not part:
            break
        parts.append(part)
        count -= len(part)
        offset += len(part)
    return b"".join(parts)


class FileBacked:
    """For deserializers reading :class:`DataFile` s (``_files``), built from ``_arguments`` (args, kwargs):
    closing, and pickling as those arguments — the copy reopens (and indexes) the files again and refuses any
    that changed meanwhile (other data under the same name)."""

    _files: list[DataFile]
    _arguments: tuple[tuple[Any, ...], dict[str, Any]]

    @property
    def data_files(self) -> list[DataFile]:
        return list(getattr(self, "_files", []))

    def close(self) -> None:
        """Closes the files (reading a chunk afterwards raises)."""
        for data_file in self.data_files:
            data_file.close()

    def __del__(self) -> None:
        self.close()

    def __reduce__(self) -> tuple[Any, ...]:
        args, kwargs = self._arguments
        carried = remote.carried([f.path for f in self.data_files])
        return (reopen, (type(self), args, kwargs, identities(self.data_files), carried))


def identities(files: list[DataFile]) -> list[FileIdentity]:
    """The files' identities when they were opened, as :func:`reopen` checks them."""
    return [f.identity for f in files]


def changes_since_pickled(then: FileIdentity, now: FileIdentity) -> list[str]:
    """What differs between a file as a pickled deserializer had it open (``then``) and as its copy opened it
    (``now``): everything, change time included, when it is the same file (device and inode); size and
    modification time when it is another one (a copy where the deserializer was unpickled, say another node's)."""
    if (now.device, now.inode) != (then.device, then.inode) and REMOTE_DEVICE not in (then.device, now.device):
        now = now._replace(device=then.device, inode=then.inode, ctime_ns=then.ctime_ns)
    return then.changes(now)  # (a remote object's version is its inode: another version is a change)


def reopen(
    cls: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    expected: list[FileIdentity],
    carried: dict[str, dict[str, Any]] | None = None,
) -> Any:
    """Unpickles a file deserializer (one with ``data_files``): opens (and indexes) its files again, refusing
    any that changed since it was pickled (other data under the same name). ``carried``: the storage options of
    its remote data (:func:`~cntkio._src.formats.remote.carried`)."""
    remote.adopt(carried)
    reader = cls(*args, **kwargs)
    for file, identity in zip(reader.data_files, expected):
        changes = changes_since_pickled(FileIdentity(*identity), file.identity)
        if changes:
            reader.close()
            raise FormatError(
                f"the file changed since the deserializer was pickled ({'; '.join(changes)}); build a new one to "
                "read the new contents",
                Location(file.path, 0),
            )
    return reader


def read_whole(paths: Sequence[str], parse: Callable[[], T]) -> tuple[T, list[FileIdentity | None]]:
    """``parse()``, which reads the files ``paths`` whole once (SCP, MLF, image map files), with the identity of
    each regular one (None for a pipe), the same before and after it: a file changed while it was parsed is an
    error, so the identities are those of what was parsed — what a pickled copy, which parses the files again,
    compares (:func:`rebuild_unchanged`)."""
    before = [_regular_identity(path) for path in paths]
    result = parse()
    for path, then in zip(paths, before):
        now = _regular_identity(path)
        if then is not None and now != then:
            changes = then.changes(now) if now is not None else ["no longer a regular file"]
            raise FormatError(f"the file changed while it was read ({'; '.join(changes)})", Location(path, 0))
    return result, before


def read_listing(path: str, what: str) -> bytes:
    """The whole of a small file read whole (a state list, a list of files): a local regular file or pipe, or a
    remote object."""
    if remote.is_remote(path):
        return read_head(path, sys.maxsize, what)
    require_regular_file(path, what, pipe=True)  # a device (/dev/zero) would be read without end
    with open(path, "rb") as file:
        return file.read()


def read_head(path: str, count: int, what: str = "data") -> bytes:
    """The first ``count`` bytes (fewer when it is shorter) of a local file or a remote object (``what``: how errors
    name it)."""
    if remote.is_remote(path):
        head = RemoteDataFile(path, what, allow_empty=True)
        try:
            return head.read_ranges([(0, min(count, head.size))])[0]
        finally:
            head.close()
    with open(path, "rb") as file:
        return file.read(count)


def read_identity(path: str) -> FileIdentity:
    """The identity of a remote object now (one metadata request)."""
    found = RemoteDataFile(path, "listing", allow_empty=True)
    found.close()
    return found.identity


def _regular_identity(path: str) -> FileIdentity | None:
    if remote.is_remote(path):
        return read_identity(path)
    try:
        info = os.stat(path)
    except (OSError, ValueError):  # (a NUL in the name: refused, named, by the parse)
        return None
    return FileIdentity.of(info) if stat.S_ISREG(info.st_mode) else None


def pickled_as_arguments(reader: Any) -> tuple[Any, ...]:
    """What a deserializer built from its arguments (``_arguments``) pickles as: :func:`rebuild_unchanged` of them,
    with its :meth:`fingerprint`, the identities of the files it read whole (``parsed_files``) and the storage
    options of its remote data."""
    args, kwargs = reader._arguments
    parsed = getattr(reader, "parsed_files", [])
    carried = remote.carried([path for path, _ in parsed] + [getattr(reader, "filename", "")])
    return (rebuild_unchanged, (type(reader), args, kwargs, reader.fingerprint(), [i for _, i in parsed], carried))


def rebuild_unchanged(
    cls: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    fingerprint: list[Any],
    parsed: list[FileIdentity | None] | None = None,
    carried: dict[str, dict[str, Any]] | None = None,
) -> Any:
    """Unpickles a deserializer built from its arguments: builds it again (reading its files), refusing it when
    its :meth:`fingerprint` differs from the pickled one, or when a file it read whole (its ``parsed_files``:
    paths and identities, from :func:`read_whole`) is not as the pickled one read it (``parsed``; the change time
    too for the same file, see :func:`changes_since_pickled`): the files changed meanwhile."""
    remote.adopt(carried)
    reader = cls(*args, **kwargs)
    changes: list[str] = []
    where = reader.source_name
    if reader.fingerprint() != fingerprint:
        changes = ["its files' names, sizes or modification times"]
    for (path, now), then in zip(getattr(reader, "parsed_files", []), parsed or []):
        if then is not None and now is not None and not changes:
            changes, where = changes_since_pickled(FileIdentity(*then), now), path
    if changes:
        reader.close()
        raise FormatError(
            f"the data changed since the deserializer was pickled ({'; '.join(changes)}); build a new one to read "
            "the new contents",
            Location(where, 0),
        )
    return reader
