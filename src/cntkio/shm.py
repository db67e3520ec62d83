"""Files in shared memory (``/dev/shm``) that the processes of one job map: loader workers and the main process.

Every name starts with ``cntkio-<pid>-`` where ``pid`` is the job's main process, so that what a killed job left
behind is found and removed by the next one (:func:`remove_stale`). Space is allocated when a file is created
(``posix_fallocate``), so a full ``/dev/shm`` (64 MiB in a default Docker container) is an ``OSError`` there and
then — never a ``SIGBUS`` when a mapped page is first touched.
"""

from __future__ import annotations

import mmap
import os
import shutil
import time
from pathlib import Path

SHM_DIR = Path("/dev/shm")
PREFIX = "cntkio-"


def available() -> bool:
    """Whether shared-memory files can be made here (Linux)."""
    return SHM_DIR.is_dir() and os.access(SHM_DIR, os.W_OK | os.X_OK)


def job_name(owner_pid: int, token: str) -> str:
    """The name prefix of one job's files (``owner_pid``: its main process)."""
    return f"{PREFIX}{owner_pid}-{token}"


def create(path: str, size: int) -> mmap.mmap:
    """A new file of ``size`` bytes (allocated now; raises ``FileExistsError`` if it exists), mapped read-write."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.posix_fallocate(fd, 0, max(size, 1))
        return mmap.mmap(fd, max(size, 1))
    except BaseException:
        os.unlink(path)
        raise
    finally:
        os.close(fd)


def open_mapped(path: str, *, writable: bool = False, populate: bool = False) -> mmap.mmap:
    """An existing file, mapped whole (``populate``: its pages mapped now, at once, rather than one fault each)."""
    fd = os.open(path, os.O_RDWR if writable else os.O_RDONLY)
    try:
        prot = mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0)
        flags = mmap.MAP_SHARED | (getattr(mmap, "MAP_POPULATE", 0) if populate else 0)
        return mmap.mmap(fd, 0, flags=flags, prot=prot)
    finally:
        os.close(fd)


def unlink(path: str) -> None:
    """Removes a file or a directory tree if it is there."""
    try:
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)
    except FileNotFoundError:
        pass


def remove_job(owner_pid: int, token: str) -> None:
    """Removes every file of one job."""
    if not available():
        return
    name = job_name(owner_pid, token)
    for entry in os.scandir(SHM_DIR):
        if entry.name.startswith(name):
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
    sharing ``/dev/shm`` looks gone too: its young files are left alone, and losing an older one costs it a parse)."""
    if not available():
        return
    old = time.time() - STALE_SECONDS
    for entry in os.scandir(SHM_DIR):
        if not entry.name.startswith(PREFIX):
            continue
        pid = entry.name[len(PREFIX) :].split("-", 1)[0]
        try:
            stale = pid.isdigit() and not alive(int(pid)) and entry.stat().st_mtime < old
        except FileNotFoundError:
            continue
        if stale:
            unlink(entry.path)
