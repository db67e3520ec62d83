"""A data file a deserializer keeps open and reads by offset (``pread``), checked for in-place changes."""

from __future__ import annotations

import os
import stat
from typing import Any

from ..errors import FormatError, Location


class DataFile:
    """An open regular file: ``fd``, ``size`` and its identity (device, inode, size, modification time).

    FIFOs, devices and directories are refused (data is read by offset); an empty file is an error unless
    ``allow_empty``. A file replaced or deleted while open keeps being read as it was; one rewritten in place is
    detected by :meth:`check_unchanged`.
    """

    def __init__(self, path: str, kind: str, *, allow_empty: bool = False):
        self.path = path
        try:
            # O_NONBLOCK: opening a FIFO must not wait for a writer (it is then refused below)
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0))
        except OSError as e:
            raise FileNotFoundError(f"cannot open {kind} file '{path}': {e.strerror}") from e
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            os.close(fd)
            what = (
                "a FIFO" if stat.S_ISFIFO(info.st_mode)
                else "a character device" if stat.S_ISCHR(info.st_mode)
                else "a directory" if stat.S_ISDIR(info.st_mode)
                else "a socket" if stat.S_ISSOCK(info.st_mode)
                else "a block device" if stat.S_ISBLK(info.st_mode)
                else "not a regular file"
            )  # fmt: skip
            raise FormatError(f"input is {what}, not a regular file; {kind} is read by offset", Location(path, 0))
        if info.st_size == 0 and not allow_empty:
            os.close(fd)
            raise FormatError("input file is empty", Location(path, 0, 1, 1))
        self.fd = fd
        self.size = info.st_size
        self.identity = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)

    def check_unchanged(self, since: str) -> None:
        """Raises if the file's size or modification time changed (it was rewritten in place)."""
        if self.fd < 0:
            raise ValueError(f"{self.path}: the deserializer is closed")
        info = os.fstat(self.fd)
        if (info.st_size, info.st_mtime_ns) != self.identity[2:]:
            raise FormatError(
                f"the file changed since it was {since} (size {self.identity[2]} -> {info.st_size} bytes or a new "
                "modification time); reopen it to read the new contents",
                Location(self.path, min(info.st_size, self.identity[2])),
            )

    def fingerprint(self) -> list[Any]:
        """Name, size and modification time: what identifies the data in a checkpoint."""
        return [os.path.basename(self.path), self.identity[2], self.identity[3]]

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


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
        return (reopen, (type(self), args, kwargs, identities(self.data_files)))


def identities(files: list[DataFile]) -> list[tuple[int, int]]:
    """Sizes and modification times of files, as :func:`reopen` checks them."""
    return [(f.identity[2], f.identity[3]) for f in files]


def reopen(cls: Any, args: tuple[Any, ...], kwargs: dict[str, Any], expected: list[tuple[int, int]]) -> Any:
    """Unpickles a file deserializer (one with ``data_files``): opens (and indexes) its files again, refusing
    any that changed since it was pickled (other data under the same name)."""
    reader = cls(*args, **kwargs)
    for file, identity in zip(reader.data_files, expected):
        if (file.identity[2], file.identity[3]) != tuple(identity):
            reader.close()
            raise FormatError(
                "the file changed since the deserializer was pickled; build a new one to read the new contents",
                Location(file.path, 0),
            )
    return reader


def rebuild_unchanged(cls: Any, args: tuple[Any, ...], kwargs: dict[str, Any], fingerprint: list[Any]) -> Any:
    """Unpickles a deserializer built from its arguments: builds it again (reading its files), refusing it when
    its :meth:`fingerprint` differs from the pickled one (the files changed meanwhile)."""
    reader = cls(*args, **kwargs)
    if reader.fingerprint() != fingerprint:
        close = getattr(reader, "close", None)
        if close is not None:
            close()
        raise FormatError(
            "the data changed since the deserializer was pickled; build a new one to read the new contents",
            Location(reader.source_name, 0),
        )
    return reader
