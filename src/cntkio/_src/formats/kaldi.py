"""Kaldi feature deserializer: utterance matrices of binary Kaldi archives (``.ark``), listed in a ``feats.scp``
(``key path:offset``) or read from an archive directly.

The index is built from the scp file (or a scan of the archive's headers) and the header of every matrix, read
by offset; a chunk's matrices are read by offset (``pread``) and decoded natively with the GIL released (float32
as stored, float64 converted, compressed matrices decompressed as kaldiio does), then expanded by the context
window. The archives are kept open as HTK's are (a bounded number, checked for in-place changes).
"""

from __future__ import annotations

import dataclasses
import errno
import functools
import hashlib
import logging
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from cntkio import _native
from cntkio._src.common.arrays import narrow_lengths
from cntkio._src.common.errors import ConfigError, FormatError, Location
from cntkio._src.common.keys import KeyColumn, TextKeys, join_keys
from cntkio._src.common.streams import StreamDefs, StreamInformation, iter_stream_defs
from cntkio._src.common.system import available_cores
from cntkio._src.formats.data_file import (
    DataFile,
    pickled_as_arguments,
    read_whole,
    refuse_remote,
    require_regular_file,
)
from cntkio._src.formats.htk_features import (
    DEFAULT_CHUNK_FRAMES,
    FILES_PER_READ,
    SHOWN_KEYS,
    FeatureStreamOptions,
    _chunk_starts,
    _file_fingerprint,
    _narrow,
    _open_file_limit,
    _OpenFiles,
    context_window,
)
from cntkio._src.formats.identity import array_digest
from cntkio._src.formats.protocol import DenseStream, DeserializerGroup, ParsedChunk, SequenceIndex

logger = logging.getLogger("cntkio")

KINDS = ("FM", "DM", "CM", "CM2", "CM3")  # the native kind codes' names
_NO_TARGET, _PIPE, _ROW_RANGE = 1, 2, 3  # why a line of an scp file is not an entry (kaldi_scp.hpp)
_NO_KEY, _BAD_HEADER = 1, 2  # why the scan of an archive read directly ended early (kaldi.hpp: ArchiveScan)
MAX_KEY_BYTES = 4096  # a key longer than this in an archive scanned directly is refused


class _Entries:
    """The matrices listed (by the scp files or the archives' scans), in order, as columns: added a file at a time,
    the paths numbered across files."""

    def __init__(self) -> None:
        self.paths: list[str] = []  # distinct, first-seen order
        self._numbers: dict[str, int] = {}
        self._keys: list[KeyColumn] = []
        self._path_ids: list[np.ndarray] = []
        self._offsets: list[np.ndarray] = []  # of the "\0B" marker
        self._checked: list[np.ndarray] = []  # whether "key " precedes the offset

    def extend(
        self, keys: TextKeys, paths: list[str], path_ids: np.ndarray, offsets: np.ndarray, checked: np.ndarray
    ) -> None:
        """Adds a file's entries: ``path_ids`` number its own distinct ``paths``."""
        numbers = np.array([self._numbers.setdefault(p, len(self._numbers)) for p in paths], dtype=np.int64)
        self.paths = list(self._numbers)
        self._keys.append(keys)
        self._path_ids.append(numbers[path_ids] if len(path_ids) else np.zeros(0, dtype=np.int64))
        self._offsets.append(np.asarray(offsets, dtype=np.int64))
        self._checked.append(np.asarray(checked, dtype=np.uint8))

    def columns(self) -> tuple[TextKeys, np.ndarray, np.ndarray, np.ndarray]:
        """(keys, path ids, offsets, checked keys) of every entry, once every file is added."""
        if len(self._keys) != 1:
            keys = KeyColumn.concatenate(self._keys) if self._keys else TextKeys.from_strings([])
            assert isinstance(keys, TextKeys)
            self._keys = [keys]
            for column in (self._path_ids, self._offsets, self._checked):
                column[:] = [np.concatenate(column) if column else np.zeros(0, dtype=np.int64)]
        keys = self._keys[0]
        assert isinstance(keys, TextKeys)
        return keys, self._path_ids[0], self._offsets[0], self._checked[0].astype(np.uint8, copy=False)

    def location(self, i: int) -> Location:
        """Where entry ``i`` is: its archive, the offset of its matrix, its key."""
        keys, path_ids, offsets, _ = self.columns()
        return Location(self.paths[int(path_ids[i])], int(offsets[i]), sequence_key=_text(keys, i))


def _text(keys: TextKeys, i: int) -> str:
    """Key ``i`` as text."""
    return str(keys.take(np.array([i]))[0])


def _unmarked(marked: dict[int, str], count: int) -> np.ndarray:
    """A mask of ``count`` entries, False where ``marked`` has one."""
    mask = np.ones(count, dtype=bool)
    mask[np.fromiter(marked, dtype=np.int64, count=len(marked))] = False
    return mask


def is_archive(start: bytes) -> bool:
    """Whether a file starting with ``start`` is a binary Kaldi archive (``key \\0B...``), not an scp list."""
    space = start.find(b" ", 0, MAX_KEY_BYTES + 1)
    return space > 0 and start[space + 1 : space + 3] == b"\0B" and not any(c in start[:space] for c in b"\0\n\t\r")


class KaldiDeserializer(FeatureStreamOptions):
    """Reads Kaldi feature matrices (one utterance each) of binary archives, listed in ``feats.scp`` files.

    Args:
        streams: ``StreamDefs(name=StreamDef(shape=DIM, scp=PATH_OR_LIST, context=(LEFT, RIGHT)))``, as
            :class:`~cntkio.HTKFeatureDeserializer` takes them (``shape`` may be left out: the column count of the
            first usable matrix is then the dimension). ``scp`` names Kaldi scp files (lines
            ``key path:offset``, the offset of the matrix's ``\\0B`` marker, or ``key path`` for a file holding one
            matrix) or binary archives (``.ark``), read directly: their headers are scanned, the data skipped.
            ``DIM`` is the matrices' column count (with ``context=None``, an odd multiple ``w`` of it selects the
            window ``(w//2, w//2)``); output frames hold ``DIM * (1 + LEFT + RIGHT)`` values, edge frames repeated.
            ``max_sequence_length``, ``defines_mb_size`` and ``broadcast`` (every matrix one row, repeated to the
            joined utterance's length) as for HTK features. One stream per deserializer (:meth:`per_stream`).
        prefix_path: put in front of every archive path of the scp files (relative paths are otherwise taken from
            the current directory, as Kaldi does).
        precision: ``'float'`` (float32; double matrices rounded) or ``'double'`` (float64).
        max_errors: bad utterances tolerated, skipped and counted: a key differing from the archive's, a matrix
            that is not binary or of another type, an empty matrix (no row or no column), a column count other
            than the stream's (that of the first non-empty matrix fitting ``shape``), rows x cols past the end of
            the archive, an scp offset past the end of the archive or not below ``2**63``, an archive that cannot be
            opened or read. With 0 the first raises a :class:`~cntkio.FormatError` naming the archive, the byte
            offset and the utterance key (an offset not below ``2**63``: the scp file, its line and the key).
        chunk_frames: a new chunk starts when the current one holds more than this many frames.

    Matrices: ``FM`` (float32), ``DM`` (float64), and the compressed ``CM`` (per-column percentiles, one byte a
    value), ``CM2`` (two bytes a value) and ``CM3`` (one byte a value), decompressed with float32 arithmetic
    exactly as kaldiio does (Kaldi's own ``CM`` decompression computes the last step in double: it can differ in
    the last bit). Only binary, little-endian archives are read: text-mode matrices (``[ ... ]``), vectors, pipes
    (``cmd |``) and row ranges (``path:offset[0:9]``) are refused with a clear error. Archives changed in place
    after indexing are refused when a chunk reads them.

    Example::

        features = KaldiDeserializer(StreamDefs(feats=StreamDef(shape=40, scp="data/feats.scp", context=(5, 5))))
        source = MinibatchSource([features, labels], frame_mode=True)
    """

    @classmethod
    def per_stream(cls, streams: Any, **kwargs: Any) -> DeserializerGroup:
        """One deserializer per stream of ``streams`` (the other arguments shared), joined by key."""
        return DeserializerGroup(cls(StreamDefs(**{name: d}), **kwargs) for name, d in iter_stream_defs(streams))

    def __init__(
        self,
        streams: Any,
        *,
        prefix_path: str | None = None,
        precision: str = "float",
        max_errors: int = 0,
        chunk_frames: int = DEFAULT_CHUNK_FRAMES,
        trace_level: int = 1,
    ):
        self._arguments = (
            (streams,),
            {
                "prefix_path": prefix_path,
                "precision": precision,
                "max_errors": max_errors,
                "chunk_frames": chunk_frames,
                "trace_level": trace_level,
            },
        )
        self.trace_level: int = int(trace_level)
        self._files = _OpenFiles(_open_file_limit(), "Kaldi archive")
        name = self._configure_feature_stream(
            streams, "Kaldi", "scp=PATH_OR_LIST (feats.scp files or .ark archives)", precision, max_errors, chunk_frames
        )
        self.prefix_path = prefix_path
        if not self.scp_files:
            raise ConfigError(f"stream '{name}': scp lists no file")
        for path in self.scp_files:
            refuse_remote(path, "Kaldi archives and scp files")
        self.filename = self.scp_files[0]
        self.parsed_files: list[Any] = []
        self._scp_fingerprint: list[list[Any]] = []
        try:
            entries = _Entries()
            for path in self.scp_files:
                require_regular_file(path, "Kaldi scp file")  # (read twice: its start, to tell an archive)
                with open(path, "rb") as f:
                    start = f.read(MAX_KEY_BYTES + 3)
                if is_archive(start):
                    self._scan_archive(path, entries)
                else:
                    self._scp_fingerprint.append(_file_fingerprint(path))
                    _, identities = read_whole([path], functools.partial(self._parse_scp, path, entries))
                    self.parsed_files.append((path, identities[0]))
            self._build(entries)
        except BaseException:
            self.close()
            raise

    # --------------------------------------------------------------------------------- index
    def _parse_scp(self, path: str, entries: _Entries) -> None:
        """Adds the entries of a Kaldi scp file (``key rxfilename`` lines), parsed natively."""
        with open(path, "rb") as f:
            data = f.read()
        if b"\0" in data:
            raise FormatError("a Kaldi scp file is text; this one holds NUL bytes", Location(path, data.find(b"\0")))
        scp = _native.kaldi_scp(data)
        for why, number, offset in zip(scp.problems.tolist(), scp.problem_lines.tolist(), scp.problem_offsets.tolist()):
            self._scp_problem(path, data, why, number, offset)
        paths = scp.paths
        if self.prefix_path:
            paths = [os.path.join(self.prefix_path, p) for p in paths]
        keys = TextKeys(scp.key_blob, scp.key_offsets)
        entries.extend(keys, paths, scp.path_ids, scp.offsets, scp.checked_keys)

    def _scp_problem(self, path: str, data: bytes, why: int, number: int, offset: int) -> None:
        """Reports a line of an scp file that is not an entry (``_native.KaldiScp.problems``): raises, or counts an
        offset not below 2**63 as a bad entry."""
        end = data.find(b"\n", offset)
        words = data[offset : end if end >= 0 else len(data)].split(None, 1)  # (ASCII whitespace, as the parser's)
        line = b" ".join(words).decode("utf-8", "surrogateescape")
        where = functools.partial(Location, path, offset, number)
        if why == _NO_TARGET:
            raise FormatError(f"scp line '{line}' has no file: expected 'key path:offset'", where())
        key, target = (w.decode("utf-8", "surrogateescape") for w in words)
        if why == _PIPE:
            raise FormatError(f"'{target}' is a pipe: cntkio reads archives by offset, not commands", where())
        if why == _ROW_RANGE:
            raise FormatError(
                f"'{target}' selects rows or columns of a matrix ([...]), which cntkio does not read", where()
            )
        archive, _, tail = target.rpartition(":")
        self._bad(where(sequence_key=key), f"offset {tail} of '{archive}' is not below 2**63")

    def _scan_archive(self, path: str, entries: _Entries) -> None:
        """Adds the matrices of an archive read directly, scanned natively (each header read, each data skipped by
        its size). A broken header ends the scan (what follows cannot be found): the matrix is reported, those
        before it are kept."""
        data_file = DataFile(path, "Kaldi archive")
        try:
            scan = _native.kaldi_scan(data_file.fd, data_file.size, MAX_KEY_BYTES)
        finally:
            data_file.close()
        if scan.stop == _NO_KEY:
            shown = scan.stop_detail.decode("utf-8", "backslashreplace")
            reason = f"no 'key ' where a matrix of the archive starts (found {shown!r})"
            self._bad_at(path, scan.stop_offset, None, reason)
        elif scan.stop == _BAD_HEADER:
            key = scan.stop_key.decode("utf-8", "surrogateescape")
            self._bad_at(path, scan.stop_offset, key, scan.stop_detail.decode("utf-8", "replace"))
        ids = np.zeros(len(scan.offsets), dtype=np.int64)  # (one path; no key checked: each was read before its matrix)
        entries.extend(TextKeys(scan.key_blob, scan.key_offsets), [path], ids, scan.offsets, ids != 0)
        self._scp_fingerprint.append(_file_fingerprint(path))

    def _bad_at(self, path: str, offset: int, key: str | None, reason: str) -> None:
        location = Location(path, offset, sequence_key=key)
        if self.errors.max_errors == 0:
            raise FormatError(reason, location)
        self.errors.add(("matrix", path, offset), lambda: FormatError(reason, location))

    def _build(self, entries: _Entries) -> None:
        keys, path_ids, offsets, checked = entries.columns()
        count = len(keys)
        if count == 0:
            raise ConfigError(f"{', '.join(self.scp_files)}: no utterance listed")
        bad: dict[int, str] = {}  # entry -> why it cannot be read (reported in entry order below)
        first = join_keys(keys, keys, by_text=True).match  # (the first entry of each key)
        for i in np.flatnonzero(first != np.arange(count)).tolist():
            bad[i] = f"key '{_text(keys, i)}' listed again (first as entry {first[i] + 1}); the first is read"
        kinds = np.full(count, -1, dtype=np.int32)
        rows = np.zeros(count, dtype=np.int64)
        cols = np.zeros(count, dtype=np.int64)
        ends = np.zeros(count, dtype=np.int64)
        sizes = np.zeros(count, dtype=np.int64)
        file_ids = np.full(count, -1, dtype=np.int64)
        order = np.argsort(path_ids, kind="stable")
        bounds = np.flatnonzero(np.diff(path_ids[order], prepend=-1, append=-2))
        for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):  # each archive: its headers in one native call
            members = order[a:b]
            path = entries.paths[int(path_ids[members[0]])]
            try:
                file_id = self._files.add(DataFile(path, "Kaldi archive"))
            except (OSError, FormatError) as error:
                why = str(error) if isinstance(error, OSError) else f"{error.reason} ({error.location})"
                for i in members.tolist():
                    bad.setdefault(i, f"cannot read Kaldi archive '{path}': {why}")
                continue
            data_file = self._files.acquire(file_id)
            try:
                past = offsets[members] >= data_file.size  # (never read: a huge offset would fail the read)
                for i in members[past].tolist():
                    bad.setdefault(i, f"offset {offsets[i]} is past the end of the archive ({data_file.size} bytes)")
                members = members[~past]
                named = keys.subset(members)
                found = _native.kaldi_headers(
                    data_file.fd, offsets[members], named.blob, named.offsets, checked[members], available_cores()
                )
            finally:
                self._files.release([file_id])
            kinds[members], rows[members], cols[members], ends[members] = found[:4]
            sizes[members] = data_file.size
            file_ids[members] = file_id
            for j, why in found[4]:
                bad.setdefault(int(members[j]), why)
        good = (kinds >= 0) & _unmarked(bad, count)
        if not good.any():
            self._report(entries, bad)
            raise ConfigError(f"{', '.join(self.scp_files)}: no usable utterance")
        empty = good & ((rows == 0) | (cols == 0))  # (Kaldi writes an empty matrix as 0 x 0)
        reference = self._reference(good & ~empty, cols)
        if reference is None:  # every matrix empty: none to learn the dimension from
            for i in np.flatnonzero(empty).tolist():
                bad[i] = "the matrix holds no row (no frame)" if rows[i] == 0 else "the matrix holds no column"
            self._report(entries, bad)
            raise ConfigError(f"{', '.join(self.scp_files)}: no usable utterance")
        dim = int(cols[reference])
        self._configure_dimension(dim, entries.paths[path_ids[reference]])
        for i in np.flatnonzero(good & (empty | (cols != dim) | (ends > sizes))).tolist():
            if rows[i] == 0:
                bad[i] = "the matrix holds no row (no frame)"
            elif cols[i] == 0:
                bad[i] = "the matrix holds no column"
            elif cols[i] != dim:
                bad[i] = (
                    f"the matrix has {cols[i]} columns, the stream's matrices {dim} (shape {self._config_dim}; "
                    f"the first such matrix is '{_text(keys, reference)}')"
                )
            else:
                bad[i] = (
                    f"the {KINDS[kinds[i]]} matrix of {rows[i]} x {cols[i]} needs {ends[i] - offsets[i]} bytes from "
                    f"offset {offsets[i]}, past the end of the archive ({sizes[i]} bytes): truncated or damaged"
                )
        if self.broadcast:
            for i in np.flatnonzero(good & (rows != 1)).tolist():
                if i not in bad:
                    raise FormatError(
                        f"stream '{self.stream_name}' has broadcast=True, so every matrix must hold exactly one "
                        f"row; this one holds {rows[i]}",
                        entries.location(i),
                    )
        self._report(entries, bad)
        keep = good & _unmarked(bad, count)
        too_long = keep & (rows > (self.max_sequence_length or np.iinfo(np.int64).max))
        self.skipped_too_long = int(too_long.sum())
        if self.skipped_too_long:
            shown = keys.take(np.flatnonzero(too_long)[:SHOWN_KEYS])
            logger.warning(
                "%s: %d utterance(s) longer than max_sequence_length=%d frames skipped: %s%s",
                self.filename, self.skipped_too_long, self.max_sequence_length, ", ".join(shown),
                ", ..." if self.skipped_too_long > len(shown) else "",
            )  # fmt: skip
        keep &= ~too_long
        kept = np.flatnonzero(keep)
        if len(kept) == 0:
            raise ConfigError(f"{', '.join(self.scp_files)}: no usable utterance")
        self._file_ids = _narrow(file_ids[kept])
        self._offsets = offsets[kept]
        self._kinds = kinds[kept]
        self._rows = rows[kept]
        chunks = _chunk_starts(self._rows, self.chunk_frames)
        self._index = SequenceIndex(chunks, narrow_lengths(self._rows), keys.subset(kept))

    def _reference(self, usable: np.ndarray, cols: np.ndarray) -> int | None:
        """The matrix whose column count is the stream's: the first usable one that fits the configured shape (as
        many columns, or an odd fraction of them when the context window is inferred), else the first usable one
        (the shape then refused as a configuration error); None when none is usable. Matrices of other column
        counts are bad records."""
        dim = self._config_dim
        if dim == 0:  # (no shape: the first usable matrix's column count is the dimension)
            return int(np.argmax(usable)) if usable.any() else None
        fits = cols == dim
        if self._context is None:
            divisor = np.maximum(cols, 1)
            fits |= (cols > 0) & (dim % divisor == 0) & ((dim // divisor) % 2 == 1)
        for candidates in (usable & fits, usable):
            if candidates.any():
                return int(np.argmax(candidates))
        return None

    def _report(self, entries: _Entries, bad: dict[int, str]) -> None:
        """Reports the bad entries (entry -> why) in entry order."""
        for i in sorted(bad):
            self._bad(entries.location(i), bad[i])

    def _bad(self, location: Location, reason: str) -> None:
        if self.errors.max_errors == 0:
            raise FormatError(reason, location)
        self.errors.add(("matrix", location.file, location.offset), lambda: FormatError(reason, location))

    def _configure_dimension(self, file_dim: int, path: str) -> None:
        if self._config_dim == 0:  # no shape given: the matrices' column count, with the context window given
            left, right = self._context or (0, 0)
        else:
            left, right = context_window(self._config_dim, file_dim, self._context, self.stream_name, path)
        self.context = (left, right)
        self.frame_dim = file_dim
        width = file_dim * (1 + left + right)
        self.info = StreamInformation(
            self.stream_name, 0, "dense", self.dtype, (width,), defines_mb_size=self.defines_mb_size
        )
        self._infos = [self.info]

    # ------------------------------------------------------------------------------- protocol
    def identity(self) -> dict[str, Any]:
        """The index and where each utterance lies (its archive's number and size, its byte offset)."""
        sizes = np.frombuffer(self._files._sizes, dtype=np.int64)
        return {**super().identity(), "layout": array_digest([self._file_ids, self._offsets, self._kinds, sizes])}

    def fingerprint(self) -> list[Any]:
        """The class, the scp files (names, sizes, modification times), and a digest of every archive's name, size
        and modification time."""
        digest = hashlib.sha256()
        for path in self._files.paths:
            digest.update(os.path.basename(path).encode("utf-8", "surrogateescape") + b"\0")
        digest.update(self._files.identities())
        scp = [part for entry in self._scp_fingerprint for part in entry]
        return [type(self).__name__, *scp, len(self._files.paths), digest.hexdigest()[:32]]

    @property
    def source_name(self) -> str:
        return self.filename

    def get_chunk(self, chunk_id: int) -> ParsedChunk:
        a, b = self._chunk_range(chunk_id)
        lengths = self._rows[a:b]
        offsets = np.zeros(b - a + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        file_ids = self._file_ids[a:b]
        if len(np.unique(file_ids)) <= FILES_PER_READ:
            values = self._read(a, b)
            values.flags.writeable = False
            offsets.flags.writeable = False
            return ParsedChunk({self.stream_name: DenseStream(values, offsets)})
        parts = []
        start = 0
        while start < b - a:  # matrices of at most FILES_PER_READ archives at a time (one utterance per file)
            stop, used = start, set[int]()
            for file_id in file_ids[start:].tolist():
                if file_id not in used and len(used) == FILES_PER_READ:
                    break
                used.add(file_id)
                stop += 1
            parts.append(self._read(a + start, a + stop))
            start = stop
        values = parts[0] if len(parts) == 1 else np.concatenate(parts)
        values.flags.writeable = False
        offsets.flags.writeable = False
        return ParsedChunk({self.stream_name: DenseStream(values, offsets)})

    def _read(self, a: int, b: int) -> np.ndarray:
        """Utterances ``[a, b)`` decoded and expanded by the context window; their archives are open (pinned) only
        meanwhile."""
        used, local = np.unique(self._file_ids[a:b], return_inverse=True)
        ids = used.tolist()
        first = (a + np.unique(local, return_index=True)[1]).tolist()  # the first utterance read from each archive
        files: list[DataFile] = []
        try:
            for file_id, sequence in zip(ids, first):
                files.append(self._acquire(file_id, sequence))
            try:
                left, right = self.context
                values, bad = _native.kaldi_read(
                    np.array([f.fd for f in files], dtype=np.int32),
                    local.astype(np.int32),
                    self._offsets[a:b],
                    self._kinds[a:b],
                    self._rows[a:b],
                    self.frame_dim,
                    left,
                    right,
                    self.dtype == np.float64,
                )
            finally:  # after the read (one fstat an archive): a change before or during it is seen, and explains
                for data_file, sequence in zip(files, first):
                    self._check_unchanged(data_file, sequence)
        finally:
            self._files.release(ids[: len(files)])
        if bad is not None:  # the archive changed without a new ctime, or was cut short
            matrix, offset, reason = bad
            path = files[int(local[matrix])].path
            raise FormatError(reason, Location(path, int(offset), sequence_key=self._key(a + int(matrix))))
        assert values is not None
        return values

    def _key(self, sequence: int) -> str:
        return str(self._index.keys.take(np.array([sequence]))[0])

    def _check_unchanged(self, data_file: DataFile, sequence: int) -> None:
        """Raises if an archive changed since it was indexed; the error names the first utterance read from it."""
        try:
            data_file.check_unchanged("indexed")
        except FormatError as error:
            raise FormatError(
                error.reason, dataclasses.replace(error.location, sequence_key=self._key(sequence))
            ) from None

    def _acquire(self, file_id: int, sequence: int) -> DataFile:
        """An archive a chunk reads; errors name the first utterance read from it."""
        try:
            return self._files.acquire(file_id)
        except (OSError, FormatError) as error:
            key, path = self._key(sequence), self._files.paths[file_id]
            if isinstance(error, OSError):
                cause = getattr(error.__cause__, "errno", getattr(error, "errno", None))
                gone = cause in (errno.ENOENT, errno.EACCES, errno.ENOTDIR)
                reason = f"{error} (it could be read when it was indexed)" if gone else str(error)
                raise FormatError(reason, Location(path, 0, sequence_key=key)) from None
            raise FormatError(error.reason, dataclasses.replace(error.location, sequence_key=key)) from None

    def describe(self) -> dict[str, Any]:
        """Summary (for ``cntkio inspect``)."""
        kinds = np.bincount(self._kinds, minlength=len(KINDS))
        return {
            "scp": list(self.scp_files),
            "files": len(self._files.paths),
            "utterances": self._index.num_sequences,
            "frames": int(self._rows.sum()),
            "chunks": self.num_chunks(),
            "matrices": {KINDS[k]: int(n) for k, n in enumerate(kinds.tolist()) if n},
            "dim": self.frame_dim,
            "context": self.context,
            "broadcast": self.broadcast,
            "skipped_errors": self.errors.count,
            "skipped_too_long": self.skipped_too_long,
        }

    def close(self) -> None:
        """Closes the archives (reading a chunk afterwards raises)."""
        self._files.close()

    def __del__(self) -> None:
        files = getattr(self, "_files", None)
        if files is not None:
            files.close()

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickles as its arguments; the copy indexes the archives again and refuses any that changed."""
        return pickled_as_arguments(self)


__all__: Sequence[str] = ["KaldiDeserializer", "is_archive"]
