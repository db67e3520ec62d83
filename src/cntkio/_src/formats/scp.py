"""SCP (script) files of HTK features, parsed into columns (spec §1.2).

An entry is ``logical=physical[start,end]`` (inclusive, 0-based frames), ``logical=physical`` or a bare
``physical``. The key is the logical name up to its last ``.``. The files are parsed by the native parser
(src/native/scp.cpp); nothing per entry is kept as a Python object: keys are :class:`TextKeys`, paths an int32 id
into a list of distinct paths, ranges int64 columns.
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from cntkio import _native
from cntkio._src.common.errors import FormatError, Location
from cntkio._src.common.keys import TextKeys
from cntkio._src.formats import remote
from cntkio._src.formats.data_file import open_data_file, require_regular_file

logger = logging.getLogger("cntkio")

DUPLICATES_SHOWN = 5


@dataclass(frozen=True)
class ScpDuplicates:
    """Keys found more than once: every entry holding one was dropped (the first copy too)."""

    entries: int  # entries dropped
    keys: int  # distinct duplicated keys
    first_keys: tuple[str, ...]  # the first few, in SCP order

    def __str__(self) -> str:
        shown = ", ".join(self.first_keys) + (", ..." if self.keys > len(self.first_keys) else "")
        return f"{self.entries} SCP entries with {self.keys} duplicated key(s) dropped: {shown}"


@dataclass(frozen=True)
class ScpIndex:
    """The entries of one or more SCP files, as columns.

    ``keys[i]`` is entry i's key, ``paths[path_ids[i]]`` its physical file, ``starts[i]..ends[i]`` its inclusive
    frame range (-1/-1 for an unranged entry), ``sources[source_ids[i]]`` and ``lines[i]`` (1-based) where it was
    written.
    """

    keys: TextKeys
    paths: list[str]
    path_ids: np.ndarray  # int32
    starts: np.ndarray  # int64
    ends: np.ndarray  # int64
    sources: list[str]
    source_ids: np.ndarray  # int32
    lines: np.ndarray  # int32
    offsets: np.ndarray  # int64, byte offset of each entry's line
    duplicates: ScpDuplicates | None

    def __len__(self) -> int:
        return len(self.path_ids)

    def location(self, i: int) -> Location:
        """Where entry ``i`` was written (for error messages)."""
        source = self.sources[int(self.source_ids[i])]
        return Location(source, int(self.offsets[i]), int(self.lines[i]), 1, sequence_key=self.keys[i])


def _normalize_prefix(prefix: str | None) -> str | None:
    if not prefix:
        return None
    return prefix.replace("\\", "/").rstrip("/") + "/"


def _scp_directory(scp: str) -> str:
    return os.path.dirname(scp) or "."


def _raise_fatal(fatal: Any, name: str) -> None:
    """Raises the SCP parser's fatal error (message, offset, line, column, detail), if any, naming file ``name``."""
    if fatal is not None:
        message, offset, line, column, detail = fatal
        if detail is not None:
            message = message.replace("{}", repr(detail.decode("utf-8", "surrogateescape")), 1)
        raise FormatError(message, Location(name, offset, line, column))


def parse_scp(
    scp: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], *, prefix_path: str | None = None
) -> ScpIndex:
    """Parses one SCP file or several (concatenated in order) with the native parser (``_native.ScpParser``:
    each file read with pread, the GIL released; nothing per entry is done in Python).

    An SCP may also be a pipe (read once). Blank lines (and lines of whitespace only) are skipped; a trailing
    ``\\r`` is dropped; a UTF-8 byte order mark is skipped. Without ``prefix_path`` the first ``...`` of an entry
    becomes the SCP file's directory; with it (backslashes made ``/``, trailing slashes dropped, one ``/`` added)
    the prefix goes right after ``=`` (in front of a bare path). A malformed range is a :class:`FormatError` naming
    the SCP file, byte offset, line and column. A range whose start is after its end is kept as written (``starts[i]
    > ends[i]``): the reader of the features reports it as a bad utterance. Every entry of a key seen more than once
    is dropped, and a warning gives the count (also in ``duplicates``).

    Example::

        index = parse_scp(["train1.scp", "train2.scp"], prefix_path="/data/feats")
        index.keys[0], index.paths[index.path_ids[0]], index.starts[0], index.ends[0]
    """
    files = [os.fspath(scp)] if isinstance(scp, (str, os.PathLike)) else [os.fspath(s) for s in scp]
    prefix = _normalize_prefix(prefix_path)
    parser = _native.ScpParser(None if prefix is None else _encode(prefix))
    for name in files:
        if remote.is_remote(name):  # fetched whole (a listing is read whole)
            listing = open_data_file(name, "SCP", allow_empty=True)
            try:
                with listing.staged([(0, listing.size)]):
                    fatal = parser.add(listing.fd, listing.size, _encode(_scp_directory(name)))
                listing.check_unchanged("read")
            finally:
                listing.close()
            _raise_fatal(fatal, name)
            continue
        require_regular_file(name, "SCP file", pipe=True)  # a device (/dev/zero) would be copied without end
        with open(name, "rb") as file:
            info = os.fstat(file.fileno())
            if stat.S_ISREG(info.st_mode):
                fatal = parser.add(file.fileno(), info.st_size, _encode(_scp_directory(name)))
            else:  # a pipe or FIFO (say `<(grep ... train.scp)`): read once, into an anonymous file
                with tempfile.TemporaryFile() as copy:
                    shutil.copyfileobj(file, copy)
                    copy.flush()
                    fatal = parser.add(copy.fileno(), copy.tell(), _encode(_scp_directory(name)))
        _raise_fatal(fatal, name)
    columns = parser.finish()
    duplicates = None
    if columns.duplicate_keys:
        first_keys = tuple(columns.first_duplicates[:DUPLICATES_SHOWN])
        duplicates = ScpDuplicates(int(columns.duplicate_entries), int(columns.duplicate_keys), first_keys)
        logger.warning("%s: %s", ", ".join(files), duplicates)
    return ScpIndex(
        keys=TextKeys(columns.key_blob, columns.key_offsets),
        paths=columns.paths,
        path_ids=columns.path_ids,
        starts=columns.starts,
        ends=columns.ends,
        sources=files,
        source_ids=columns.source_ids,
        lines=columns.lines,
        offsets=columns.offsets,
        duplicates=duplicates,
    )


def _encode(text: str) -> bytes:
    """A path or prefix as the bytes it stands for (file names that are not UTF-8 round-trip)."""
    return text.encode("utf-8", "surrogateescape")
