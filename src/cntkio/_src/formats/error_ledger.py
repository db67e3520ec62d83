"""The error ledger: the bad records a deserializer counts under ``max_errors``, kept as arrays.

A native reader (CTF) hands over a chunk's errors as columns (:class:`ErrorRows`: byte offset, line, column, kind,
stream, sequence, the bad record's bytes); the ledger counts them with a few array operations per chunk and builds
Python objects and messages only for what is shown: the first :data:`SHOWN` errors are logged one by one at
``trace_level`` 1 (every one at 2), and :meth:`ErrorLedger.report` or :attr:`ErrorLedger.errors` builds the rest on
request. Readers that find their errors one by one in Python (images, HTK, records) count them with
:meth:`ErrorLedger.add`.

What is counted, once: a chunk's errors are counted the first time the chunk is parsed (a chunk's errors are a
function of its bytes, and a file changed in place is refused), so sweeps, evictions and re-reads after a restore do
not count them again; with ``count_repeats`` (CNTK compat) every parse counts. ``max_errors`` stays a hard limit:
the error that goes past it raises :class:`~cntkio._src.common.errors.MaxErrorsExceeded`.

Checkpoints: :meth:`ErrorLedger.get_state` is small and JSON-serialisable: the counts per (chunk, kind, file) — so a
restored source knows which chunks were counted and does not count them again — and the first :data:`RECORDED`
located errors. A restore replaces the ledger with the state: the errors counted after the first
:data:`RECORDED` before the checkpoint are in the counts, no longer in the arrays. :func:`merge_states` joins the
ledgers of several partitions' states (a chunk read by two partitions counts once).

``quarantine`` writes the raw bytes of each bad record (the whole sequence, every line of it) to a file the first
time it is counted, for repair.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from cntkio._src.common.errors import ConfigError, FormatError, Location, MaxErrorsExceeded

logger = logging.getLogger("cntkio")

SHOWN = 10  # errors logged one by one at trace_level 1
RECORDED = 32  # located errors a checkpoint state keeps (the rest are counted)
ANY_CHUNK = -1  # the chunk of errors found outside any chunk (while indexing)


@dataclass(frozen=True)
class ErrorRows:
    """Counted errors as columns, a row per error (what the native readers return: ``_native.CtfErrors``).

    ``sequence`` is the sequence index in the deserializer (-1: none); ``record``/``end`` the bad record's bytes in
    the file; index errors carry their sequence's key text (key i is ``key_blob[key_offsets[i]:key_offsets[i+1]]``).
    """

    offset: np.ndarray
    kind: np.ndarray
    stream: np.ndarray
    sequence: np.ndarray
    line: np.ndarray
    column: np.ndarray
    byte: np.ndarray
    record: np.ndarray
    end: np.ndarray
    key_blob: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.uint8))
    key_offsets: np.ndarray = field(default_factory=lambda: np.zeros(1, dtype=np.int64))

    @classmethod
    def from_native(cls, native: Any, sequence_base: int = 0) -> ErrorRows:
        """The rows of a ``_native.CtfErrors``, sequences shifted by ``sequence_base`` (the chunk's first)."""
        sequence = native.sequence if sequence_base == 0 else native.sequence + sequence_base
        return cls(**{f.name: getattr(native, f.name) for f in fields(cls) if f.name != "sequence"}, sequence=sequence)

    @classmethod
    def from_columns(cls, columns: Mapping[str, np.ndarray]) -> ErrorRows | None:
        """The rows of :meth:`columns` ' form (an index cache); None when a column is missing or they disagree."""
        if any(f.name not in columns for f in fields(cls)):
            return None
        rows = cls(**{f.name: np.asarray(columns[f.name]) for f in fields(cls)})
        n = len(rows)
        if any(len(getattr(rows, f.name)) != n for f in fields(cls) if not f.name.startswith("key_")):
            return None
        if len(rows.key_offsets) not in (1, n + 1) or int(rows.key_offsets[-1]) != len(rows.key_blob):
            return None
        return rows

    def columns(self) -> dict[str, np.ndarray]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def key_text(self, i: int) -> str:
        a, b = int(self.key_offsets[i]), int(self.key_offsets[i + 1])
        return bytes(self.key_blob[a:b]).decode("utf-8", "backslashreplace")

    def __len__(self) -> int:
        return len(self.offset)


Describe = Callable[[ErrorRows, int], FormatError]  # the error of row i (its message built only when shown)


@dataclass(frozen=True)
class _Batch:
    rows: ErrorRows
    start: int
    stop: int
    describe: Describe

    def errors(self) -> Iterator[FormatError]:
        for i in range(self.start, self.stop):
            yield self.describe(self.rows, i)


@dataclass(frozen=True)
class _Single:
    error: FormatError
    kind: str

    def errors(self) -> Iterator[FormatError]:
        yield self.error


@dataclass(frozen=True)
class ErrorArrays:
    """Every counted error a ledger holds, as columns: ``file`` and ``kind`` index ``files`` and ``kinds``."""

    files: list[str]
    kinds: list[str]
    file: np.ndarray
    kind: np.ndarray
    offset: np.ndarray
    line: np.ndarray
    column: np.ndarray
    stream: np.ndarray
    sequence: np.ndarray


@dataclass(frozen=True)
class ErrorReport:
    """What the ledgers of a source counted: ``total``, counts ``by_kind`` and ``by_file``, the first located
    ``errors`` (:class:`~cntkio._src.common.errors.FormatError`), and with ``arrays=True`` every error held, as
    columns."""

    total: int
    by_kind: dict[str, int]
    by_file: dict[str, int]
    errors: list[FormatError]
    arrays: ErrorArrays | None = None

    def __str__(self) -> str:
        if not self.total:
            return "no bad records"
        lines = [f"{self.total} bad record(s) counted"]
        lines += [f"  {kind}: {n}" for kind, n in sorted(self.by_kind.items(), key=lambda item: -item[1])]
        lines += [f"  in {file}: {n}" for file, n in sorted(self.by_file.items(), key=lambda item: -item[1])]
        lines += [f"  {error}" for error in self.errors]
        if len(self.errors) < self.total:
            lines.append(f"  ... {self.total - len(self.errors)} more")
        return "\n".join(lines)


class ErrorLedger:
    """Counts a deserializer's bad records against ``max_errors``; thread-safe (see the module's notes)."""

    def __init__(
        self,
        max_errors: int,
        trace_level: int = 1,
        count_repeats: bool = False,
        file: str = "",
        kind_names: Sequence[str] = (),
        quarantine: str | os.PathLike[str] | None = None,
    ):
        if isinstance(max_errors, bool) or int(max_errors) < 0:
            raise ConfigError(f"max_errors must be >= 0, got {max_errors}")
        self.max_errors = int(max_errors)
        self.trace_level = trace_level
        self.count_repeats = count_repeats
        self.file = file
        self.kind_names = list(kind_names)  # the name of each native kind code
        self.quarantine_path = None if quarantine is None else os.fspath(quarantine)
        self._lock = threading.Lock()
        self._reset()

    def _reset(self) -> None:
        self._count = 0
        self._counts: dict[tuple[int, str, str], int] = {}  # (chunk, kind, file) -> errors counted
        self._chunk_counts: dict[int, int] = {}  # chunk -> errors counted
        self._restored_chunks: frozenset[int] = frozenset()  # chunks counted before the restored checkpoint
        self._entries: list[_Batch | _Single] = []  # what was counted since creation (after a restore: the
        # state's located errors, then what was counted since)
        self._seen: set[Hashable] = set()
        self._quarantined: set[int] = set()  # chunks whose bad records were written to the quarantine file

    @property
    def count(self) -> int:
        """Number of errors counted so far."""
        return self._count

    @property
    def errors(self) -> list[FormatError]:
        """Every counted error held (built now; after a restore, the state's first ones and those counted since)."""
        with self._lock:
            entries = list(self._entries)
        return [error for entry in entries for error in entry.errors()]

    # --------------------------------------------------------------------------------- counting
    def add_rows(
        self,
        chunk: int,
        rows: ErrorRows,
        describe: Describe,
        read_record: Callable[[int, int], bytes] | None = None,
    ) -> None:
        """Counts the errors of chunk ``chunk`` (all of them, found in one parse; ``ANY_CHUNK`` for the index's). A
        chunk's errors are counted once unless ``count_repeats``; ``read_record(start, end)`` gives a bad record's
        bytes for the quarantine file."""
        n = len(rows)
        if n == 0:
            return
        with self._lock:
            start = 0 if self.count_repeats else self._chunk_counts.get(chunk, 0)
            if chunk in self._restored_chunks and not self.count_repeats:
                start = n  # counted before the checkpoint this ledger was restored from
            if start >= n:
                return
            room = self.max_errors - self._count
            stop = min(n, start + max(room, 0))
            first = self._count
            if stop > start:
                self._count_rows(chunk, rows, start, stop)
                self._entries.append(_Batch(rows, start, stop, describe))
            if self.quarantine_path is not None and read_record is not None and chunk not in self._quarantined:
                if stop == n:
                    self._quarantined.add(chunk)
                self._write_quarantine(rows, start, stop, read_record)
        self._show(first, [describe(rows, i) for i in range(start, min(stop, start + self._shown_from(first)))])
        if stop < n:
            raise MaxErrorsExceeded(describe(rows, stop), self.max_errors)
        self._note_quiet(first, stop - start)

    def add(
        self, key: Hashable, make_error: Callable[[], FormatError], kind: str = "bad record", chunk: int = ANY_CHUNK
    ) -> None:
        """Counts one error identified by ``key`` (not again unless ``count_repeats``); ``make_error()`` builds it
        when it is new. ``chunk``: the chunk it was found in (not counted again after a restore; errors found
        outside chunks, ``ANY_CHUNK``, are told apart by their keys alone, which a restore does not keep)."""
        with self._lock:
            restored = chunk != ANY_CHUNK and chunk in self._restored_chunks
            if not self.count_repeats and (key in self._seen or restored):
                return
            error = make_error()
            if self._count >= self.max_errors:
                raise MaxErrorsExceeded(error, self.max_errors)
            self._seen.add(key)
            first = self._count
            self._count += 1
            counted = (chunk, kind, error.location.file)
            self._counts[counted] = self._counts.get(counted, 0) + 1
            self._chunk_counts[chunk] = self._chunk_counts.get(chunk, 0) + 1
            self._entries.append(_Single(error, kind))
        self._show(first, [error][: self._shown_from(first)])
        self._note_quiet(first, 1)

    def add_reported(self, errors: Sequence[FormatError], kind: str) -> None:
        """Counts errors a reader found, tolerated under its own ``max_errors`` and reported itself while indexing
        (an MLF's invalid entries, in one summary): held for :meth:`report`, not logged again."""
        with self._lock:
            for error in errors:
                counted = (ANY_CHUNK, kind, error.location.file)
                self._counts[counted] = self._counts.get(counted, 0) + 1
                self._entries.append(_Single(error, kind))
            self._chunk_counts[ANY_CHUNK] = self._chunk_counts.get(ANY_CHUNK, 0) + len(errors)
            self._count += len(errors)

    def _count_rows(self, chunk: int, rows: ErrorRows, start: int, stop: int) -> None:
        kinds = np.bincount(rows.kind[start:stop])
        for code in np.flatnonzero(kinds).tolist():
            name = self._kind_name(code)
            counted = (chunk, name, self.file)
            self._counts[counted] = self._counts.get(counted, 0) + int(kinds[code])
        self._chunk_counts[chunk] = self._chunk_counts.get(chunk, 0) + stop - start
        self._count += stop - start

    def _kind_name(self, code: int) -> str:
        return self.kind_names[code] if 0 <= code < len(self.kind_names) else str(code)

    def _shown_from(self, first: int) -> int:
        """How many errors counted from number ``first`` on are logged one by one."""
        return 2**62 if self.trace_level >= 2 else max(0, SHOWN - first) if self.trace_level >= 1 else 0

    def _show(self, first: int, shown: list[FormatError]) -> None:
        for number, error in enumerate(shown, first + 1):
            logger.warning("skipped bad record (%d of max_errors=%d): %s", number, self.max_errors, error)

    def _note_quiet(self, first: int, added: int) -> None:
        """The one notice that errors are counted without a message (trace_level 0, or past the shown ones)."""
        if self.trace_level <= 0 and first == 0:
            logger.warning("skipping bad records (max_errors=%d); set trace_level >= 1 to see each", self.max_errors)
        elif self.trace_level == 1 and first <= SHOWN < first + added:
            logger.warning(
                "%s: more than %d bad records: the rest are counted without a message (trace_level=2 shows each; "
                "MinibatchSource.error_report() lists them)", self.file or "reader", SHOWN,
            )  # fmt: skip

    def _write_quarantine(self, rows: ErrorRows, start: int, stop: int, read: Callable[[int, int], bytes]) -> None:
        ranges = np.unique(np.stack([rows.record[start:stop], rows.end[start:stop]], axis=1), axis=0)
        with open(str(self.quarantine_path), "ab") as out:  # opened per bad chunk: no handle left open
            for a, b in ranges.tolist():
                data = read(a, b)
                out.write(data if data.endswith(b"\n") else data + b"\n")

    # --------------------------------------------------------------------------------- reports
    def tally(self) -> tuple[dict[str, int], dict[str, int]]:
        """Counts by kind and by file."""
        by_kind: dict[str, int] = {}
        by_file: dict[str, int] = {}
        with self._lock:
            for (_, kind, file), n in self._counts.items():
                by_kind[kind] = by_kind.get(kind, 0) + n
                by_file[file] = by_file.get(file, 0) + n
        return by_kind, by_file

    def first_errors(self, limit: int) -> list[FormatError]:
        """The first ``limit`` errors held, built now."""
        result: list[FormatError] = []
        with self._lock:
            entries = list(self._entries)
        for entry in entries:
            if len(result) >= limit:
                break
            if isinstance(entry, _Batch):
                stop = min(entry.stop, entry.start + limit - len(result))
                result.extend(entry.describe(entry.rows, i) for i in range(entry.start, stop))
            else:
                result.append(entry.error)
        return result

    def arrays(self) -> ErrorArrays:
        """Every error held as columns (single errors from their fields, batches as they are)."""
        with self._lock:
            entries = list(self._entries)
        files, kinds = [self.file], list(self.kind_names)
        parts: list[tuple[np.ndarray, ...]] = []
        singles = [e for e in entries if isinstance(e, _Single)]
        if singles:
            at = [e.error.location for e in singles]
            parts.append(
                (
                    np.array([_code(files, a.file) for a in at], dtype=np.int32),
                    np.array([_code(kinds, e.kind) for e in singles], dtype=np.int32),
                    np.array([a.offset for a in at], dtype=np.int64),
                    np.array([a.line or 0 for a in at], dtype=np.int64),
                    np.array([a.column or 0 for a in at], dtype=np.int64),
                    np.full(len(singles), -1, dtype=np.int32),
                    np.full(len(singles), -1, dtype=np.int64),
                )
            )
        for entry in entries:
            if isinstance(entry, _Batch):
                r, s = entry.rows, slice(entry.start, entry.stop)
                parts.append(
                    (np.zeros(entry.stop - entry.start, dtype=np.int32), r.kind[s].astype(np.int32), r.offset[s],
                     r.line[s], r.column[s], r.stream[s].astype(np.int32), r.sequence[s])
                )  # fmt: skip
        if not parts:
            parts.append(tuple(np.zeros(0, dtype=np.int32 if k in (0, 1, 5) else np.int64) for k in range(7)))
        return ErrorArrays(files, kinds, *(np.concatenate(column) for column in zip(*parts)))

    # ------------------------------------------------------------------------------ checkpoints
    def get_state(self) -> dict[str, Any]:
        """Counts per (chunk, kind, file) and the first located errors (JSON-serialisable, bounded by the chunks
        with errors, not by the errors)."""
        with self._lock:
            counts = sorted(self._counts.items())
            entries = list(self._entries)
        first: list[tuple[FormatError, str]] = []
        for entry in entries:
            if len(first) >= RECORDED:
                break
            if isinstance(entry, _Batch):
                stop = min(entry.stop, entry.start + RECORDED - len(first))
                first += [(entry.describe(entry.rows, i), self._kind_name(int(entry.rows.kind[i])))
                          for i in range(entry.start, stop)]  # fmt: skip
            else:
                first.append((entry.error, entry.kind))
        kinds = sorted({kind for (_, kind, _), _ in counts} | {kind for _, kind in first})
        files = sorted({file for (_, _, file), _ in counts} | {e.location.file for e, _ in first})
        return {
            "kinds": kinds,
            "files": files,
            "counts": [[chunk, kinds.index(kind), files.index(file), n] for (chunk, kind, file), n in counts],
            "recorded": [_error_to_row(e, files, kinds.index(kind)) for e, kind in first],
        }

    def check_restorable(self, state: Mapping[str, Any], chunks: int) -> None:
        """Whether a state (checked by :func:`check_state`) fits this ledger of a deserializer with ``chunks``
        chunks: ``ConfigError`` if not."""
        counts = state["counts"]
        if any(chunk >= chunks for chunk, _, _, _ in counts):
            raise ConfigError(f"checkpoint: the error ledger of {self.file or 'a reader'} names a chunk outside it")
        total = sum(n for _, _, _, n in counts)
        if total > self.max_errors:
            raise ConfigError(
                f"checkpoint: the error ledger of {self.file or 'a reader'} counts {total} errors, more than "
                f"max_errors={self.max_errors}"
            )

    def set_state(self, state: Mapping[str, Any], chunks: int) -> None:
        """Replaces the ledger with a state of :meth:`get_state` (checked by :func:`check_state`) of a deserializer
        with ``chunks`` chunks."""
        self.check_restorable(state, chunks)
        counts = state["counts"]
        total = sum(n for _, _, _, n in counts)
        kinds, files = state["kinds"], state["files"]
        restored = [_Single(_row_to_error(row, files), kinds[row[7]]) for row in state["recorded"]]
        with self._lock:
            self._reset()
            for chunk, kind, file, n in counts:
                self._counts[(chunk, kinds[kind], files[file])] = n
                self._chunk_counts[chunk] = self._chunk_counts.get(chunk, 0) + n
            self._count = total
            self._restored_chunks = frozenset(self._chunk_counts)
            self._quarantined = set(self._chunk_counts)
            self._entries = list(restored)


def _error_to_row(error: FormatError, files: list[str], kind: int) -> list[Any]:
    at = error.location
    key = at.sequence_key
    key = key if key is None or (isinstance(key, (int, str)) and not isinstance(key, bool)) else str(key)
    return [files.index(at.file), at.offset, at.line or 0, at.column or 0, key, at.input, error.reason, kind]


def _row_to_error(row: Sequence[Any], files: Sequence[str]) -> FormatError:
    file, offset, line, column, key, stream, reason, _ = row
    return FormatError(reason, Location(files[file], offset, line or None, column or None, key, stream))


def check_state(value: Any) -> dict[str, Any]:
    """A ledger state's structure and types (ranges against the data are checked by :meth:`ErrorLedger.set_state`),
    normalised; ``ConfigError`` naming the first problem."""

    def fail(what: str) -> ConfigError:
        return ConfigError(f"checkpoint: malformed error ledger ({what})")

    def integer(v: Any, low: int, high: int | None = None) -> int:
        if isinstance(v, bool) or not isinstance(v, int) or v < low or (high is not None and v >= high):
            raise fail(f"{v!r} out of range")
        return v

    if not isinstance(value, Mapping) or set(value) != {"kinds", "files", "counts", "recorded"}:
        raise fail("expected kinds, files, counts and recorded")
    kinds, files, counts, recorded = value["kinds"], value["files"], value["counts"], value["recorded"]
    for names in (kinds, files):
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names) or len(set(names)) != len(names):
            raise fail("kinds and files must be lists of distinct strings")
    if not isinstance(counts, list) or not isinstance(recorded, list) or len(recorded) > RECORDED:
        raise fail("counts and recorded must be lists, recorded of at most {RECORDED}")
    checked_counts = []
    for entry in counts:
        if not isinstance(entry, list) or len(entry) != 4:
            raise fail(f"count entry {entry!r}")
        checked_counts.append(
            [integer(entry[0], ANY_CHUNK), integer(entry[1], 0, len(kinds)), integer(entry[2], 0, len(files)),
             integer(entry[3], 1)]
        )  # fmt: skip
    if len({(c, k, f) for c, k, f, _ in checked_counts}) != len(checked_counts):
        raise fail("a (chunk, kind, file) is counted twice")
    checked_rows = []
    for row in recorded:
        if not isinstance(row, list) or len(row) != 8:
            raise fail(f"recorded error {row!r}")
        file, offset, line, column, key, stream, reason, kind = row
        if key is not None and (isinstance(key, bool) or not isinstance(key, (int, str))):
            raise fail(f"sequence key {key!r}")
        if (stream is not None and not isinstance(stream, str)) or not isinstance(reason, str):
            raise fail("input and reason must be strings")
        checked_rows.append(
            [integer(file, 0, len(files)), integer(offset, 0), integer(line, 0), integer(column, 0), key, stream,
             reason, integer(kind, 0, len(kinds))]
        )  # fmt: skip
    return {"kinds": list(kinds), "files": list(files), "counts": checked_counts, "recorded": checked_rows}


def merge_states(states: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One ledger state for the partitions' states of one ledger: a (chunk, kind, file) counted by several
    partitions counts once (the largest count: a chunk's errors are the same wherever it is read); the located
    errors of all, each once, the first :data:`RECORDED`."""
    counts: dict[tuple[int, str, str], int] = {}
    rows: dict[tuple[Any, ...], list[Any]] = {}
    for state in states:
        kinds, files = state["kinds"], state["files"]
        for chunk, kind, file, n in state["counts"]:
            key = (chunk, kinds[kind], files[file])
            counts[key] = max(counts.get(key, 0), n)
        for row in state["recorded"]:
            named = [files[row[0]], *row[1:7], kinds[row[7]]]
            rows.setdefault((named[0], named[1], named[6]), named)
    first = sorted(rows.values(), key=lambda r: (r[0], r[1]))[:RECORDED]
    kinds = sorted({kind for _, kind, _ in counts} | {r[7] for r in first})
    files = sorted({file for _, _, file in counts} | {r[0] for r in first})
    return {
        "kinds": kinds,
        "files": files,
        "counts": [[c, kinds.index(k), files.index(f), n] for (c, k, f), n in sorted(counts.items())],
        "recorded": [[files.index(r[0]), *r[1:7], kinds.index(r[7])] for r in first],
    }


def ledgers_of(deserializers: Sequence[Any]) -> list[tuple[ErrorLedger, Any]]:
    """The ledger of each deserializer (of each shard of a sharded one), with its deserializer, in order."""
    return [pair for deserializer in deserializers for pair in deserializer.ledgers()]


def restored_ledgers(
    ledgers: list[tuple[ErrorLedger, Any]], states: list[dict[str, Any]] | None
) -> list[tuple[tuple[ErrorLedger, Any], dict[str, Any]]]:
    """Each ledger of a source with the state it restores from: a checkpoint without ledgers empties them (it was
    taken before any error was counted); deserializers that show no ledger (wrapped) keep theirs."""
    if not ledgers:
        return []
    if states is None:
        states = [{"kinds": [], "files": [], "counts": [], "recorded": []}] * len(ledgers)
    if len(states) != len(ledgers):
        raise ConfigError(
            f"checkpoint: it holds {len(states)} error ledgers; this source's deserializers have {len(ledgers)}"
        )
    return list(zip(ledgers, states))


def report(ledgers: Sequence[ErrorLedger], limit: int = 20, arrays: bool = False) -> ErrorReport:
    """The :class:`ErrorReport` of several ledgers (the first ``limit`` errors located; every error as columns
    with ``arrays``)."""
    by_kind: dict[str, int] = {}
    by_file: dict[str, int] = {}
    errors: list[FormatError] = []
    for ledger in ledgers:
        kinds, files = ledger.tally()
        for kind, n in kinds.items():
            by_kind[kind] = by_kind.get(kind, 0) + n
        for file, n in files.items():
            by_file[file] = by_file.get(file, 0) + n
        if len(errors) < limit:
            errors += ledger.first_errors(limit - len(errors))
    columns = _concatenate([ledger.arrays() for ledger in ledgers]) if arrays else None
    return ErrorReport(sum(ledger.count for ledger in ledgers), by_kind, by_file, errors, columns)


def _concatenate(parts: list[ErrorArrays]) -> ErrorArrays:
    files: list[str] = []
    kinds: list[str] = []
    columns: dict[str, list[np.ndarray]] = {f.name: [] for f in fields(ErrorArrays)[2:]}
    for part in parts:
        for name, names, target in (("file", part.files, files), ("kind", part.kinds, kinds)):
            mapping = np.array([_code(target, n) for n in names] or [0], dtype=np.int32)
            columns[name].append(mapping[getattr(part, name)])
        for name in ("offset", "line", "column", "stream", "sequence"):
            columns[name].append(getattr(part, name))
    return ErrorArrays(
        files, kinds, **{name: np.concatenate(c) if c else np.zeros(0, dtype=np.int64) for name, c in columns.items()}
    )


def _code(names: list[str], name: str) -> int:
    if name not in names:
        names.append(name)
    return names.index(name)
