"""SCP (script) files of HTK features, parsed into columns (spec §1.2).

An entry is ``logical=physical[start,end]`` (inclusive, 0-based frames), ``logical=physical`` or a bare
``physical``. The key is the logical name up to its last ``.``. Nothing per entry is kept as a Python object:
keys are :class:`TextKeys`, paths an int32 id into a list of distinct paths, ranges int64 columns.
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import FormatError, Location
from ..keys import TextKeys

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
    duplicates: ScpDuplicates | None

    def __len__(self) -> int:
        return len(self.path_ids)

    def location(self, i: int) -> Location:
        """Where entry ``i`` was written (for error messages)."""
        return Location(self.sources[int(self.source_ids[i])], 0, int(self.lines[i]), 1, sequence_key=self.keys[i])


def _normalize_prefix(prefix: str | None) -> str | None:
    if not prefix:
        return None
    return prefix.replace("\\", "/").rstrip("/") + "/"


def _scp_directory(scp: str) -> str:
    return os.path.dirname(scp) or "."


def parse_scp(
    scp: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], *, prefix_path: str | None = None
) -> ScpIndex:
    """Parses one SCP file or several (concatenated in order).

    Blank lines are skipped; a trailing ``\\r`` is dropped. Without ``prefix_path`` the first ``...`` of an
    entry becomes the SCP file's directory; with it (backslashes made ``/``, trailing slashes dropped, one ``/``
    added) the prefix goes right after ``=`` (in front of a bare path). A malformed range is a
    :class:`FormatError` naming the SCP file, line and column. Every entry of a key seen more than once is
    dropped, and a warning gives the count (also in ``duplicates``).

    Example::

        index = parse_scp(["train1.scp", "train2.scp"], prefix_path="/data/feats")
        index.keys[0], index.paths[index.path_ids[0]], index.starts[0], index.ends[0]
    """
    files = [os.fspath(scp)] if isinstance(scp, (str, os.PathLike)) else [os.fspath(s) for s in scp]
    prefix = _normalize_prefix(prefix_path)
    keys: list[str] = []
    path_ids: list[int] = []
    starts: list[int] = []
    ends: list[int] = []
    source_ids: list[int] = []
    lines: list[int] = []
    path_table: dict[str, int] = {}
    for source_id, name in enumerate(files):
        with open(name, "rb") as file:
            text = file.read().decode("utf-8-sig", "surrogateescape")
        directory = _scp_directory(name)
        count_before = len(keys)
        _parse_text(text, name, prefix, directory, keys, path_table, path_ids, starts, ends, lines)
        source_ids.extend([source_id] * (len(keys) - count_before))

    keep: np.ndarray | None = None
    duplicates = None
    counts = Counter(keys)
    if len(counts) < len(keys):
        repeated = [k for k, c in counts.items() if c > 1]  # Counter keeps first-seen order
        keep = np.fromiter((counts[k] == 1 for k in keys), dtype=bool, count=len(keys))
        duplicates = ScpDuplicates(int(len(keys) - keep.sum()), len(repeated), tuple(repeated[:DUPLICATES_SHOWN]))
        logger.warning("%s: %s", ", ".join(files), duplicates)
        keys = [k for k, kept in zip(keys, keep.tolist()) if kept]
    blob = "".join(keys).encode("utf-8", "surrogateescape")
    lengths = np.fromiter(map(len, keys), dtype=np.int64, count=len(keys))
    if len(blob) != int(lengths.sum()):  # some key is not ASCII: lengths in bytes
        lengths = np.fromiter(
            (len(k.encode("utf-8", "surrogateescape")) for k in keys), dtype=np.int64, count=len(keys)
        )
    offsets = np.zeros(len(keys) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])

    def column(values: list[int], dtype: type) -> np.ndarray:
        array: np.ndarray = np.array(values, dtype=dtype)
        return array if keep is None else array[keep]

    return ScpIndex(
        keys=TextKeys(np.frombuffer(blob, dtype=np.uint8), offsets),
        paths=list(path_table),
        path_ids=column(path_ids, np.int32),
        starts=column(starts, np.int64),
        ends=column(ends, np.int64),
        sources=files,
        source_ids=column(source_ids, np.int32),
        lines=column(lines, np.int32),
        duplicates=duplicates,
    )


def _parse_text(
    text: str,
    name: str,
    prefix: str | None,
    directory: str,
    keys: list[str],
    path_table: dict[str, int],
    path_ids: list[int],
    starts: list[int],
    ends: list[int],
    lines: list[int],
) -> None:
    """Appends the entries of one SCP file's text to the columns (a tight loop: one ``find`` per delimiter)."""
    add_key, add_path, add_start, add_end, add_line = (
        keys.append,
        path_ids.append,
        starts.append,
        ends.append,
        lines.append,
    )
    for number, line in enumerate(text.split("\n"), 1):
        if line.endswith("\r"):
            line = line[:-1]
        if not line or ((line[0] == " " or line[0] == "\t") and line.isspace()):
            continue
        equals = line.find("=")
        bracket = line.find("[", equals + 1)
        if bracket < 0:
            physical = line[equals + 1 :]
            start = end = -1
        else:
            physical = line[equals + 1 : bracket]
            start, end = _parse_range(line, bracket, name, number)
        logical = line[:equals] if equals >= 0 else physical
        if not logical:
            raise FormatError("malformed SCP entry: empty logical name before '='", Location(name, 0, number, 1))
        if not physical:
            raise FormatError("malformed SCP entry: no physical path", Location(name, 0, number, equals + 2))
        if prefix is not None:
            if equals < 0:
                logical = prefix + logical
            physical = prefix + physical
        else:
            dots = line.find("...")
            if dots >= 0:
                if equals < 0 or dots > equals:
                    physical = physical.replace("...", directory, 1)
                if equals < 0 or dots < equals:
                    logical = logical.replace("...", directory, 1)
        dot = logical.rfind(".")
        add_key(logical if dot < 0 else logical[:dot])
        path_id = path_table.get(physical)
        if path_id is None:
            path_id = path_table[physical] = len(path_table)
        add_path(path_id)
        add_start(start)
        add_end(end)
        add_line(number)


def _parse_range(line: str, bracket: int, name: str, number: int) -> tuple[int, int]:
    """``[start,end]`` at ``bracket`` to the end of the line."""
    comma = line.find(",", bracket + 1)
    if comma < 0:
        raise FormatError(
            "malformed path: the range has no ',' (expected [start,end])", Location(name, 0, number, bracket + 1)
        )
    close = line.find("]", comma + 1)
    if close < 0:
        raise FormatError("malformed path: the range has no ']'", Location(name, 0, number, len(line) + 1))
    if close != len(line) - 1:
        raise FormatError(
            f"malformed path: unexpected {line[close + 1 :]!r} after ']'", Location(name, 0, number, close + 2)
        )
    start_text, end_text = line[bracket + 1 : comma], line[comma + 1 : close]
    if not (start_text.isascii() and start_text.isdigit()) or len(start_text) > 18:
        raise FormatError(
            f"malformed path: range start {start_text!r} is not a frame index", Location(name, 0, number, bracket + 2)
        )
    if not (end_text.isascii() and end_text.isdigit()) or len(end_text) > 18:
        raise FormatError(
            f"malformed path: range end {end_text!r} is not a frame index", Location(name, 0, number, comma + 2)
        )
    start, end = int(start_text), int(end_text)
    if start > end:
        raise FormatError(f"SCP range [{start},{end}]: start > end", Location(name, 0, number, bracket + 1))
    return start, end
