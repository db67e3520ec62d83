"""Files in shared memory (``/dev/shm``) that the processes of one job map: loader workers and the main process.

Every name starts with ``cntkio-<pid>-`` where ``pid`` is the job's main process, so that what a killed job left
behind is found and removed by the next one (:func:`remove_stale`). Space is allocated when a file is created
(``posix_fallocate``), so a full ``/dev/shm`` (64 MiB in a default Docker container) is an ``OSError`` there and
then — never a ``SIGBUS`` when a mapped page is first touched.

``/dev/shm`` is shared by every user of the machine, and any of them sees the names in it. What a job keeps there
lives in a directory of its own (:func:`private_directory`: made exclusively, mode 0700, its owner and mode checked
on a descriptor opened without following a symlink) which no other user can enter: nothing another user made is
trusted, files are opened with ``O_NOFOLLOW`` and created with ``O_EXCL``, and a file is mapped only when it is this
user's and no other can write it (:func:`open_mapped`: another user could truncate it under the mapping, and the
next touch of a page would kill the process with ``SIGBUS``). Clean-up removes only this user's entries and follows
no symlink.
"""

from __future__ import annotations

import mmap
import os
import shutil
import stat
import time
from pathlib import Path

from cntkio._src.formats.data_file import file_kind

SHM_DIR = Path("/dev/shm")
PREFIX = "cntkio-"


class NotPrivate(PermissionError):
    """A shared-memory directory or file that another user made or could change: not trusted."""


def available() -> bool:
    """Whether shared-memory files can be made here (Linux), in a directory where no other user can remove or rename
    this user's entries (sticky, like ``/dev/shm``, or writable by its owner alone)."""
    try:
        status = os.stat(SHM_DIR)
    except OSError:
        return False
    return stat.S_ISDIR(status.st_mode) and os.access(SHM_DIR, os.W_OK | os.X_OK) and _guards_entries(status)


def _guards_entries(status: os.stat_result) -> bool:
    """Whether a directory keeps other users from removing or renaming the entries of this user."""
    return bool(status.st_mode & stat.S_ISVTX) or (status.st_uid in (0, os.geteuid()) and not status.st_mode & 0o022)


def job_name(owner_pid: int, token: str) -> str:
    """The name prefix of one job's files (``owner_pid``: its main process)."""
    return f"{PREFIX}{owner_pid}-{token}"


def private_directory(path: str | Path) -> Path:
    """The directory ``path``, for this user's processes alone: made now (exclusively, mode 0700), or made before by a
    process of this user. Raises :class:`NotPrivate` (naming what it found) for anything else at ``path`` — another
    user's directory, a symlink, a file, a directory others may enter — and for a parent directory where another
    user could rename it away."""
    path = Path(path)
    parent = os.stat(path.parent)
    if not _guards_entries(parent):
        raise NotPrivate(f"{path.parent}: other users may rename or remove entries in it (owner uid "
                         f"{parent.st_uid}, mode {stat.S_IMODE(parent.st_mode):04o}, not sticky)")  # fmt: skip
    try:
        os.mkdir(path, 0o700)
        made = True
    except FileExistsError:
        made = False
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as error:  # a symlink, not a directory, or (EACCES) another user's directory
        if isinstance(error, FileNotFoundError):  # (removed meanwhile)
            raise
        found = os.lstat(path)
        raise NotPrivate(f"{path}: {file_kind(found.st_mode)} of uid {found.st_uid} ({error.strerror}), not a private "
                         f"directory of uid {os.geteuid()}: not trusted") from None  # fmt: skip
    try:
        if made:
            os.fchmod(fd, 0o700)  # (the umask may have taken bits)
        status = os.fstat(fd)
    finally:
        os.close(fd)
    if status.st_uid != os.geteuid() or status.st_mode & 0o077:  # (group or others may enter it)
        raise NotPrivate(f"{path}: a directory of uid {status.st_uid} with mode {stat.S_IMODE(status.st_mode):04o}, "
                         f"not a private directory of uid {os.geteuid()} (mode 0700): not trusted")  # fmt: skip
    return path


def job_directory(job: str) -> Path:
    """The private directory of the job named ``job`` (:func:`job_name`), made by the first of its processes to ask
    (see :func:`private_directory`); :func:`remove_job` removes it."""
    return private_directory(SHM_DIR / job)


def create(path: str, size: int) -> mmap.mmap:
    """A new file of ``size`` bytes (allocated now; raises ``FileExistsError`` if it exists), mapped read-write."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.posix_fallocate(fd, 0, max(size, 1))
        return mmap.mmap(fd, max(size, 1))
    except BaseException:
        os.unlink(path)
        raise
    finally:
        os.close(fd)


def open_mapped(path: str, *, writable: bool = False, populate: bool = False) -> mmap.mmap:
    """An existing file, mapped whole (``populate``: its pages mapped now, at once, rather than one fault each).
    Raises :class:`NotPrivate` unless it is a regular file of this user that no other user may write (a symlink is
    not followed)."""
    fd = os.open(path, (os.O_RDWR if writable else os.O_RDONLY) | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode) or status.st_uid != os.geteuid() or status.st_mode & 0o022:
            raise NotPrivate(f"{path}: not a file only uid {os.geteuid()} may write (owner uid {status.st_uid}, "
                             f"mode {stat.S_IMODE(status.st_mode):04o}): not mapped")  # fmt: skip
        prot = mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0)
        flags = mmap.MAP_SHARED | (getattr(mmap, "MAP_POPULATE", 0) if populate else 0)
        return mmap.mmap(fd, 0, flags=flags, prot=prot)
    finally:
        os.close(fd)


def unlink(path: str) -> None:
    """Removes a file or a directory tree if it is there (a symlink itself, never what it points to)."""
    try:
        if stat.S_ISDIR(os.lstat(path).st_mode):
            shutil.rmtree(path, ignore_errors=True)  # (fd-based on Linux: follows no symlink inside either)
        else:
            os.unlink(path)
    except FileNotFoundError:
        pass


def _own_entries(prefix: str) -> list[tuple[os.DirEntry[str], os.stat_result]]:
    """The entries of :data:`SHM_DIR` whose names start with ``prefix`` and which this user owns (another user's are
    never touched: root could remove them, and must not), with their own status (not a symlink's target's)."""
    if not available():
        return []
    entries = []
    for entry in os.scandir(SHM_DIR):
        if entry.name.startswith(prefix):
            try:
                status = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            if status.st_uid == os.geteuid():
                entries.append((entry, status))
    return entries


def remove_job(owner_pid: int, token: str) -> None:
    """Removes every file of one job (its directory and the files beside it)."""
    for entry, _ in _own_entries(job_name(owner_pid, token)):
        unlink(entry.path)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


STALE_SECONDS = 60.0


def remove_stale() -> None:
    """Removes the files of jobs whose main process is gone, once a minute old (a process of another PID namespace
    sharing ``/dev/shm`` looks gone too: its young files are left alone, and losing an older one costs it a parse).
    A directory is as young as the youngest entry in it."""
    old = time.time() - STALE_SECONDS
    for entry, status in _own_entries(PREFIX):
        pid = entry.name[len(PREFIX) :].split("-", 1)[0]
        if pid.isdigit() and not alive(int(pid)) and _newest(entry.path, status) < old:
            unlink(entry.path)


def _newest(path: str, status: os.stat_result) -> float:
    """The latest modification time of ``path`` and (a directory) of everything in it; symlinks are not followed."""
    newest = status.st_mtime
    if stat.S_ISDIR(status.st_mode):
        try:
            with os.scandir(path) as entries:
                for entry in entries:
                    try:
                        newest = max(newest, _newest(entry.path, entry.stat(follow_symlinks=False)))
                    except FileNotFoundError:
                        continue
        except OSError:
            pass
    return newest
