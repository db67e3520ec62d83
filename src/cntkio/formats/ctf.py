"""CNTK Text Format (CTF) deserializer: native index and parser behind the Deserializer protocol."""

from __future__ import annotations

import contextlib
import enum
import functools
import logging
import mmap
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import _native
from ..deserializer import ChunkIndex, DenseStream, Deserializer, SparseStream, StreamData
from ..errors import ConfigError, ErrorBudget, FormatError, Location
from ..streams import StreamInformation, iter_stream_defs

logger = logging.getLogger("cntkio")

DEFAULT_CHUNK_SIZE_IN_BYTES = 32 * 1024 * 1024
MAX_SPARSE_DIM = 2**31 - 1
_WHITESPACE = b" \t\n\v\f\r"
_UTF8_BOM = b"\xef\xbb\xbf"


class IdMode(enum.IntEnum):
    """How sequences are delimited (values shared with the native module)."""

    LINE = 0  # every line is a sequence; its key is the 0-based line number
    NUMERIC = 1  # lines start with a numeric id; a line without id continues the sequence
    TEXT = 2  # like NUMERIC, with symbolic ids (any token up to whitespace or '|')


class ErrorKind(enum.IntEnum):
    """Kinds of bad records reported by the native module."""

    BAD_NUMBER = 1
    TOO_MANY_VALUES = 2
    BAD_SPARSE_INDEX = 3
    INDEX_OUT_OF_RANGE = 4
    MISSING_COLON = 5
    BAD_NAME_PREFIX = 6
    UNEXPECTED_BYTE = 7
    DUPLICATE_INPUT = 8
    EMPTY_ROW = 9
    VALUE_OUT_OF_RANGE = 10
    MISSING_INPUT = 11


@dataclass(frozen=True)
class _Stream:
    name: str
    alias: str
    dim: int
    sparse: bool
    defines_mb_size: bool


def _parse_precision(precision: str) -> np.dtype[Any]:
    normalized = str(precision).lower()
    if normalized in ("float", "float32"):
        return np.dtype(np.float32)
    if normalized in ("double", "float64"):
        return np.dtype(np.float64)
    raise ConfigError(f"precision must be 'float' or 'double', got {precision!r}")


def _streams_from_defs(streams: Any) -> list[_Stream]:
    result = []
    for name, definition in iter_stream_defs(streams):
        alias = definition.field if definition.field is not None else name
        if not isinstance(alias, str) or not alias:
            raise ConfigError(f"stream '{name}': the CTF alias (field) must be a non-empty string")
        if any(c in alias for c in " \t|\n\r") or alias.startswith("#"):
            raise ConfigError(f"stream '{name}': alias {alias!r} cannot contain blanks or '|' or start with '#'")
        dim = definition.dim()
        if definition.is_sparse and dim > MAX_SPARSE_DIM:
            raise ConfigError(f"stream '{name}': sparse dim {dim} exceeds {MAX_SPARSE_DIM}")
        result.append(_Stream(name, alias, dim, bool(definition.is_sparse), bool(definition.defines_mb_size)))
    if not result:
        raise ConfigError("at least one stream is required")
    for kind, values in (("name", [s.name for s in result]), ("alias", [s.alias for s in result])):
        duplicates = sorted({v for v in values if values.count(v) > 1})
        if duplicates:
            raise ConfigError(f"duplicate stream {kind}(s): {', '.join(duplicates)}")
    if sum(s.defines_mb_size for s in result) > 1:
        raise ConfigError("only one stream can have defines_mb_size=True")
    return result


class CTFDeserializer(Deserializer):
    """Reads a CTF file (``cntk.io.CTFDeserializer`` with every option of CNTK's text reader).

    Args:
        filename: path of the CTF file.
        streams: ``StreamDefs(name=StreamDef(field=alias, shape=dim, is_sparse=...))``.
        max_errors: number of distinct bad records tolerated (skipped, counted, logged).
        skip_sequence_ids: every line is a sequence; leading ids are ignored.
        chunk_size_in_bytes: target chunk size; a sequence never spans chunks.
        precision: ``'float'`` (float32) or ``'double'`` (float64), any case.
        trace_level: 0 errors only, 1 warnings, 2 info.
        cache_index: accepted; the on-disk index cache is not implemented yet (a warning says so).
        optional_inputs: allow a stream to be absent from a sequence (zero samples) instead of an error.
        compat: reproduce CNTK's quirks: index length = line count, blank lines are sequences in line
            mode, sparse entries kept unsorted with duplicates, errors counted on every re-read.
    """

    def __init__(
        self,
        filename: str | os.PathLike[str],
        streams: Any,
        *,
        max_errors: int = 0,
        skip_sequence_ids: bool = False,
        chunk_size_in_bytes: int = DEFAULT_CHUNK_SIZE_IN_BYTES,
        precision: str = "float",
        trace_level: int = 1,
        cache_index: bool = False,
        optional_inputs: bool = False,
        compat: bool = False,
        keep_data_in_memory: bool = False,
        num_chunks_to_cache: int | None = None,
        frame_mode: bool = False,
    ):
        self.filename = os.fspath(filename)
        self._streams = _streams_from_defs(streams)
        self.dtype = _parse_precision(precision)
        if int(chunk_size_in_bytes) <= 0:
            raise ConfigError(f"chunk_size_in_bytes must be positive, got {chunk_size_in_bytes}")
        self.chunk_size_in_bytes = int(chunk_size_in_bytes)
        self.skip_sequence_ids = bool(skip_sequence_ids)
        self.optional_inputs = bool(optional_inputs)
        self.compat = bool(compat)
        self.trace_level = int(trace_level)
        self.errors = ErrorBudget(int(max_errors), self.trace_level, count_repeats=self.compat)
        if cache_index:
            logger.warning("cache_index=True: the on-disk index cache is not implemented yet; indexing in full")
        if num_chunks_to_cache is not None:
            logger.warning("num_chunks_to_cache is ignored (as in CNTK); memory follows the randomization window")
        del keep_data_in_memory, frame_mode  # accepted for compatibility; they do not change CTF parsing
        self._infos = [
            StreamInformation(
                s.name, i, "sparse" if s.sparse else "dense", self.dtype, (s.dim,), s.defines_mb_size, s.alias
            )
            for i, s in enumerate(self._streams)
        ]
        self._aliases = [(s.alias, s.sparse, s.dim) for s in self._streams]
        self._noted_chunks: set[int] = set()  # chunks whose warnings were logged (once, not every sweep)
        self._build_index(self._map_file())  # the map is dropped afterwards: chunks are read with pread

    # ----------------------------------------------------------------------------------- index
    def _map_file(self) -> np.ndarray:
        try:
            size = os.path.getsize(self.filename)
        except OSError as e:
            raise FileNotFoundError(f"cannot open CTF file '{self.filename}': {e.strerror}") from e
        if size == 0:
            raise FormatError("input file is empty", Location(self.filename, 0))
        self.file_size = size
        return np.memmap(self.filename, dtype=np.uint8, mode="r")

    def _skip_preamble(self, data: np.ndarray) -> tuple[int, int]:
        """Returns (offset of the first data byte, its 0-based line) past a BOM and leading blanks."""
        head = bytes(data[:3])
        if head[:2] in (b"\xff\xfe", b"\xfe\xff"):
            raise FormatError("UTF-16 input is not supported (found a UTF-16 byte order mark)", self._at(0))
        begin = 3 if head == _UTF8_BOM else 0
        first_line = 0
        window = 1 << 16
        while begin < len(data):
            block = np.asarray(data[begin : begin + window])
            blank = np.isin(block, np.frombuffer(_WHITESPACE, np.uint8))
            if not blank.all():
                skipped = int(np.argmin(blank))
                first_line += int(np.count_nonzero(block[:skipped] == 10))
                return begin + skipped, first_line
            first_line += int(np.count_nonzero(block == 10))
            begin += len(block)
        raise FormatError("input file holds only whitespace", self._at(0))

    def _build_index(self, data: np.ndarray) -> None:
        begin, first_line = self._skip_preamble(data)
        first = data[begin]
        if self.skip_sequence_ids or first == ord("|"):
            self.id_mode = IdMode.LINE
        elif ord("0") <= first <= ord("9"):
            self.id_mode = IdMode.NUMERIC
        else:
            self.id_mode = IdMode.TEXT
        defining = next((i for i, s in enumerate(self._streams) if s.defines_mb_size), -1)
        index = _native.ctf_index(
            data,
            begin,
            first_line,
            int(self.id_mode),
            self._aliases,
            defining,
            self.compat,
            self.compat,
            not self.optional_inputs,
            isinstance(data, np.memmap),
        )
        if index["fatal"]:
            raise FormatError(index["fatal"], self._at(int(index["fatal_offset"])))
        self._offsets: np.ndarray = index["offsets"]
        self._ends: np.ndarray = index["ends"]
        self._first_lines: np.ndarray = index["first_lines"]
        self._keys = self._decode_keys(index, data)
        self._report(index["errors"], sequence_base=0)
        valid = index["valid"].astype(bool)
        if not valid.all():
            self._offsets, self._ends = self._offsets[valid], self._ends[valid]
            self._first_lines = self._first_lines[valid]
            self._keys = (
                self._keys[valid]
                if isinstance(self._keys, np.ndarray)
                else ([k for k, v in zip(self._keys, valid) if v])
            )
        self._lengths: np.ndarray = index["lengths"][valid]
        self.total_lines = int(index["total_lines"])
        self.dropped_lines = int(index["dropped_lines"])
        self.dropped_sequences = int(index["dropped_sequences"])
        if len(self._offsets) == 0:
            raise FormatError("no sequence with data for the configured streams", self._at(begin))
        self._warn_about_index()
        starts = _native.ctf_chunk_starts(self._offsets, self._ends, self.chunk_size_in_bytes)
        self._chunk_bounds = np.append(starts, len(self._offsets)).astype(np.int64)

    def _decode_keys(self, index: dict[str, Any], data: np.ndarray) -> Any:
        if self.id_mode != IdMode.TEXT:
            return index["keys"]
        return [
            bytes(data[o : o + n]).decode("utf-8", "backslashreplace")
            for o, n in zip(index["offsets"].tolist(), index["key_lengths"].tolist())
        ]

    def _warn_about_index(self) -> None:
        if self.trace_level < 1:
            return
        if self.dropped_sequences:
            logger.warning(
                "%s: %d sequence(s) without the defining stream were skipped", self.filename, self.dropped_sequences
            )
        keys = np.asarray(self._keys) if self.id_mode != IdMode.LINE else None
        if keys is not None and len(keys) > 1:
            unique = np.unique(keys)
            if len(unique) != len(keys):
                logger.warning(
                    "%s: %d sequence id(s) appear in more than one place (ids should be unique)",
                    self.filename,
                    len(keys) - len(unique),
                )

    # ------------------------------------------------------------------------------- protocol
    def stream_infos(self) -> list[StreamInformation]:
        return list(self._infos)

    def num_chunks(self) -> int:
        return len(self._chunk_bounds) - 1

    def chunk_index(self, chunk_id: int) -> ChunkIndex:
        a, b = self._chunk_range(chunk_id)
        return ChunkIndex(chunk_id, self._keys[a:b], self._lengths[a:b])

    def sequence_lengths(self) -> np.ndarray:
        return self._lengths

    def chunk_sequence_counts(self) -> np.ndarray:
        return np.diff(self._chunk_bounds)

    def sequence_keys(self, sequence_ids: np.ndarray) -> list[Any]:
        if isinstance(self._keys, np.ndarray):
            return self._keys[sequence_ids].tolist()  # type: ignore[no-any-return]
        return [self._keys[i] for i in sequence_ids.tolist()]

    def get_chunk(self, chunk_id: int) -> dict[str, StreamData]:
        a, b = self._chunk_range(chunk_id)
        start, end = int(self._offsets[a]), int(self._ends[b - 1])
        with self._chunk_bytes(start, end) as buffer:
            streams, errors, stats = _native.ctf_parse(
                buffer,
                start,
                self._offsets[a:b] - start,
                self._ends[a:b] - start,
                int(self.id_mode),
                self._aliases,
                self.dtype == np.float64,
                not self.compat,
            )
            del buffer  # the map closes when the block ends
        self._report(errors, sequence_base=a)
        if chunk_id not in self._noted_chunks:
            self._noted_chunks.add(chunk_id)
            self._log_notes(stats, start, int(self._first_lines[a]))
        return self._chunk(streams)

    def _log_notes(self, stats: dict[str, int], start: int, first_line: int) -> None:
        """Logs a chunk's zero-padded samples (warning) and skipped unknown inputs (info)."""
        if self.trace_level >= 1 and stats["padded_samples"]:
            logger.warning(
                "%s: %d dense sample(s) had fewer values than their dimension and were zero-padded (first: %s)",
                self.filename,
                stats["padded_samples"],
                self._at(stats["first_padded_offset"], start, first_line),
            )
        if self.trace_level >= 2 and stats["unknown_inputs"]:
            logger.info(
                "%s: skipped %d sample(s) of inputs not in the configuration (first: %s)",
                self.filename,
                stats["unknown_inputs"],
                self._at(stats["first_unknown_offset"], start, first_line),
            )

    def _chunk(self, streams: list[tuple[np.ndarray, ...]]) -> dict[str, StreamData]:
        chunk: dict[str, StreamData] = {}
        for stream, arrays in zip(self._streams, streams):
            if stream.sparse:
                values, indices, indptr, seq_offsets = arrays
                chunk[stream.name] = SparseStream(values, indices, indptr, seq_offsets, stream.dim)
            else:
                values, seq_offsets = arrays
                chunk[stream.name] = DenseStream(values, seq_offsets)
        return chunk

    @contextlib.contextmanager
    def _chunk_bytes(self, start: int, end: int) -> Iterator[np.ndarray]:
        """The bytes of a chunk: a private map whose page tables are filled at once (no page fault per
        page, no copy out of the page cache) where the OS offers it, else a read into a new buffer."""
        populate = getattr(mmap, "MAP_POPULATE", 0)
        if not populate:
            yield self._read(start, end)
            return
        aligned = start - start % mmap.ALLOCATIONGRANULARITY
        with open(self.filename, "rb") as f:
            if os.fstat(f.fileno()).st_size < end:
                raise FormatError("file is shorter than when it was indexed (truncated?)", Location(self.filename, end))
            mapped = mmap.mmap(
                f.fileno(), end - aligned, flags=mmap.MAP_PRIVATE | populate, prot=mmap.PROT_READ, offset=aligned
            )
        try:
            view = np.frombuffer(mapped, dtype=np.uint8)[start - aligned :]
            yield view
            del view
        finally:
            with contextlib.suppress(BufferError):  # still referenced (an error unwinding): unmapped by GC
                mapped.close()

    def _read(self, start: int, end: int) -> np.ndarray:
        """Reads a byte range into a fresh buffer (faster to parse than a memory map, and thread-safe)."""
        buffer = np.empty(end - start, dtype=np.uint8)
        with open(self.filename, "rb", buffering=0) as f:
            view = buffer.data
            done = 0
            while done < len(buffer):
                n = os.preadv(f.fileno(), [view[done:]], start + done)
                if n == 0:
                    raise FormatError(
                        "file is shorter than when it was indexed (truncated?)", Location(self.filename, start + done)
                    )
                done += n
        return buffer

    def _chunk_range(self, chunk_id: int) -> tuple[int, int]:
        if not 0 <= chunk_id < self.num_chunks():
            raise IndexError(f"chunk {chunk_id} out of range (0..{self.num_chunks() - 1})")
        return int(self._chunk_bounds[chunk_id]), int(self._chunk_bounds[chunk_id + 1])

    # --------------------------------------------------------------------------------- errors
    def _report(self, errors: dict[str, np.ndarray], sequence_base: int) -> None:
        for offset, kind, stream, sequence in zip(
            errors["offset"].tolist(),
            errors["kind"].tolist(),
            errors["stream"].tolist(),
            errors["sequence"].tolist(),
        ):
            build = functools.partial(self._error, offset, ErrorKind(kind), stream, sequence + sequence_base)
            self.errors.add((offset, kind, stream), build)

    def _error(self, offset: int, kind: ErrorKind, stream: int, sequence_index: int) -> FormatError:
        spec = self._streams[stream] if stream >= 0 else None
        location = self._at(
            offset,
            int(self._offsets[sequence_index]),
            int(self._first_lines[sequence_index]),
            self._keys[sequence_index],
            spec.alias if spec else None,
        )
        byte = bytes(self._read(offset, min(offset + 1, self.file_size)))
        return FormatError(_describe(kind, byte, spec), location)

    def _at(
        self, offset: int, from_offset: int = 0, from_line: int = 0, key: Any = None, input_name: str | None = None
    ) -> Location:
        """Location of a byte offset; the 1-based line is counted from a known line start."""
        if offset < 0:
            return Location(self.filename, offset)
        newlines = np.flatnonzero(self._read(from_offset, offset) == 10)
        line = from_line + len(newlines) + 1
        line_start = from_offset + int(newlines[-1]) + 1 if len(newlines) else from_offset
        return Location(self.filename, offset, line, offset - line_start + 1, key, input_name)

    def describe(self) -> dict[str, Any]:
        """Summary of the index (for ``cntkio inspect``)."""
        return {
            "file": self.filename,
            "mode": self.id_mode.name.lower(),
            "sequences": len(self._lengths),
            "chunks": self.num_chunks(),
            "lines": self.total_lines,
            "skipped_lines": self.dropped_lines,
            "skipped_sequences": self.dropped_sequences,
        }


def _describe(kind: ErrorKind, byte: bytes, stream: _Stream | None) -> str:
    """Human-readable reason of a bad record, quoting the byte at its offset (empty at the end)."""
    shown = repr(byte.decode("latin-1")) if byte else "end of sequence"
    dim = stream.dim if stream else 0
    reasons = {
        ErrorKind.BAD_NUMBER: f"malformed number: unexpected {shown}",
        ErrorKind.TOO_MANY_VALUES: f"dense sample has more than dim={dim} values",
        ErrorKind.BAD_SPARSE_INDEX: f"expected a non-negative integer sparse index, found {shown}",
        ErrorKind.INDEX_OUT_OF_RANGE: f"sparse index out of range (dim={dim}, valid 0..{dim - 1})",
        ErrorKind.MISSING_COLON: f"expected ':' after the sparse index, found {shown}",
        ErrorKind.BAD_NAME_PREFIX: f"'|' must be followed by an input name, found {shown}",
        ErrorKind.UNEXPECTED_BYTE: f"unexpected {shown} where a '|' input should start",
        ErrorKind.DUPLICATE_INPUT: "input appears more than once on the same line",
        ErrorKind.EMPTY_ROW: "line has no valid sample",
        ErrorKind.VALUE_OUT_OF_RANGE: "number out of range for the stream's precision",
        ErrorKind.MISSING_INPUT: (
            "input is missing from the sequence" if stream else "sequence has no data for any configured input"
        ),
    }
    return reasons[kind]
