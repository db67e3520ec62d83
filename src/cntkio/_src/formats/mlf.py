"""HTK master label files (MLF) and state lists, parsed natively into compact label runs.

Labels are kept as runs of states per utterance (never one value per frame): entry ``i`` has the runs
``run_offsets[i]:run_offsets[i + 1]``, each a ``uint16`` state id and a ``uint32`` frame count (>= 1).
Every label line of at least one frame is a run of its own: consecutive lines of the same state are not
merged, so a run's first frame is a label line's first frame (a phone boundary). Runs of a kept entry are
contiguous and start at frame 0, so a run's first frame is the sum of the counts before it in its entry
(``first_frames()`` computes them). Memory: 6 bytes per run and 24 bytes per entry (run offset, length,
key offset) plus the key's UTF-8 bytes.

The grammar is spec/htk-and-mlf.md §2.1 and the state list §2.2. Every check CNTK makes when a chunk is
loaded is made here, while the index is built. ``mlfFileList`` files (one MLF path per line) are read by
`read_mlf_file_list`.
"""

from __future__ import annotations

import codecs
import os
import re
from dataclasses import dataclass, field

import numpy as np

from cntkio import _native
from cntkio._src.common.errors import ConfigError, FormatError, Location, MaxErrorsExceeded
from cntkio._src.common.keys import TextKeys, duplicate_keys, join_keys
from cntkio._src.formats.data_file import DataFile, open_data_file, read_listing, require_regular_file

MAX_REPORTED_KEYS = 10
MAX_DIM = 65535


@dataclass(frozen=True)
class InvalidEntry:
    """An MLF entry left out of the index: its file, key (the header text when it has none, ``""`` for a
    stray ``.`` line), the 1-based line the problem is on, the reason, the byte offset of the line (or of the
    problem) and the column of the problem when it is within the line."""

    file: str
    key: str
    line: int
    reason: str
    offset: int = 0
    column: int = 0  # 1-based column of the problem, 0 when the whole line is meant

    def __str__(self) -> str:
        return f"{self.file}:{self.line} (utterance {self.key!r}): {self.reason}"

    def location(self) -> Location:
        """Where the problem is: the MLF file, byte offset, line and the utterance key (None for a stray ``.``)."""
        return Location(self.file, self.offset, self.line, self.column or None, sequence_key=self.key or None)

    def error(self) -> FormatError:
        """The entry as the `FormatError` raised when it is not tolerated (``max_errors``)."""
        return FormatError(f"invalid MLF entry: {self.reason}", self.location())


@dataclass
class MlfIndex:
    """The labels of every kept MLF entry, as columns (see the module docstring).

    ``invalid`` lists every entry left out (non-contiguous ranges, a first range not at frame 0, no
    label lines, zero frames, an unquoted header, an entry not ended by ``.`` or cut by the end of its
    file); ``duplicates`` counts entries whose key
    an earlier entry (in the same or an earlier file) already had — the first is kept, later ones are
    dropped — and ``duplicate_keys`` holds the first few of those keys.
    """

    keys: TextKeys
    run_offsets: np.ndarray  # int64, entries + 1
    run_states: np.ndarray  # uint16, runs
    run_counts: np.ndarray  # uint32, runs
    lengths: np.ndarray  # int64 (int32 once a deserializer indexed it), entries (frames)
    dim: int
    files: list[str]
    invalid: list[InvalidEntry] = field(default_factory=list)
    duplicates: int = 0
    duplicate_keys: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.lengths)

    @property
    def num_runs(self) -> int:
        return len(self.run_states)

    @property
    def nbytes(self) -> int:
        """Bytes of the runs and their offsets (the keys and lengths are the deserializer's index)."""
        return int(self.run_offsets.nbytes + self.run_states.nbytes + self.run_counts.nbytes)

    def first_frames(self) -> np.ndarray:
        """The first frame of every run within its entry (int64)."""
        counts = self.run_counts.astype(np.int64)
        ends = np.cumsum(counts)
        starts = ends - counts
        entry_of_run = np.repeat(np.arange(len(self), dtype=np.int64), np.diff(self.run_offsets))
        base = np.concatenate(([0], ends))[self.run_offsets[:-1]]
        first: np.ndarray = starts - base[entry_of_run]
        return first

    def runs(self, entry: int) -> tuple[np.ndarray, np.ndarray]:
        """(state ids, frame counts) of one entry."""
        a, b = int(self.run_offsets[entry]), int(self.run_offsets[entry + 1])
        return self.run_states[a:b], self.run_counts[a:b]

    def report(self) -> str:
        """A one-paragraph summary of what was left out."""
        parts = [f"{len(self)} utterances, {self.num_runs} label runs from {len(self.files)} MLF file(s)"]
        if self.invalid:
            shown = ", ".join(str(e) for e in self.invalid[:MAX_REPORTED_KEYS])
            parts.append(f"{len(self.invalid)} invalid entries skipped (first: {shown})")
        if self.duplicates:
            parts.append(
                f"{self.duplicates} duplicate keys (the first entry kept; first: {', '.join(self.duplicate_keys)})"
            )
        return "; ".join(parts)


def read_state_list(path: str | os.PathLike[str]) -> list[str]:
    """The state names of a state list (``labelMappingFile``, spec §2.2): one name per line, blank lines
    ignored, ``\\r`` and ``\\n`` both line breaks; a name's id is its position among the non-blank lines.
    A leading UTF-8 byte order mark is skipped. A duplicate name or an empty list raises `FormatError` naming the
    file and line."""
    name = os.fspath(path)
    data = read_listing(name, "state list")
    bom = b"\xef\xbb\xbf"
    if data.startswith(bom):  # a UTF-8 byte order mark (Windows editors) is not part of the first name
        data = b"   " + data[3:]  # (spaces keep the byte offsets of errors)
    states: list[str] = []
    seen: dict[str, int] = {}
    # \r, \n and \r\n each end a line (\r\n counts as one line for the line numbers).
    for number, match in enumerate(re.finditer(rb"([^\r\n]*)(?:\r\n|\r|\n|\Z)", data), start=1):
        text = match.group(1).strip()
        if not text:
            continue
        where = Location(name, match.start(), number)
        try:
            state = text.decode("utf-8")
        except UnicodeDecodeError as e:
            raise FormatError(f"state name is not UTF-8 ({e})", where) from None
        if state in seen:
            raise FormatError(f"duplicate state name {state!r} (first on line {seen[state]})", where)
        seen[state] = number
        states.append(state)
    if not states:
        raise FormatError("the state list is empty", Location(name, 0, 1))
    return states


def _parse_one(path: str, states: list[str] | None, dim: int) -> _native.MlfParseResult:
    require_regular_file(path, "MLF file")  # read by its size: a FIFO would hang the open, a device read as empty
    file = open_data_file(path, "MLF", allow_empty=True)  # refuses what is not a regular file once open (no race)
    try:
        with file.staged([(0, file.size)]):  # (a remote object: fetched whole)
            result = _native.mlf_parse(file.fd, file.size, states, dim)
        if file.is_remote:
            file.check_unchanged("read")
    except UnicodeDecodeError as error:  # a message quoting a line that is not UTF-8 (or cut inside a character)
        raise _undecodable(file, error) from None
    finally:
        file.close()
    fatal = result.fatal
    if fatal is not None:
        message, offset, line, column, key = fatal
        text_key = key.decode("utf-8", "backslashreplace") if key else None
        raise FormatError(
            message, Location(path, int(offset), int(line) or None, int(column) or None, sequence_key=text_key)
        )
    return result


def _contents(file: DataFile) -> bytes:
    """The bytes of an open file, read by offset (what a file cut meanwhile still holds)."""
    return file.read_ranges([(0, file.size)])[0]


def _undecodable(file: DataFile, error: UnicodeDecodeError) -> FormatError:
    """The error the parser reported about a line it could not give as text — its message quotes bytes that are not
    UTF-8, or that it cut inside a character — as a :class:`FormatError` at that line: the quoted text is looked for
    in the file, at the start of a line or of a field. (The parse stops there, whatever ``max_errors`` is.)"""
    message = bytes(error.object)
    first, last = message.find(b"'"), message.rfind(b"'")
    if not 0 <= first < last:
        return FormatError(message.decode("utf-8", "backslashreplace"), Location(file.path, 0))
    quoted = message[first + 1 : last]
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:  # valid UTF-8 but for a character the parser cut at the end of its quote?
        shown = decoder.decode(quoted) + ("..." if decoder.getstate()[0] else "")
        utf8 = True
    except UnicodeDecodeError:
        shown, utf8 = quoted.decode("utf-8", "backslashreplace"), False
    before, after = (part.decode("utf-8", "backslashreplace") for part in (message[:first], message[last + 1 :]))
    location = Location(file.path, 0)
    data = _contents(file)  # (read, never mapped: a file cut meanwhile would be SIGBUS, not an error)
    found = data.find(quoted)
    while found > 0 and data[found - 1 : found] not in b" \t\r\n":
        found = data.find(quoted, found + 1)
    offset = found if found >= 0 else data.find(quoted)
    if offset >= 0:
        line_start = data.rfind(b"\n", 0, offset) + 1
        line_end = data.find(b"\n", offset)
        try:
            data[line_start : line_end if line_end >= 0 else len(data)].decode("utf-8")
        except UnicodeDecodeError:
            utf8 = False
        line = 1 + data.count(b"\n", 0, offset)
        location = Location(file.path, offset, line, offset - line_start + 1)
    if not utf8:
        shown = quoted.decode("utf-8", "backslashreplace")
        after += " (the line is not UTF-8: MLF files are read as UTF-8)"
    return FormatError(f"{before}'{shown}'{after}", location)


def parse_mlf(
    paths: str | os.PathLike[str] | list[str],
    states: list[str] | None,
    dim: int,
    *,
    max_errors: int | None = 0,
) -> MlfIndex:
    """Parses one or several MLF files into one `MlfIndex` (entries in file order, then line order).

    ``states`` is the state list (`read_state_list`); with ``None`` every label line must be
    ``start end name class_id``. ``dim`` is the label dimension (at most 65535, else `ConfigError`). Problems of
    the file itself (no ``#!MLF!#`` line) raise `FormatError` naming the file and line.

    Invalid entries (see `MlfIndex`; also an entry with a bad label line: a state missing from the state list,
    a class id at or above ``dim``, end < start, a malformed line) are left out and listed in
    ``MlfIndex.invalid``. ``max_errors`` bounds them: with ``0`` (the default) the first one raises `FormatError`
    naming the file, line (and column) and utterance; with ``N`` the first ``N`` are skipped and the next raises
    `~cntkio.MaxErrorsExceeded` (raised as soon as the file holding it is parsed); ``None`` tolerates any
    number.

    Duplicate keys (within a file or across files): the first entry is kept, the later ones dropped and
    counted in ``MlfIndex.duplicates`` (their keys, the first few, in ``duplicate_keys``). They are not errors.
    """
    files = [os.fspath(paths)] if isinstance(paths, (str, os.PathLike)) else [os.fspath(p) for p in paths]
    if not files:
        raise ConfigError("no MLF files given")
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or not 0 < int(dim) <= MAX_DIM:
        raise ConfigError(f"dim must be an integer in [1, {MAX_DIM}] (class ids are 16-bit), got {dim!r}")
    dim = int(dim)
    if max_errors is not None:
        max_errors = check_max_errors(max_errors)
    if states is not None:
        states = list(states)  # ids >= dim are fatal only when a label line uses them
    parts = []
    invalid: list[InvalidEntry] = []
    for path in files:
        result = _parse_one(path, states, dim)
        for key, line, offset, reason, column in result.invalid:
            text_key = key.decode("utf-8", "backslashreplace")
            entry = InvalidEntry(path, text_key, int(line), reason, int(offset), int(column))
            if max_errors == 0:
                raise entry.error()
            if max_errors is not None and len(invalid) >= max_errors:
                raise MaxErrorsExceeded(entry.error(), max_errors)
            invalid.append(entry)
        parts.append(result)

    blob = np.concatenate([p.key_blob for p in parts]) if len(parts) > 1 else parts[0].key_blob
    key_offsets = _concat_offsets([p.key_offsets for p in parts])
    run_offsets = _concat_offsets([p.run_offsets for p in parts])
    run_states = _concat([p.run_states for p in parts])
    run_counts = _concat([p.run_counts for p in parts])
    lengths = _concat([p.lengths for p in parts])
    del parts
    index = MlfIndex(
        TextKeys(blob, key_offsets),
        run_offsets,
        run_states,
        run_counts,
        lengths,
        dim,
        files,
        invalid,
    )
    return _drop_duplicates(index)


def check_max_errors(max_errors: object) -> int:
    """``max_errors`` as an int >= 0, else `ConfigError`."""
    if isinstance(max_errors, bool) or not isinstance(max_errors, (int, np.integer)) or max_errors < 0:
        raise ConfigError(f"max_errors must be an integer >= 0, got {max_errors!r}")
    return int(max_errors)


def read_mlf_file_list(path: str | os.PathLike[str]) -> list[str]:
    """The MLF paths of an ``mlfFileList`` file (CNTK's text-file form, spec §2.1): one path per line.

    Line ends may be ``\\n``, ``\\r\\n`` or ``\\r``; whitespace around a path is removed and blank lines are
    skipped. Paths are returned as written: a relative path is *not* made relative to the list file's
    directory (CNTK opened it relative to the working directory). A list naming no path raises `ConfigError`;
    a name that is not UTF-8 raises `FormatError` naming the file and line.
    """
    name = os.fspath(path)
    require_regular_file(name, "MLF file list", pipe=True)
    with open(name, "rb") as f:
        data = f.read()
    if data.startswith(b"\xef\xbb\xbf"):  # a UTF-8 byte order mark
        data = data[3:]
    paths: list[str] = []
    for number, match in enumerate(re.finditer(rb"([^\r\n]*)(?:\r\n|\r|\n|\Z)", data), start=1):
        text = match.group(1).strip()
        if not text:
            continue
        try:
            paths.append(text.decode("utf-8"))
        except UnicodeDecodeError as e:
            raise FormatError(f"MLF path is not UTF-8 ({e})", Location(name, match.start(), number)) from None
    if not paths:
        raise ConfigError(f"the MLF file list '{name}' names no MLF file")
    return paths


def _concat(arrays: list[np.ndarray]) -> np.ndarray:
    return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)


def _concat_offsets(columns: list[np.ndarray]) -> np.ndarray:
    if len(columns) == 1:
        return columns[0]
    pieces = [columns[0]]
    base = int(columns[0][-1])
    for c in columns[1:]:
        pieces.append(c[1:] + base)
        base += int(c[-1])
    return np.concatenate(pieces)


def _drop_duplicates(index: MlfIndex) -> MlfIndex:
    """Keeps the first entry of every key and drops the later ones (counted, the first few keys kept).

    Natively: ``duplicate_keys`` (one hash table over the keys) says whether there is any duplicate; it gives
    the count but only the first few duplicate rows, so when there are some, a join of the keys to themselves
    gives every row the first row holding its key (``match``): row ``i`` is kept when ``match[i] == i``."""
    n = len(index)
    if n < 2:
        return index
    count, _ = duplicate_keys(index.keys, by_text=True)
    if count == 0:
        return index
    match = join_keys(index.keys, index.keys, by_text=True, keep_last=False).match
    keep = match == np.arange(n, dtype=match.dtype)
    del match
    duplicate_rows = np.flatnonzero(~keep)  # as many as `count`: both keep the first row of a key
    index.duplicates = len(duplicate_rows)
    index.duplicate_keys = index.keys.take(duplicate_rows[:MAX_REPORTED_KEYS])
    runs_per_entry = np.diff(index.run_offsets)
    keep_runs = np.repeat(keep, runs_per_entry)
    new_run_offsets = np.zeros(int(keep.sum()) + 1, dtype=np.int64)
    np.cumsum(runs_per_entry[keep], out=new_run_offsets[1:])
    index.keys = index.keys.subset(np.flatnonzero(keep))
    index.run_offsets = new_run_offsets
    index.run_states = index.run_states[keep_runs]
    index.run_counts = index.run_counts[keep_runs]
    index.lengths = index.lengths[keep]
    return index
