"""Infers the streams of a CTF file (alias, dense or sparse, dimension) from one streaming scan.

The file is read in blocks that end at a newline, and each block is analysed with vectorised NumPy
(no Python loop over lines or values), so memory stays bounded by the block size whatever the file size.
A field is ``|name values...`` up to the next ``|`` or newline; ``|#...`` fields are comments. A stream is
sparse when most of its non-empty samples hold ``index:value`` entries. Its dimension is the largest
number of values in one sample (dense) or the largest index seen plus one (sparse), so a sparse stream
whose highest index never occurs in the file is inferred too small (a dimension inferred for a sparse stream is a
lower bound): pass explicit definitions then.

An input seen in only a handful of samples (at most :data:`RARE_SAMPLES`, and at most :data:`RARE_FRACTION` of the
most frequent input's) is not taken for a stream: it is most likely a typo (``|S9`` for ``|S2``), and made a stream
it would be missing from nearly every sequence, which would drop them all. :func:`infer` gives it apart, with the
places it was seen (:attr:`InferredStream.first_seen`), for a report; :func:`infer_streams` leaves it out.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from cntkio._src.common.streams import StreamDef

BLOCK_SIZE = 2 * 1024 * 1024  # small blocks stay in cache: faster than larger ones, and little memory
MAX_ALIAS_BYTES = 128  # longer names are not taken for aliases
MAX_SPARSE_DIM = 2**31 - 1
_INDEX_DIGITS = 10  # enough for any index below MAX_SPARSE_DIM
FIRST_SEEN = 10  # places kept per input (where it was first seen)
RARE_SAMPLES = 10  # an input seen in at most this many samples...
RARE_FRACTION = 0.01  # ...and in at most this fraction of the most frequent input's samples is a likely typo
_PIPE, _NEWLINE, _COLON, _ZERO, _NINE = ord("|"), ord("\n"), ord(":"), ord("0"), ord("9")

Progress = Callable[[int, int], None]  # (bytes done, total bytes)


@dataclass(frozen=True)
class Place:
    """Where a field was seen: byte offset of its ``|``, 1-based line and column (in characters)."""

    offset: int
    line: int
    column: int


@dataclass(frozen=True)
class InferredStream:
    """One stream found in a file. ``samples`` counts the ``|alias`` fields seen; ``first_seen`` are the places of
    the first :data:`FIRST_SEEN` of them. For a sparse stream ``dim`` is a lower bound (the largest index + 1)."""

    alias: str
    is_sparse: bool
    dim: int
    samples: int
    first_seen: tuple[Place, ...] = field(default=(), compare=False)

    def stream_def(self) -> StreamDef:
        """How to read the stream: its alias, dimension and format."""
        return StreamDef(field=self.alias, shape=self.dim, is_sparse=self.is_sparse)


@dataclass(frozen=True)
class Inference:
    """Every input of a file (:attr:`inputs`, in order of first appearance): the :attr:`streams` inferred, and the
    inputs seen too rarely to be streams (:attr:`rare`, likely typos: see the module)."""

    inputs: list[InferredStream]
    sequences: int = 0  # sequences of the file (lines whose id differs from the line before; ids up to 16 bytes)

    @property
    def streams(self) -> list[InferredStream]:
        """The inputs taken for streams."""
        return [s for s in self.inputs if not self.is_rare(s)]

    @property
    def rare(self) -> list[InferredStream]:
        """The inputs seen in only a handful of samples: likely typos, not taken for streams."""
        return [s for s in self.inputs if self.is_rare(s)]

    def is_rare(self, stream: InferredStream) -> bool:
        """Whether ``stream`` is seen in at most :data:`RARE_SAMPLES` samples, :data:`RARE_FRACTION` of the most
        frequent input's, and fewer than half the file's sequences (an input of one sample per sequence — a
        sequence's label — is a stream even where sequences are long and few)."""
        most = max((s.samples for s in self.inputs), default=0)
        return (
            stream.samples <= RARE_SAMPLES
            and stream.samples <= RARE_FRACTION * most
            and 2 * stream.samples < self.sequences
        )

    def similar(self, stream: InferredStream, among: list[tuple[str, bool, int]] | None = None) -> str | None:
        """The stream ``stream`` (a rare input) is most likely a typo of, if a name is close enough (one edit
        apart, or mostly the same letters): among ``among`` (alias, is_sparse, dim; default: the streams inferred),
        the nearest name, ties decided by the data (the same storage, a dimension that holds its values, the
        nearest dimension)."""
        candidates = [(s.alias, s.is_sparse, s.dim) for s in self.streams] if among is None else among

        def score(candidate: tuple[str, bool, int]) -> tuple[bool, float, bool, bool, int]:
            alias, is_sparse, dim = candidate
            ratio = difflib.SequenceMatcher(None, stream.alias, alias).ratio()
            close = ratio >= 0.6 or _one_edit_apart(stream.alias, alias)
            return close, ratio, is_sparse == stream.is_sparse, dim >= stream.dim, -abs(dim - stream.dim)

        scored = [(score(c), c[0]) for c in candidates if c[0] != stream.alias]
        best = max(scored, default=None)
        return best[1] if best is not None and best[0][0] else None


def _one_edit_apart(a: str, b: str) -> bool:
    """Whether one letter changed, added or removed makes ``a`` into ``b``."""
    if abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        return sum(x != y for x, y in zip(a, b)) <= 1
    short, long = (a, b) if len(a) < len(b) else (b, a)
    return any(long[:i] + long[i + 1 :] == short for i in range(len(long)))


@dataclass
class _Tally:
    first_offset: int
    first_seen: list[Place] = field(default_factory=list)
    samples: int = 0
    sparse_samples: int = 0  # samples with at least one ':' entry
    dense_samples: int = 0  # non-empty samples without ':'
    max_values: int = 0
    max_index: int = -1

    def stream(self, alias: str) -> InferredStream:
        is_sparse = self.sparse_samples > 0 and self.sparse_samples >= self.dense_samples
        dim = self.max_index + 1 if is_sparse else self.max_values
        return InferredStream(alias, is_sparse, max(dim, 1), self.samples, tuple(self.first_seen))


def infer_streams(
    path: str | os.PathLike[str], *, block_size: int = BLOCK_SIZE, progress: Progress | None = None
) -> list[InferredStream]:
    """Scans the whole file and returns its streams in order of first appearance (without the inputs seen too
    rarely to be streams: :func:`infer` gives them)."""
    return infer(path, block_size=block_size, progress=progress).streams


def infer(path: str | os.PathLike[str], *, block_size: int = BLOCK_SIZE, progress: Progress | None = None) -> Inference:
    """Scans the whole file (``progress`` called after each block) and returns every input found in it."""
    scanner = _Scanner()
    total = os.path.getsize(path)
    buffer = bytearray(block_size)
    kept = done = 0  # kept: bytes of an unfinished line moved to the front of the buffer
    with open(path, "rb", buffering=0) as f:
        while True:
            if kept == len(buffer):  # a line longer than the buffer
                buffer = buffer + bytearray(len(buffer))
            got = f.readinto(memoryview(buffer)[kept:]) or 0
            end = kept + got
            cut = buffer.rfind(b"\n", 0, end) + 1 if got else end
            if cut:
                scanner.scan(np.frombuffer(buffer, np.uint8, cut), done - kept)
            buffer[: end - cut] = buffer[cut:end]
            kept, done = end - cut, done + got
            if progress is not None:
                progress(done, total)
            if not got:
                break
    ordered = sorted(scanner.tallies.items(), key=lambda item: item[1].first_offset)
    inputs = [tally.stream(alias.decode("utf-8", "backslashreplace")) for alias, tally in ordered]
    return Inference(inputs, scanner.sequences)


class _Scanner:
    """Tallies the fields of blocks of whole lines. Byte-sized work arrays are reused across blocks."""

    def __init__(self) -> None:
        self.tallies: dict[bytes, _Tally] = {}
        self.lines = 0  # newlines before the block being scanned
        self.sequences = 0  # sequence starts seen (see Inference.sequences)
        self._last_id: tuple[int, int, int] | None = None  # the id (prefix, length) of the last line scanned
        self._flags = np.empty((3, 0), dtype=bool)
        self._counts = np.empty(0, dtype=np.int32)

    def scan(self, buf: np.ndarray, base: int) -> None:
        """Adds the fields of ``buf`` (whole lines starting at file offset ``base``) to the tallies."""
        n = len(buf)
        if self._flags.shape[1] < n + 1:
            self._flags = np.empty((3, n + 1), dtype=bool)
            self._counts = np.empty(n + 1, dtype=np.int32)
        lines_before = self.lines
        self._count_sequences(buf)
        is_pipe = np.equal(buf, _PIPE, out=self._flags[0, :n])
        bars = np.flatnonzero(is_pipe)
        if not len(bars):
            self.lines += int(np.count_nonzero(np.equal(buf, _NEWLINE, out=self._flags[2, :n])))
            return
        blank = np.less_equal(buf, 0x20, out=self._flags[1, :n])  # ends a name and separates values
        blank |= is_pipe
        scratch = self._flags[2, : n + 1]
        # a name ends at the first blank after its bar, a field at the next '|' or newline (bars are in both)
        name_ends = _after_bars(np.flatnonzero(blank), is_pipe)
        stop = np.equal(buf, _NEWLINE, out=scratch[:n])
        self.lines += int(np.count_nonzero(stop))
        stop |= is_pipe
        field_ends = _after_bars(np.flatnonzero(stop), is_pipe)
        name_lengths = name_ends - bars - 1
        fields = (name_lengths > 0) & (name_lengths <= MAX_ALIAS_BYTES)
        fields &= buf[np.minimum(bars + 1, n - 1)] != ord("#")  # '|#' starts a comment
        if not fields.any():
            return
        bars, name_ends, field_ends = bars[fields], name_ends[fields], field_ends[fields]

        # values of a field = tokens (a non-blank byte after a blank one) between its name and its end;
        # running counts over the block give the count in (name_end, field_end) without a search
        token_start = scratch
        token_start[0] = token_start[n] = False
        np.logical_not(blank[1:], out=token_start[1:n])
        token_start[1:n] &= blank[:-1]
        tokens = np.cumsum(token_start, dtype=np.int32, out=self._counts[: n + 1])
        values = tokens[field_ends - 1] - tokens[name_ends]

        # sparse entries: the ':' among a field's values; the colons of a field are colons[first:last]
        is_colon = scratch
        np.equal(buf, _COLON, out=is_colon[:n])
        is_colon[n] = False
        has_colon = np.zeros(len(bars), dtype=bool)
        field_max_index = np.full(len(bars), -1, dtype=np.int64)
        if is_colon.any():
            colon_count = np.cumsum(is_colon, dtype=np.int32, out=self._counts[: n + 1])
            first, last = colon_count[name_ends], colon_count[field_ends - 1]
            has_colon = last > first
            if has_colon.any():
                index = np.append(_sparse_indices(buf, np.flatnonzero(is_colon)), -1)
                bounds = np.stack([first[has_colon], last[has_colon]], axis=1).ravel()
                field_max_index[has_colon] = np.maximum.reduceat(index, bounds)[::2]  # max over [first, last)

        names, first_field, groups = _group_names(buf, bars, name_ends - bars - 1)
        k = len(names)
        samples = np.bincount(groups, minlength=k)
        sparse = np.bincount(groups[has_colon], minlength=k)
        dense = np.bincount(groups[~has_colon & (values > 0)], minlength=k)
        max_values = np.zeros(k, dtype=values.dtype)  # same dtype: ufunc.at is much faster
        np.maximum.at(max_values, groups, values)
        max_index = np.full(k, -1, dtype=np.int64)
        np.maximum.at(max_index, groups, field_max_index)
        newlines: np.ndarray | None = None
        for j, name in enumerate(names):
            tally = self.tallies.setdefault(name, _Tally(base + int(bars[first_field[j]])))
            if len(tally.first_seen) < FIRST_SEEN:
                if newlines is None:
                    newlines = np.flatnonzero(buf == _NEWLINE)
                at = bars[groups == j][: FIRST_SEEN - len(tally.first_seen)]
                tally.first_seen += _places(buf, at, newlines, base, lines_before)
            tally.samples += int(samples[j])
            tally.sparse_samples += int(sparse[j])
            tally.dense_samples += int(dense[j])
            tally.max_values = max(tally.max_values, int(max_values[j]))
            tally.max_index = max(tally.max_index, int(max_index[j]))


    def _count_sequences(self, buf: np.ndarray) -> None:
        """Counts the lines of ``buf`` that start a sequence: a line with no id, or an id (its first 16 bytes and
        its length) other than the line before's. Blank lines are skipped."""
        n = len(buf)
        starts = np.concatenate([[0], np.flatnonzero(buf[:-1] == _NEWLINE) + 1]).astype(np.int64)
        starts = starts[(starts < n) & (buf[np.minimum(starts, n - 1)] != _NEWLINE)]
        if not len(starts):
            return
        ends = np.append(np.flatnonzero((buf <= 0x20) | (buf == _PIPE)), n)  # an id ends at a blank, '|' or the end
        lengths = ends[np.searchsorted(ends, starts)] - starts
        width = 16
        at = np.minimum(starts[:, None] + np.arange(width), n - 1)
        prefix = np.where(np.arange(width) < lengths[:, None], buf[at], 0).astype(np.uint8)
        words = np.ascontiguousarray(prefix).view(np.uint64).reshape(-1, 2)
        ids = np.column_stack([words, lengths.astype(np.uint64)])
        previous = np.empty_like(ids)
        previous[1:] = ids[:-1]
        previous[0] = self._last_id if self._last_id is not None else (0, 0, 0)
        new = (lengths == 0) | (ids != previous).any(axis=1)
        if self._last_id is None:
            new[0] = True
        self.sequences += int(np.count_nonzero(new))
        last = ids[-1]
        self._last_id = (int(last[0]), int(last[1]), int(last[2]))


def _places(buf: np.ndarray, positions: np.ndarray, newlines: np.ndarray, base: int, lines: int) -> list[Place]:
    """The places of ``positions`` in ``buf`` (a block at file offset ``base`` after ``lines`` newlines)."""
    places = []
    for position in positions.tolist():
        before = int(np.searchsorted(newlines, position))  # newlines of the block before the position
        start = int(newlines[before - 1]) + 1 if before else 0
        column = len(bytes(buf[start:position]).decode("utf-8", "replace")) + 1
        places.append(Place(base + position, lines + before + 1, column))
    return places


def _after_bars(positions: np.ndarray, is_pipe: np.ndarray) -> np.ndarray:
    """For each bar (which is among ``positions``), the next position in ``positions``, or the block end."""
    after = np.flatnonzero(is_pipe[positions]) + 1
    return np.where(after < len(positions), positions[np.minimum(after, len(positions) - 1)], len(is_pipe))


def _group_names(buf: np.ndarray, bars: np.ndarray, lengths: np.ndarray) -> tuple[list[bytes], np.ndarray, np.ndarray]:
    """Distinct names after the bars: (names, first field of each, group of each field)."""
    width = int(lengths.max())
    padded = 8 if width <= 8 else width
    gathered = np.zeros((len(bars), padded), dtype=np.uint8)
    for j in range(width):  # column by column: no (fields, width) index array
        present = lengths > j
        gathered[present, j] = buf[bars[present] + 1 + j]
    keys = gathered.view("<u8" if padded == 8 else f"S{padded}").ravel()
    _, first, groups = np.unique(keys, return_index=True, return_inverse=True)
    names = [bytes(gathered[i, : int(lengths[i])]) for i in first]
    return names, first, groups.ravel()


def _sparse_indices(buf: np.ndarray, colons: np.ndarray) -> np.ndarray:
    """The integer before each colon when it is a whole token of digits, else -1 (the parser reports it)."""
    number = np.zeros(len(colons), dtype=np.int64)
    digits = np.zeros(len(colons), dtype=np.int64)
    running = np.ones(len(colons), dtype=bool)
    for j in range(1, _INDEX_DIGITS + 2):  # walk back from the colon over at most _INDEX_DIGITS digits
        byte = buf[np.maximum(colons - j, 0)]
        is_digit = running & (byte >= _ZERO) & (byte <= _NINE) & (colons - j >= 0)
        if not is_digit.any():
            break
        number += np.where(is_digit, (byte.astype(np.int64) - _ZERO) * 10 ** (j - 1), 0)
        digits += is_digit
        running = is_digit
    before = buf[np.maximum(colons - digits - 1, 0)]
    whole = (digits >= 1) & (digits <= _INDEX_DIGITS) & ((before <= 0x20) | (before == _PIPE))
    return np.where(whole & (number < MAX_SPARSE_DIM), number, -1)
