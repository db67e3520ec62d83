"""Record files read through a user decoder: TensorFlow's "file reader + record decoder" model.

The library frames the files into records (newline-delimited text, length-prefixed binary records, or
TFRecord files), indexes them without a Python loop per record, groups them into chunks of about
``chunk_size_in_bytes``, and on :meth:`RecordDeserializer.get_chunk` reads a chunk's bytes with one
``pread`` and hands its records to the user's ``decode(record) -> {stream: array}`` (or, faster, one call
of ``decode_chunk(records) -> {stream: arrays}`` per chunk). What the decoder returns is checked at the
boundary: a bad record is named by file, record number, byte offset (and line) and stream, and counts
against ``max_errors`` like a bad CTF record.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from cntkio import _native
from cntkio._src.common.arrays import exclusive_cumsum, issparse, narrow_lengths, scipy_sparse
from cntkio._src.common.errors import ConfigError, FormatError, Location
from cntkio._src.common.keys import KeyColumn, NumericKeys
from cntkio._src.common.streams import StreamInformation, check_stream_set, iter_stream_defs, parse_precision
from cntkio._src.formats.data_file import DataFile, FileBacked
from cntkio._src.formats.error_ledger import ErrorLedger
from cntkio._src.formats.identity import file_entry, listed
from cntkio._src.formats.protocol import (
    DenseStream,
    IndexedDeserializer,
    ParsedChunk,
    SequenceIndex,
    SparseStream,
    StreamData,
)
from cntkio._src.formats.stream_data import UserDataError, Where, convert

logger = logging.getLogger("cntkio")

DEFAULT_CHUNK_SIZE_IN_BYTES = 32 * 1024 * 1024
FRAMINGS = ("lines", "length_prefixed", "tfrecord")
MAX_SPARSE_DIM = 2**31 - 1
LINE_BLOCK_BYTES = 4 * 1024 * 1024  # lines are framed in blocks of this size: memory does not grow with the file
_NATIVE_FRAMING = {"length_prefixed": 0, "tfrecord": 1}
_HEADER_BYTES = {"lines": 0, "length_prefixed": 8, "tfrecord": 12}
_TRAILER_BYTES = {"lines": 0, "length_prefixed": 0, "tfrecord": 4}

Decode = Callable[[bytes], Mapping[str, Any]]
DecodeChunk = Callable[[list[bytes]], Mapping[str, Any]]


@dataclass(frozen=True)
class _Stream:
    name: str
    field: str  # the key of the stream in what the decoder returns
    shape: tuple[int, ...]
    sparse: bool
    defines_mb_size: bool


Column = tuple[StreamData, np.ndarray]  # a stream of decoded records (stream_data.convert), each record's samples


class _RecordError(Exception):
    """What the decoder returned is wrong: for the record at ``position`` of the batch (None: the batch)."""

    def __init__(self, position: int | None, stream: str | None, reason: str):
        super().__init__(reason)
        self.position = position
        self.stream = stream
        self.reason = reason


class RecordDeserializer(FileBacked, IndexedDeserializer):
    """Reads record files with a user decoder (``cntkio.RecordDeserializer``).

    The files are one corpus, in the order given; record ``i`` of the corpus is one sequence with key ``i``
    (its number, counting from 0 across the files) unless ``key`` says otherwise. Every file stays open from
    indexing on (read with ``pread``); a file changed in place since it was indexed is an error.

    Args:
        files: a path or a list of paths.
        decode: ``decode(record: bytes) -> {stream: array}``: dense streams take an array
            ``(samples, *shape)`` (one sample may be given as an array of ``shape``; a scalar for shape 1),
            sparse streams a SciPy sparse matrix ``(samples, dim)`` (or a dense array). Any real dtype;
            values are cast to ``precision``. May be None when ``decode_chunk`` is given.
        streams: ``StreamDefs(name=StreamDef(shape=..., is_sparse=...))``; ``field`` (optional) is the key
            the decoder uses for the stream (default: its name).
        framing: ``"lines"`` (newline-delimited; ``\\r\\n`` tolerated, the line ending is not part of the
            record), ``"length_prefixed"`` (a little-endian uint64 length, then that many bytes) or
            ``"tfrecord"`` (TFRecord files: uint64 length, masked CRC-32C of it, data, masked CRC-32C of the
            data; compressed TFRecords are not read).
        decode_chunk: the vectorised decoder, preferred when given: ``decode_chunk(records: list[bytes])``
            returns ``{stream: arrays}`` for all the records of a chunk at once, each stream either a list
            of one array per record, or the records' samples stacked in one array / sparse matrix (one row
            per record, or as many rows as the records' total length). If it raises or returns something
            wrong, the chunk's records are decoded one at a time (``decode(record)``, else
            ``decode_chunk([record])``) to find the bad ones.
        chunk_size_in_bytes: target chunk size; a record never spans chunks, a chunk never spans files.
        precision: ``'float'`` (float32, default) or ``'double'`` (float64).
        max_errors: number of distinct bad records tolerated: a record whose decoding raises or returns
            wrong data (or a TFRecord whose data CRC is wrong) is skipped (no samples in any stream; frame
            mode and truncated BPTT drop it), counted once however often it is read, and logged; one more
            raises ``MaxErrorsExceeded``.
        trace_level: 0 errors only, 1 warnings (each skipped record), 2 info.
        skip_blank_lines: ("lines") lines of nothing but blanks (space, tab, ``\\r``, ``\\v``, ``\\f``) are
            not records (default True).
        header_lines: ("lines") lines to skip at the start of every file (a CSV header).
        sequence_length: ``sequence_length(record) -> int``, the number of samples a record decodes to (the
            longest stream's, or the ``defines_mb_size`` stream's); called on every record when indexing
            (the files are read once more). Without it every record is one sample in every stream.
        key: ``key(record) -> int | str``, a record's sequence key (for joining with other deserializers);
            called on every record when indexing. Without it the key is the record's number.
        check_crc: ("tfrecord") check the data CRC of every record when its chunk is read (cheap: CRC-32C
            runs in C++ at memory speed); the length CRCs are always checked, when indexing.

    Example::

        def decode_chunk(lines):
            rows = np.array([line.split(b",") for line in lines], dtype=np.float64)
            return {"features": rows[:, 1:], "label": rows[:, :1]}

        reader = RecordDeserializer("train.csv", None, StreamDefs(features=StreamDef(shape=4),
                                    label=StreamDef(shape=1)), decode_chunk=decode_chunk, header_lines=1)
    """

    def __init__(
        self,
        files: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
        decode: Decode | None,
        streams: Any,
        *,
        framing: str = "lines",
        decode_chunk: DecodeChunk | None = None,
        chunk_size_in_bytes: int = DEFAULT_CHUNK_SIZE_IN_BYTES,
        precision: str = "float",
        max_errors: int = 0,
        trace_level: int = 1,
        skip_blank_lines: bool = True,
        header_lines: int = 0,
        sequence_length: Callable[[bytes], int] | None = None,
        key: Callable[[bytes], Any] | None = None,
        check_crc: bool = True,
    ):
        paths = [files] if isinstance(files, (str, bytes, os.PathLike)) else list(files)
        if not paths:
            raise ConfigError("RecordDeserializer needs at least one file")
        self.filenames = [os.fsdecode(p) for p in paths]
        self.filename = self.filenames[0]
        self._arguments = (
            (self.filenames, decode, streams),
            {
                "framing": framing, "decode_chunk": decode_chunk, "chunk_size_in_bytes": chunk_size_in_bytes,
                "precision": precision, "max_errors": max_errors, "trace_level": trace_level,
                "skip_blank_lines": skip_blank_lines, "header_lines": header_lines,
                "sequence_length": sequence_length, "key": key, "check_crc": check_crc,
            },
        )  # fmt: skip
        if framing not in FRAMINGS:
            raise ConfigError(f"framing must be one of {', '.join(map(repr, FRAMINGS))}, got {framing!r}")
        if decode is None and decode_chunk is None:
            raise ConfigError("give a decoder: decode(record) or decode_chunk=(records)")
        for name, function in (("decode", decode), ("decode_chunk", decode_chunk), ("key", key),
                               ("sequence_length", sequence_length)):  # fmt: skip
            if function is not None and not callable(function):
                raise ConfigError(f"{name} must be callable, got {type(function).__name__}")
        if int(chunk_size_in_bytes) <= 0:
            raise ConfigError(f"chunk_size_in_bytes must be positive, got {chunk_size_in_bytes}")
        if int(header_lines) < 0:
            raise ConfigError(f"header_lines must be >= 0, got {header_lines}")
        if framing != "lines" and int(header_lines):
            raise ConfigError("header_lines applies to framing='lines' only")
        self.framing = framing
        self.decode = decode
        self.decode_chunk = decode_chunk
        self.chunk_size_in_bytes = int(chunk_size_in_bytes)
        self.dtype = parse_precision(precision)
        self.trace_level: int = int(trace_level)
        self.errors: ErrorLedger = ErrorLedger(int(max_errors), self.trace_level)
        self.skip_blank_lines = bool(skip_blank_lines)
        self.header_lines = int(header_lines)
        self.check_crc = bool(check_crc) and framing == "tfrecord"
        self._has_lengths = sequence_length is not None
        self._streams = _streams_from_defs(streams)
        self._defining = next((i for i, s in enumerate(self._streams) if s.defines_mb_size), None)
        self._infos = [
            StreamInformation(
                s.name, i, "sparse" if s.sparse else "dense", self.dtype, s.shape, s.defines_mb_size, s.field
            )
            for i, s in enumerate(self._streams)
        ]
        self._numbers = {s.name: i for i, s in enumerate(self._streams)}
        self._header = _HEADER_BYTES[framing]
        self._trailer = _TRAILER_BYTES[framing]
        self._known_bad: dict[int, np.ndarray] = {}  # chunk -> positions of the records found bad in it
        self._files: list[DataFile] = []
        try:
            for path in self.filenames:
                self._files.append(DataFile(path, "record", allow_empty=True))
            self._build_index(sequence_length, key)
        except BaseException:
            self.close()
            raise

    # ----------------------------------------------------------------------------------- index
    def _build_index(self, sequence_length: Callable[[bytes], int] | None, key: Callable[[bytes], Any] | None) -> None:
        starts, counts, blanks = [], [], []
        for file in self._files:
            if self.framing == "lines":
                file_starts, file_blanks = _frame_lines(
                    file, self.header_lines, self.skip_blank_lines, LINE_BLOCK_BYTES
                )
            else:
                file_starts, file_blanks = self._frame_binary(file), np.zeros(0, dtype=np.int64)
            starts.append(file_starts)
            counts.append(len(file_starts))
            blanks.append(file_blanks)
        self._blank_lines = blanks  # per file: records kept before each skipped blank line (line numbers)
        self._file_first_record = np.zeros(len(self._files) + 1, dtype=np.int64)
        np.cumsum(counts, out=self._file_first_record[1:])
        total = int(self._file_first_record[-1])
        if total == 0:
            where = self.filenames[0] if len(self.filenames) == 1 else f"{len(self.filenames)} files"
            raise FormatError(f"no records in {where}", Location(self.filenames[0], 0))
        self._starts = np.concatenate(starts) if len(starts) > 1 else starts[0]
        chunk_starts, chunk_files = [], []
        for number, file_starts in enumerate(starts):
            if not len(file_starts):
                continue
            slots = (file_starts - file_starts[0]) // self.chunk_size_in_bytes
            firsts = np.concatenate([[0], np.flatnonzero(np.diff(slots)) + 1]) + self._file_first_record[number]
            chunk_starts.append(firsts)
            chunk_files.append(np.full(len(firsts), number, dtype=np.int32))
        self._chunk_starts = np.append(np.concatenate(chunk_starts), total).astype(np.int64)
        self._chunk_files = np.concatenate(chunk_files)
        self.num_records = total
        lengths = np.ones(total, dtype=np.int32)
        keys: KeyColumn = NumericKeys(np.arange(total, dtype=np.int64))
        self._index = SequenceIndex(self._chunk_starts, lengths, keys)  # one sample a record, until scanned
        if sequence_length is not None or key is not None:
            lengths, custom = self._scan(sequence_length, key)
            if custom is not None:
                keys = custom
            self._index = SequenceIndex(self._chunk_starts, lengths, keys)

    def _frame_binary(self, file: DataFile) -> np.ndarray:
        try:
            starts, problem, offset = _native.records_walk(file.fd, 0, file.size, _NATIVE_FRAMING[self.framing])
        except RuntimeError as error:  # an I/O error
            raise OSError(f"cannot index record file '{file.path}': {error}") from None
        if problem:
            raise FormatError(f"record {len(starts)} of the file: {problem}", Location(file.path, int(offset)))
        return starts

    def _scan(
        self, sequence_length: Callable[[bytes], int] | None, key: Callable[[bytes], Any] | None
    ) -> tuple[np.ndarray, KeyColumn | None]:
        """Reads every record once to learn the lengths and keys the user's functions give."""
        lengths = np.ones(self.num_records, dtype=np.int64)
        keys: list[Any] = []
        for chunk_id in range(self.num_chunks()):
            first = int(self._chunk_starts[chunk_id])
            records, _ = self._read_records(chunk_id)
            for position, record in enumerate(records):
                if sequence_length is not None:
                    try:
                        length = sequence_length(record)
                    except Exception as error:
                        raise self._record_error(first + position, f"sequence_length raised {_name(error)}") from error
                    if not isinstance(length, (int, np.integer)) or isinstance(length, bool) or length < 1:
                        raise self._record_error(
                            first + position, f"sequence_length returned {length!r}; expected an integer >= 1"
                        )
                    lengths[first + position] = length
                if key is not None:
                    try:
                        keys.append(key(record))
                    except Exception as error:
                        raise self._record_error(first + position, f"key raised {_name(error)}") from error
        return narrow_lengths(lengths), (KeyColumn.of(keys) if key is not None else None)

    # ------------------------------------------------------------------------------- protocol
    def identity(self) -> dict[str, Any]:
        """The framing options, every file (sampled bytes and its records' offsets) and the index."""
        options = {
            "framing": self.framing, "header_lines": self.header_lines, "skip_blank_lines": self.skip_blank_lines,
            "chunk_size_in_bytes": self.chunk_size_in_bytes,
        }  # fmt: skip
        bounds = self._file_first_record.tolist()
        files = [file_entry(f, [self._starts[a:b]]) for f, a, b in zip(self._files, bounds, bounds[1:])]
        return {**super().identity(), "options": options, "files": listed(files)}

    @property
    def source_name(self) -> str:
        if len(self.filenames) == 1:
            return self.filename
        return f"{self.filename} (+{len(self.filenames) - 1} more files)"

    def record_location(self, record: int) -> tuple[str, int]:
        """(file, byte offset) of a record given by its number in the corpus."""
        if not 0 <= record < self.num_records:
            raise IndexError(f"record {record} out of range (0..{self.num_records - 1})")
        file = int(np.searchsorted(self._file_first_record, record, side="right")) - 1
        return self._files[file].path, int(self._starts[record])

    def get_chunk(self, chunk_id: int) -> ParsedChunk:
        a, b = self._chunk_range(chunk_id)
        records, bad_crc = self._read_records(chunk_id)
        n = b - a
        lengths = self._index.lengths[a:b].astype(np.int64)
        bad = np.zeros(n, dtype=bool)
        for position in bad_crc.tolist():
            self._count(a + position, "the data CRC does not match (the record is damaged)", None)
            bad[position] = True
        known = self._known_bad.get(chunk_id)
        if known is not None:
            bad[known] = True
        good = np.flatnonzero(~bad)
        try:
            columns = self._decode_batch([records[i] for i in good.tolist()], lengths[good], one=False)
        except Exception as error:
            columns, found = self._decode_one_by_one(records, lengths, good, a)
            if not found:
                first = a - self._first_of_file(chunk_id)
                raise FormatError(
                    f"records {first}..{first + n - 1} of the file (corpus records {a}..{b - 1}) fail to decode "
                    f"together, but none fails alone: {_describe(error)}",
                    Location(self._files[int(self._chunk_files[chunk_id])].path, int(self._starts[a])),
                ) from error
            bad[found] = True
            good = np.flatnonzero(~bad)
            self._known_bad[chunk_id] = np.flatnonzero(bad)  # later reads decode the rest in one call
        return self._chunk(columns, good, n, bad)

    def _chunk(self, columns: list[Column], good: np.ndarray, n: int, bad: np.ndarray) -> ParsedChunk:
        chunk = ParsedChunk(invalid=bad.astype(np.uint8) if bad.any() else None)
        for stream, (decoded, decoded_counts) in zip(self._streams, columns):
            counts = np.zeros(n, dtype=np.int64)
            counts[good] = decoded_counts  # (the bad records: no samples)
            seq_offsets = exclusive_cumsum(counts)
            data: DenseStream | SparseStream
            if isinstance(decoded, SparseStream):
                data = SparseStream(decoded.values, decoded.indices, decoded.indptr, seq_offsets, decoded.dim)
            else:
                data = DenseStream(decoded.values, seq_offsets)
            for array in vars(data).values():
                if isinstance(array, np.ndarray):
                    array.flags.writeable = False
            chunk[stream.name] = data
        return chunk

    # ------------------------------------------------------------------------------- reading
    def _first_of_file(self, chunk_id: int) -> int:
        return int(self._file_first_record[int(self._chunk_files[chunk_id])])

    def _read_records(self, chunk_id: int) -> tuple[list[bytes], np.ndarray]:
        """The records of a chunk (one ``pread``), and the positions of TFRecords whose data CRC is wrong."""
        a, b = self._chunk_range(chunk_id)
        number = int(self._chunk_files[chunk_id])
        file = self._files[number]
        file.require_open()
        begin = int(self._starts[a])
        last = b == int(self._file_first_record[number + 1])
        end = file.size if last else int(self._starts[b])
        try:
            buffer = _pread_exact(file, begin, end - begin)
        finally:  # after the read (a change before or during it is seen), also explaining a short one
            file.check_unchanged("indexed")
        starts = self._starts[a:b] - begin
        if self.framing == "lines":
            array = np.frombuffer(buffer, dtype=np.uint8)
            newlines = np.flatnonzero(array == 10)
            ends = np.append(newlines, len(buffer))[np.searchsorted(newlines, starts)]
            ends -= (ends > starts) & (array[np.maximum(ends - 1, 0)] == 13)  # \r\n
            bad = np.zeros(0, dtype=np.int64)
        else:
            ends = np.append(starts[1:], len(buffer)) - self._trailer
            bad = _native.records_bad_crcs(buffer, starts) if self.check_crc else np.zeros(0, dtype=np.int64)
            starts = starts + self._header
        return [buffer[s:e] for s, e in zip(starts.tolist(), ends.tolist())], bad

    # ------------------------------------------------------------------------------- decoding
    def _decode_batch(self, records: list[bytes], lengths: np.ndarray, one: bool) -> list[Column]:
        """Decodes records (a chunk's, or one record with ``one``) into checked columns; raises
        ``_RecordError`` or the decoder's own exception."""
        n = len(records)
        if self.decode_chunk is not None and not (one and self.decode is not None):
            output = self.decode_chunk(records) if n else {}
            if n and not isinstance(output, Mapping):
                raise _RecordError(
                    None, None, f"decode_chunk returned {type(output).__name__}; expected a dict of stream -> arrays"
                )
            columns = []
            for stream in self._streams:
                if n and stream.field not in output:
                    raise _RecordError(None, stream.name, f"no stream '{stream.field}' in what decode_chunk returned")
                columns.append(self._column(stream, output[stream.field] if n else [], n, lengths))
        else:
            assert self.decode is not None
            outputs = [self.decode(record) for record in records]
            columns = []
            for stream in self._streams:
                try:
                    value = [output[stream.field] for output in outputs]
                except Exception:
                    _find_missing(outputs, stream)
                    raise
                columns.append(self._column(stream, value, n, lengths))
        self._check_lengths(columns, lengths)
        return columns

    def _decode_one_by_one(
        self, records: list[bytes], lengths: np.ndarray, good: np.ndarray, first: int
    ) -> tuple[list[Column], list[int]]:
        """Decodes the good records one at a time: every one that fails is counted (its error named) and
        skipped. Returns the columns of the records that decoded and the positions of those that did not."""
        parts: list[list[Column]] = []
        found = []
        for position in good.tolist():
            try:
                parts.append(self._decode_batch([records[position]], lengths[position : position + 1], one=True))
            except Exception as error:
                stream = error.stream if isinstance(error, _RecordError) else None
                self._count(first + position, _describe(error), stream)
                found.append(position)
        columns = [_concatenate([p[k] for p in parts], info) for k, info in enumerate(self._infos)]
        return columns, found

    def _column(self, stream: _Stream, value: Any, n: int, lengths: np.ndarray) -> Column:
        """One stream of ``n`` records as the decoder gave it, brought to CNTK's forms (a list of one array or CSR
        matrix per record; stacked samples, one per record or as many as the records' lengths) and converted by
        :func:`~cntkio._src.formats.stream_data.convert` (checked; real values cast to the precision)."""
        info = self._infos[self._numbers[stream.name]]
        try:
            if isinstance(value, (list, tuple)):
                if len(value) != n:
                    raise _RecordError(
                        None, stream.name, f"{len(value)} arrays for {n} records (every stream needs one per record)"
                    )
                if stream.sparse:
                    return self._convert([_sparse_item(stream, item, p) for p, item in enumerate(value)], info)
                stacked = _one_sample_each(stream, value, n)
                if stacked is not None:  # the common case, checked in one NumPy call
                    return self._convert(stacked.astype(self.dtype), info)
                return self._convert([_dense_item(stream, item, p) for p, item in enumerate(value)], info)
            if stream.sparse:
                matrix = _sparse_item(stream, value, None).copy()  # (the chunk's arrays are made read-only)
                rows = matrix.shape[0]
            else:
                matrix = np.array(_stacked_dense(stream, value), dtype=self.dtype, order="C")
                rows = len(matrix)
            total = int(lengths.sum())
            if rows == n:
                return self._convert(matrix, info)
            if rows == total:
                offsets = exclusive_cumsum(lengths)
                flat = (
                    SparseStream(matrix.data, matrix.indices, matrix.indptr, offsets, info.shape[0])
                    if stream.sparse
                    else DenseStream(matrix, offsets)
                )
                return self._convert(flat, info)
            expected = f"{n}" if total == n else f"{n} (one per record) or {total} (the records' lengths)"
            raise _RecordError(None, stream.name, f"{rows} samples stacked for {n} records; expected {expected}")
        except UserDataError as error:  # what the converter refused: a record's error once narrowed down to it
            raise _RecordError(None, stream.name, error.reason) from None

    def _convert(self, data: Any, info: StreamInformation) -> Column:
        stream, counts = convert(data, info, "unsafe", Where(self.source_name, None, info.name))
        return stream, counts

    def _check_lengths(self, columns: list[Column], lengths: np.ndarray) -> None:
        """Every stream has a sample in every record, and the longest (or the defines_mb_size stream) has
        as many as the record's length."""
        if not len(lengths):
            return
        counts = np.stack([c for _, c in columns])
        got = counts[self._defining] if self._defining is not None else counts.max(axis=0)
        wrong = np.flatnonzero((got != lengths) | (counts.min(axis=0) < 1))
        if len(wrong):
            position = int(wrong[0])
            empty = np.flatnonzero(counts[:, position] < 1)
            if len(empty):
                raise _RecordError(position, self._streams[int(empty[0])].name, "the stream has no sample")
            which = self._defining if self._defining is not None else int(np.argmax(counts[:, position]))
            raise _RecordError(
                position,
                self._streams[which].name,
                f"{int(got[position])} samples, but the record's length is {int(lengths[position])}"
                + ("" if self._has_lengths else " (one sample a record; give sequence_length= for sequences)"),
            )

    # --------------------------------------------------------------------------------- errors
    def _count(self, record: int, reason: str, stream: str | None) -> None:
        """Counts a bad record against ``max_errors`` (once, however often it is read)."""
        chunk = int(np.searchsorted(self._chunk_starts, record, side="right")) - 1
        self.errors.add(record, functools.partial(self._record_error, record, reason, stream), chunk=chunk)

    def _record_error(self, record: int, reason: str, stream: str | None = None) -> FormatError:
        file = int(np.searchsorted(self._file_first_record, record, side="right")) - 1
        in_file = record - int(self._file_first_record[file])
        line = None
        if self.framing == "lines":
            skipped = int(np.searchsorted(self._blank_lines[file], in_file, side="right"))
            line = self.header_lines + in_file + skipped + 1
        keys = getattr(self, "_keys", None)
        key = keys[record] if keys is not None else record
        where = f"record {in_file} of the file" + (f" (record {record} of the corpus)" if record != in_file else "")
        location = Location(self._files[file].path, int(self._starts[record]), line, None, key, stream)
        return FormatError(f"{where}: {reason}", location)

    # ---------------------------------------------------------------------------------- files
    def describe(self) -> dict[str, Any]:
        """Summary of the index."""
        return {
            "files": list(self.filenames),
            "framing": self.framing,
            "records": self.num_records,
            "chunks": self.num_chunks(),
            "samples": int(self._index.lengths.sum(dtype=np.int64)),
        }


# ------------------------------------------------------------------------------------- helpers
def _streams_from_defs(streams: Any) -> list[_Stream]:
    result = []
    for name, definition in iter_stream_defs(streams):
        field = definition.field if definition.field is not None else name
        if definition.shape is None:
            raise ConfigError(f"stream '{name}': a shape is required")
        shape = tuple(
            int(d) for d in (definition.shape if isinstance(definition.shape, tuple) else (definition.shape,))
        )
        if definition.is_sparse:
            if len(shape) != 1:
                raise ConfigError(f"stream '{name}': a sparse stream's shape must be one integer, got {shape}")
            if shape[0] > MAX_SPARSE_DIM:
                raise ConfigError(f"stream '{name}': sparse dim {shape[0]} exceeds {MAX_SPARSE_DIM}")
        result.append(_Stream(name, str(field), shape, bool(definition.is_sparse), bool(definition.defines_mb_size)))
    check_stream_set([s.name for s in result], [s.field for s in result], "field", [s.defines_mb_size for s in result])
    return result


def _pread_exact(file: DataFile, offset: int, size: int) -> bytes:
    data = os.pread(file.fd, size, offset)
    while len(data) < size:  # pread may return less than asked (very large reads); the rest follows
        more = os.pread(file.fd, size - len(data), offset + len(data))
        if not more:
            raise FormatError(
                "the file is shorter than when it was indexed (truncated while being read?)",
                Location(file.path, offset + len(data)),
            )
        data += more
    return data


def _frame_lines(file: DataFile, header_lines: int, skip_blank: bool, block: int) -> tuple[np.ndarray, np.ndarray]:
    """Start offsets of the records of a text file, one per line, read in blocks with ``pread`` and framed
    with NumPy (8 bytes a record are kept). Also returns, for every blank line skipped, the number of records
    before it (to give line numbers in messages)."""
    starts: list[np.ndarray] = []
    blanks: list[np.ndarray] = []
    kept = 0  # records so far
    lines = 0  # complete lines so far
    line_start = 0  # where the line being read began
    pending_text = False  # whether the bytes of that line read so far hold a non-blank
    position = 0
    while position < file.size:
        data = os.pread(file.fd, min(block, file.size - position), position)
        if not data:
            raise FormatError(
                "the file is shorter than its size (truncated while indexed?)", Location(file.path, position)
            )
        array = np.frombuffer(data, dtype=np.uint8)
        newlines = np.flatnonzero(array == 10)
        if len(newlines):
            relative = np.empty(len(newlines), dtype=np.int64)
            relative[0] = line_start - position  # <= 0: the first line began in an earlier block
            relative[1:] = newlines[:-1] + 1
            keep = np.ones(len(newlines), dtype=bool)
            keep[: max(0, min(header_lines - lines, len(newlines)))] = False
            if skip_blank:
                text = _non_blank(array[: newlines[-1] + 1])
                has_text = np.logical_or.reduceat(text, np.maximum(relative, 0))
                has_text[0] |= pending_text
                blank = keep & ~has_text
                if blank.any():
                    before = kept + np.cumsum(keep & has_text) - (keep & has_text)
                    blanks.append(before[blank])
                keep &= has_text
            starts.append(relative[keep] + position)
            kept += int(np.count_nonzero(keep))
            lines += len(newlines)
            line_start = position + int(newlines[-1]) + 1
            tail = array[int(newlines[-1]) + 1 :]
            pending_text = skip_blank and bool(_non_blank(tail).any())
        elif skip_blank:
            pending_text = pending_text or bool(_non_blank(array).any())
        position += len(data)
    if line_start < file.size and lines >= header_lines and (pending_text or not skip_blank):  # no newline at the end
        starts.append(np.array([line_start], dtype=np.int64))
    result = np.concatenate(starts) if starts else np.zeros(0, dtype=np.int64)
    return result.astype(np.int64, copy=False), (np.concatenate(blanks) if blanks else np.zeros(0, dtype=np.int64))


def _find_missing(outputs: list[Any], stream: _Stream) -> None:
    """Raises the error naming the first of a decoder's outputs that is not a dict holding the stream."""
    for position, output in enumerate(outputs):
        if not isinstance(output, Mapping):
            raise _RecordError(
                position, None, f"decode returned {type(output).__name__}; expected a dict of stream -> array"
            )
        if stream.field not in output:
            raise _RecordError(position, stream.name, f"no stream '{stream.field}' in what decode returned")


def _one_sample_each(stream: _Stream, value: Sequence[Any], n: int) -> np.ndarray | None:
    """The records' arrays stacked as (n, *shape) when each is one sample of real numbers; else None (then
    they are checked one by one)."""
    try:
        stacked = np.array(value)
    except (ValueError, TypeError):
        return None
    if stacked.dtype.kind not in "biuf":
        return None
    if stacked.shape == (n, *stream.shape):
        return stacked
    if stream.shape == (1,) and stacked.shape == (n,):
        return stacked.reshape(n, 1)
    return None


def _non_blank(array: np.ndarray) -> np.ndarray:
    """Which bytes are not blanks (\\t \\n \\v \\f \\r and space): two comparisons, no table lookup."""
    text: np.ndarray = ((array - np.uint8(9)) > 4) & (array != 32)  # uint8 arithmetic wraps: 9..13 -> 0..4
    return text


def _dense_item(stream: _Stream, item: Any, position: int | None) -> np.ndarray:
    """One record's samples of a dense stream as (samples, *shape)."""
    array = _as_array(stream, item, position)
    if array.shape == stream.shape:
        return array.reshape(1, *stream.shape)
    if stream.shape == (1,) and array.ndim <= 1:  # a scalar, or one value per sample
        return array.reshape(-1, 1)
    if array.shape[1:] == stream.shape:
        return array
    raise _RecordError(
        position,
        stream.name,
        f"an array of shape {array.shape}; expected one sample of shape {stream.shape} or (samples, "
        f"{', '.join(map(str, stream.shape))})",
    )


def _stacked_dense(stream: _Stream, value: Any) -> np.ndarray:
    """A chunk's stacked samples of a dense stream as (samples, *shape) (a 1-D array for shape 1)."""
    array = _as_array(stream, value, None)
    if array.ndim >= 1 and array.shape[1:] == stream.shape:
        return array
    if stream.shape == (1,) and array.ndim == 1:
        return array.reshape(-1, 1)
    raise _RecordError(
        None,
        stream.name,
        f"stacked samples of shape {array.shape}; expected (samples, {', '.join(map(str, stream.shape))})",
    )


def _sparse_item(stream: _Stream, item: Any, position: int | None) -> Any:
    """Samples of a sparse stream (a SciPy sparse matrix or a dense array) as a CSR matrix (samples, dim)."""
    dim = stream.shape[0]
    if issparse(item):
        matrix = item.reshape(1, -1) if item.ndim == 1 else item
        if matrix.shape[1] != dim:
            raise _RecordError(
                position, stream.name, f"a sparse matrix of shape {matrix.shape}; expected (samples, {dim})"
            )
        matrix = matrix.tocsr()
        _check_dtype(stream, matrix.data.dtype, position)
        indptr = np.asarray(matrix.indptr, dtype=np.int64)
        if len(indptr) != matrix.shape[0] + 1 or (len(indptr) > 1 and np.any(np.diff(indptr) < 0)):
            raise _RecordError(position, stream.name, "a malformed CSR matrix (indptr)")
        a, b = int(indptr[0]), int(indptr[-1])
        if a < 0 or b > min(len(matrix.data), len(matrix.indices)):
            raise _RecordError(position, stream.name, "a malformed CSR matrix (indptr beyond its entries)")
        if a == 0:
            return matrix
        return scipy_sparse().csr_matrix((matrix.data[a:b], matrix.indices[a:b], indptr - a), shape=matrix.shape)
    dense = _dense_item(stream, item, position) if position is not None else _stacked_dense(stream, item)
    rows, columns = np.nonzero(dense)
    indptr = exclusive_cumsum(np.bincount(rows, minlength=len(dense)))
    return scipy_sparse().csr_matrix((dense[rows, columns], columns, indptr), shape=(len(dense), dim))


def _concatenate(columns: list[Column], info: StreamInformation) -> Column:
    """The columns of records decoded one at a time, as one."""
    counts = np.concatenate([c for _, c in columns]) if columns else np.zeros(0, dtype=np.int64)
    parts = [data for data, _ in columns]
    if info.is_sparse:
        if not parts:
            start = np.zeros(1, dtype=np.int64)
            return SparseStream(np.zeros(0, info.dtype), np.zeros(0, np.int32), start, start, info.shape[0]), counts
        sparse = [p for p in parts if isinstance(p, SparseStream)]
        indptr = exclusive_cumsum(np.concatenate([np.diff(p.indptr) for p in sparse]))
        values, indices = np.concatenate([p.values for p in sparse]), np.concatenate([p.indices for p in sparse])
        return SparseStream(values, indices, indptr, exclusive_cumsum(counts), info.shape[0]), counts
    if not parts:
        return DenseStream(np.zeros((0, *info.shape), dtype=info.dtype), np.zeros(1, dtype=np.int64)), counts
    return DenseStream(np.concatenate([p.values for p in parts]), exclusive_cumsum(counts)), counts


def _as_array(stream: _Stream, value: Any, position: int | None) -> np.ndarray:
    if issparse(value):
        value = value.toarray()
    try:
        array = np.asarray(value)
    except (ValueError, TypeError) as error:
        raise _RecordError(position, stream.name, f"not an array ({_name(error)})") from None
    _check_dtype(stream, array.dtype, position)
    return array


def _check_dtype(stream: _Stream, dtype: np.dtype[Any], position: int | None) -> None:
    if dtype.kind not in "biuf":
        raise _RecordError(position, stream.name, f"values of dtype {dtype} are not real numbers")


def _name(error: BaseException) -> str:
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _describe(error: BaseException) -> str:
    """The reason of a failed record: what was wrong with the decoder's output, or what it raised."""
    if isinstance(error, _RecordError):
        return error.reason
    return f"the decoder raised {_name(error)}"
