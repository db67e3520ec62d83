"""CNTK Text Format (CTF) deserializer: native index and parser behind the Deserializer protocol."""

from __future__ import annotations

import contextlib
import enum
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from cntkio import _native
from cntkio._src.common.errors import ConfigError, FormatError, Location
from cntkio._src.common.keys import KeyColumn, NumericKeys, RangeKeys, TextKeys
from cntkio._src.common.streams import StreamInformation, check_stream_set, iter_stream_defs, parse_precision
from cntkio._src.common.system import available_cores, parse_parallelism
from cntkio._src.formats.data_file import FileBacked, open_data_file
from cntkio._src.formats.error_ledger import ANY_CHUNK, ErrorLedger, ErrorRows
from cntkio._src.formats.identity import DIGEST_SCHEME, file_entry, index_digest
from cntkio._src.formats.index_cache import IndexCache, narrowest
from cntkio._src.formats.protocol import DenseStream, IndexedDeserializer, ParsedChunk, SequenceIndex, SparseStream
from cntkio._src.formats.shards import Sharded

logger = logging.getLogger("cntkio")

DEFAULT_CHUNK_SIZE_IN_BYTES = 32 * 1024 * 1024
MAX_SPARSE_DIM = 2**31 - 1


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


_KIND_NAMES = ["", *(kind.name.lower().replace("_", " ") for kind in ErrorKind)]  # by code (1, 2, ...)


@dataclass(frozen=True)
class _Stream:
    name: str
    alias: str
    dim: int
    sparse: bool
    defines_mb_size: bool


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
    check_stream_set([s.name for s in result], [s.alias for s in result], "alias", [s.defines_mb_size for s in result])
    return result


class CTFDeserializer(Sharded, FileBacked, IndexedDeserializer):
    """Reads a CTF file (``cntk.io.CTFDeserializer`` with every option of CNTK's text reader).

    The file stays open from indexing on: chunks are read from it with ``pread``, and a file changed in
    place (size or modification time) since it was indexed is an error, never other data under old keys.

    Args:
        filename: path of the CTF file. Several files (a list, or a glob pattern) are read as one corpus by
            :meth:`CTFDeserializer.sharded` (``formats/shards.py``: a ``ShardedDeserializer`` of one reader per file,
            in the list's order or sorted by path), which ``cntkio.CTFDeserializer`` calls when given several.
        streams: ``StreamDefs(name=StreamDef(field=alias, shape=dim, is_sparse=...))``. (``cntkio.io``'s
            ``CTFDeserializer(path)`` without streams is CNTK 2.0's fluent form: ``compat/legacy.py``'s
            ``CTFStreamMapping``, whose ``map_input(name, dim, format, alias)`` adds the streams.)
        max_errors: number of distinct bad records tolerated (skipped, counted, logged).
        skip_sequence_ids: every line is a sequence; leading ids are ignored.
        chunk_size_in_bytes: target chunk size; a sequence never spans chunks.
        precision: ``'float'`` (float32) or ``'double'`` (float64), any case.
        trace_level: 0 errors only, 1 warnings, 2 info.
        cache_index: keep the index in a file next to the data (:mod:`cntkio._src.formats.index_cache`) and load it
            on the next open instead of scanning the file; a stale or corrupt cache is rebuilt with a warning. Always
            on for remote data (indexing fetches the whole object), kept in the local cache directory.
        index_cache_dir: where to keep index caches instead (for data in a read-only place).
        optional_inputs: allow a stream to be absent from a sequence (zero samples) instead of an error.
        quarantine_file: append the raw lines of every bad record (the whole sequence) to this file when it is first
            counted, for repair (:mod:`cntkio._src.formats.error_ledger`).
        compat: reproduce CNTK's quirks: index length = line count, blank lines are sequences in line
            mode, sparse entries kept unsorted with duplicates, errors counted on every re-read.

    Example::

        reader = CTFDeserializer("train.ctf", StreamDefs(x=StreamDef(field="x", shape=3)))
        chunk = reader.get_chunk(0)       # {"x": DenseStream(values, seq_offsets)}
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
        index_cache_dir: str | os.PathLike[str] | None = None,
        optional_inputs: bool = False,
        compat: bool = False,
        keep_data_in_memory: bool = False,
        num_chunks_to_cache: int | None = None,
        frame_mode: bool = False,
        quarantine_file: str | os.PathLike[str] | None = None,
    ):
        self.filename = os.fspath(filename)
        self._arguments = (
            (self.filename, streams),
            {
                "max_errors": max_errors, "skip_sequence_ids": skip_sequence_ids,
                "chunk_size_in_bytes": chunk_size_in_bytes, "precision": precision, "trace_level": trace_level,
                "optional_inputs": optional_inputs, "compat": compat, "cache_index": cache_index,
                "index_cache_dir": index_cache_dir, "quarantine_file": quarantine_file,
            },
        )  # fmt: skip
        self._streams = _streams_from_defs(streams)
        self.dtype = parse_precision(precision)
        if int(chunk_size_in_bytes) <= 0:
            raise ConfigError(f"chunk_size_in_bytes must be positive, got {chunk_size_in_bytes}")
        self.chunk_size_in_bytes = int(chunk_size_in_bytes)
        self.skip_sequence_ids = bool(skip_sequence_ids)
        self.optional_inputs = bool(optional_inputs)
        self.compat = bool(compat)
        self.trace_level: int = int(trace_level)
        self.errors: ErrorLedger = ErrorLedger(
            int(max_errors), self.trace_level, count_repeats=self.compat, file=self.filename, kind_names=_KIND_NAMES,
            quarantine=quarantine_file,
        )  # fmt: skip
        self.cache_index = bool(cache_index)
        self.index_cache_dir = None if index_cache_dir is None else os.fspath(index_cache_dir)
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
        self._open()
        started = time.perf_counter()
        try:
            self._build_index()
        except BaseException:
            self.close()
            raise
        self.index_seconds = time.perf_counter() - started  # (from the cache or a scan; MinibatchSource.stats)

    # ----------------------------------------------------------------------------------- index
    def _open(self) -> None:
        self.data_file = open_data_file(self.filename, "CTF")
        self._files = [self.data_file]
        self.file_size = self.data_file.size
        if self.data_file.is_remote:  # (indexing fetches the whole object: kept, in the local cache directory)
            self.cache_index = True

    def _build_index(self) -> None:
        defining = next((i for i, s in enumerate(self._streams) if s.defines_mb_size), -1)
        cache = self._index_cache(defining) if self.cache_index else None
        with cache.exclusive() if cache is not None else contextlib.nullcontext():  # (ranks on one node: one builds)
            self._load_or_build_index(cache, defining)

    def _load_or_build_index(self, cache: IndexCache | None, defining: int) -> None:
        cached = cache.load() if cache is not None else None
        index = _unflatten(cached, self.file_size) if cached is not None else None
        built = index is None
        if index is None:
            try:
                with self.data_file.staged([(0, self.file_size)]):  # (a remote object: fetched as it is indexed)
                    index = _compact_ranges(self._native_index(defining))
            except RuntimeError as error:  # an I/O error while reading the file
                raise OSError(f"cannot index CTF file '{self.filename}': {error}") from None
        if index["fatal"]:
            location = Location(
                self.filename, int(index["fatal_offset"]), int(index["fatal_line"]) or None,
                int(index["fatal_column"]) or None,
            )  # fmt: skip
            raise FormatError(index["fatal"], location)
        self.data_file.check_unchanged("indexed")  # (never cache an index of a file that changed meanwhile)
        self.id_mode = IdMode(int(index["mode"]))
        # byte ranges of the sequences: offsets and sizes in the narrowest types that hold them (8 + 8 bytes a
        # sequence as int64 offsets and ends, typically 4 + 2)
        self._offsets: np.ndarray = index["offsets"]
        self._sizes: np.ndarray = index["sizes"]
        lengths: np.ndarray = index["lengths"]
        self._keys: KeyColumn = (
            TextKeys(index["key_blob"], index["key_offsets"]) if self.id_mode == IdMode.TEXT
            else RangeKeys(0, len(self._offsets)) if index["keys"] is None
            else NumericKeys(index["keys"])
        )  # fmt: skip
        self._chunk_first_lines: np.ndarray = index["chunk_first_lines"]
        self._index = SequenceIndex(index["chunk_starts"], lengths, self._keys)
        self._file_digest: str | None = None
        if cache is not None and built:  # with the identity's digests: a warm open neither digests nor samples
            cache.store({**_flatten(index), **self._identity_digests()})
        elif cached is not None and cached.get("identity.scheme") == DIGEST_SCHEME:
            self._cntkio_index_digest, self._file_digest = cached.get("identity.index"), cached.get("identity.file")
        self.errors.add_rows(ANY_CHUNK, index["errors"], self._index_error, self._read_record)
        self.total_lines = int(index["total_lines"])
        self.dropped_lines = int(index["dropped_lines"])
        self.dropped_sequences = int(index["dropped_sequences"])
        self.repeated_ids = int(index["repeated_keys"])
        if len(self._offsets) == 0:
            raise FormatError(
                "no sequence with data for the configured streams", Location(self.filename, int(index["begin"]))
            )
        self._warn_about_index()

    def _index_cache(self, defining: int) -> IndexCache:
        options = {
            "streams": self._aliases, "defining": defining, "skip_sequence_ids": self.skip_sequence_ids,
            "compat": self.compat, "optional_inputs": self.optional_inputs, "chunk_size": self.chunk_size_in_bytes,
        }  # fmt: skip
        return IndexCache(self.data_file, "ctf", options, self.index_cache_dir)

    def _native_index(self, defining: int) -> dict[str, Any]:
        """The native index (``_native.CtfIndexResult``) as the dict an index cache holds: these names in this order
        (the order of the cache file's arrays)."""
        result = _native.ctf_index(
            self.data_file.fd,
            self.file_size,
            self.skip_sequence_ids,
            self._aliases,
            defining,
            self.compat,
            self.compat,
            not self.optional_inputs,
            self.chunk_size_in_bytes,
            threads=available_cores(),
        )
        return {
            "mode": result.mode, "begin": result.begin, "offsets": result.offsets, "ends": result.ends,
            "lengths": result.lengths, "keys": result.keys, "key_blob": result.key_blob,
            "key_offsets": result.key_offsets, "chunk_starts": result.chunk_starts,
            "chunk_first_lines": result.chunk_first_lines, "errors": ErrorRows.from_native(result.errors),
            "dropped_lines": result.dropped_lines, "dropped_sequences": result.dropped_sequences,
            "total_lines": result.total_lines, "repeated_keys": result.repeated_keys, "fatal": result.fatal,
            "fatal_offset": result.fatal_offset, "fatal_line": result.fatal_line, "fatal_column": result.fatal_column,
        }  # fmt: skip

    def _index_error(self, rows: ErrorRows, i: int) -> FormatError:
        """The index's error ``i`` (a sequence dropped for a missing input), built when it is shown."""
        stream = int(rows.stream[i])
        spec = self._streams[stream] if stream >= 0 else None
        text = rows.key_text(i)
        key: Any = text if self.id_mode == IdMode.TEXT else int(text)
        alias = spec.alias if spec else None
        location = Location(self.filename, int(rows.offset[i]), int(rows.line[i]), int(rows.column[i]), key, alias)
        return FormatError(_describe(ErrorKind(int(rows.kind[i])), -1, spec), location)

    def _parse_error(self, rows: ErrorRows, i: int) -> FormatError:
        return self._error(
            int(rows.offset[i]), ErrorKind(int(rows.kind[i])), int(rows.stream[i]), int(rows.sequence[i]),
            int(rows.line[i]), int(rows.column[i]), int(rows.byte[i]),
        )  # fmt: skip

    def _read_record(self, start: int, end: int) -> bytes:
        """A bad record's bytes (for the quarantine file)."""
        return self.data_file.read_ranges([(start, end)])[0]

    def _warn_about_index(self) -> None:
        if self.trace_level < 1:
            return
        if self.dropped_sequences:
            logger.warning(
                "%s: %d sequence(s) without the defining stream were skipped", self.filename, self.dropped_sequences
            )
        if self.repeated_ids:
            logger.warning(
                "%s: %d sequence id(s) appear in more than one place (ids should be unique)",
                self.filename,
                self.repeated_ids,
            )

    # ------------------------------------------------------------------------------- protocol
    def identity(self) -> dict[str, Any]:
        """The index's options, the file (sampled bytes, each sequence's byte count, every 1024th sequence's first
        byte: what lies between sequences) and the index."""
        options = {
            "streams": [list(alias) for alias in self._aliases], "skip_sequence_ids": self.skip_sequence_ids,
            "chunk_size_in_bytes": self.chunk_size_in_bytes, "optional_inputs": self.optional_inputs,
            "compat": self.compat, "defines_mb_size": [s.alias for s in self._streams if s.defines_mb_size],
        }  # fmt: skip
        entry = file_entry(self.data_file, known=self._identity_digests()["identity.file"])
        return {**super().identity(), "options": options, "files": [entry]}

    def _identity_digests(self) -> dict[str, Any]:
        """The identity's digests of the index (:func:`~cntkio._src.formats.identity.index_digest`) and of the file
        (sampled
        bytes and its layout: each sequence's byte count, every 1024th sequence's first byte), made once: when the
        index is built with ``cache_index`` (the cache keeps them beside the index, valid exactly as long as it),
        else when first asked."""
        if self._file_digest is None:
            layout = [self._sizes, self._offsets[::1024]]
            self._file_digest = str(file_entry(self.data_file, layout)["digest"])
        return {
            "identity.scheme": DIGEST_SCHEME,
            "identity.index": index_digest(self),
            "identity.file": self._file_digest,
        }

    def get_chunk(self, chunk_id: int) -> ParsedChunk:
        a, b = self._chunk_range(chunk_id)
        starts = self._offsets[a:b].astype(np.int64)
        ends = starts + self._sizes[a:b]
        start, end = int(starts[0]), int(ends[-1])
        self.data_file.require_open()
        try:
            with self.data_file.staged([(start, end)]):  # (a remote object: the chunk's bytes fetched)
                streams, errors, stats = _native.ctf_parse(
                    self.data_file.fd,
                    start,
                    end,
                    int(self._chunk_first_lines[chunk_id]),
                    starts - start,
                    ends - start,
                    int(self.id_mode),
                    self._aliases,
                    self.dtype == np.float64,
                    not self.compat,
                    threads=min(parse_parallelism(), 8),  # idle parse threads help parse this chunk
                    lengths=self._index.lengths[a:b].astype(np.int64),  # output buffers sized once
                )
        except _native.ShortRead:
            self.data_file.check_unchanged("indexed")
            raise FormatError(
                "the file is shorter than when it was indexed (truncated while being read?)",
                Location(self.filename, end),
            ) from None
        self.data_file.check_unchanged("indexed")  # after the read: a change before or during it is seen
        invalid = None
        if len(errors):
            rows = ErrorRows.from_native(errors, a)
            self.errors.add_rows(chunk_id, rows, self._parse_error, self._read_record)
            invalid = np.zeros(b - a, dtype=np.uint8)
            invalid[errors.sequence] = 1
        if chunk_id not in self._noted_chunks:
            self._noted_chunks.add(chunk_id)
            self._log_notes(stats)
        return self._chunk(streams, invalid)

    def read_sequence(self, sequence: int) -> ParsedChunk | None:
        """Sequence ``sequence`` (of the index) alone, as a chunk of one sequence, parsed from its own byte range
        rather than its chunk's (random access: Grain's :class:`~cntkio.grain.SequenceSource`). None when its parse
        notes anything — a bad record, padded samples, an unknown input: the caller reads its chunk instead, which
        counts and reports them with their line numbers."""
        start = int(self._offsets[sequence])
        end = start + int(self._sizes[sequence])
        self.data_file.require_open()
        try:
            with self.data_file.staged([(start, end)]):
                streams, errors, stats = _native.ctf_parse(
                    self.data_file.fd, start, end, 0, np.zeros(1, dtype=np.int64), np.array([end - start]),
                    int(self.id_mode), self._aliases, self.dtype == np.float64, not self.compat, threads=1,
                    lengths=np.asarray(self._index.lengths[sequence : sequence + 1], dtype=np.int64),
                )  # fmt: skip
        except _native.ShortRead:
            return None  # (the chunk's read reports it)
        self.data_file.check_unchanged("indexed")
        if len(errors) or stats.padded_samples or stats.unknown_inputs:
            return None
        return self._chunk(streams, None)

    def _log_notes(self, stats: _native.CtfParseStats) -> None:
        """Logs a chunk's zero-padded samples (warning) and skipped unknown inputs (info)."""
        if self.trace_level >= 1 and stats.padded_samples:
            logger.warning(
                "%s: %d dense sample(s) had fewer values than their dimension and were zero-padded (first: %s)",
                self.filename,
                stats.padded_samples,
                Location(self.filename, stats.first_padded_offset, stats.first_padded_line,
                         stats.first_padded_column),
            )  # fmt: skip
        if self.trace_level >= 2 and stats.unknown_inputs:
            logger.info(
                "%s: skipped %d sample(s) of inputs not in the configuration (first: %s)",
                self.filename,
                stats.unknown_inputs,
                Location(self.filename, stats.first_unknown_offset, stats.first_unknown_line,
                         stats.first_unknown_column),
            )  # fmt: skip

    def _chunk(self, streams: Sequence[tuple[np.ndarray, ...]], invalid: np.ndarray | None) -> ParsedChunk:
        chunk = ParsedChunk(invalid=invalid)
        for stream, arrays in zip(self._streams, streams):
            for array in arrays:
                array.flags.writeable = False
            if stream.sparse:
                values, indices, indptr, seq_offsets = arrays
                chunk[stream.name] = SparseStream(values, indices, indptr, seq_offsets, stream.dim)
            else:
                values, seq_offsets = arrays
                chunk[stream.name] = DenseStream(values, seq_offsets)
        return chunk

    # --------------------------------------------------------------------------------- errors
    def _error(
        self, offset: int, kind: ErrorKind, stream: int, sequence_index: int, line: int, column: int, byte: int
    ) -> FormatError:
        spec = self._streams[stream] if stream >= 0 else None
        location = Location(
            self.filename, offset, line, column, self._keys[sequence_index], spec.alias if spec else None
        )
        return FormatError(_describe(kind, byte, spec), location)

    def prefetch_chunk(self, chunk_id: int) -> None:
        """The chunk's bytes start arriving if they are remote (:meth:`Deserializer.prefetch_chunk`)."""
        self.data_file.prefetch([self.chunk_bytes(chunk_id)])

    def cancel_prefetch(self, chunk_id: int) -> None:
        self.data_file.cancel_prefetch([self.chunk_bytes(chunk_id)])

    def chunk_bytes(self, chunk_id: int) -> tuple[int, int]:
        """The byte range ``[start, end)`` of a chunk's sequences in the file (for ``cntkio inspect``)."""
        a, b = self._chunk_range(chunk_id)
        return int(self._offsets[a]), int(self._offsets[b - 1]) + int(self._sizes[b - 1])

    def chunk_file_bytes(self) -> np.ndarray:
        """Each chunk's sequences' byte range in the file, as :meth:`get_chunk` reads them (bytes of lines the index
        skipped between sequences count with the sequence before)."""
        starts = self.sequence_index().chunk_starts
        first, last = starts[:-1], starts[1:] - 1
        offsets = self._offsets.astype(np.int64, copy=False)
        sizes: np.ndarray = offsets[last] + self._sizes[last].astype(np.int64) - offsets[first]
        return sizes

    def describe(self) -> dict[str, Any]:
        """Summary of the index (for ``cntkio inspect``)."""
        return {
            "file": self.filename,
            "mode": self.id_mode.name.lower(),
            "sequences": len(self._index.lengths),
            "chunks": self.num_chunks(),
            "lines": self.total_lines,
            "skipped_lines": self.dropped_lines,
            "skipped_sequences": self.dropped_sequences,
        }


def _compact_ranges(index: dict[str, Any]) -> dict[str, Any]:
    """The native index with its byte ranges as offsets and sizes in the narrowest types that hold them, and no
    keys (None) when they are the sequence numbers (files without ids)."""
    offsets, ends, keys = index.pop("offsets"), index.pop("ends"), index["keys"]
    index["offsets"] = narrowest(offsets)
    index["sizes"] = narrowest(ends - offsets)
    numbered = len(keys) and keys.dtype.kind in "iu" and int(keys[0]) == 0 and int(keys[-1]) == len(keys) - 1
    if numbered and bool(np.all(np.diff(keys) == 1)):
        index["keys"] = None
    return index


def _flatten(index: dict[str, Any]) -> dict[str, Any]:
    """The index as arrays and scalars (what an index cache holds)."""
    flat = {name: value for name, value in index.items() if name != "errors"}
    flat.update({f"errors.{column}": values for column, values in index["errors"].columns().items()})
    return flat


def _unflatten(flat: dict[str, Any], file_size: int) -> dict[str, Any] | None:
    """The index from :func:`_flatten` 's form; None when something is missing or does not fit together (then
    the file is indexed again). The cache's checksum vouches for the bytes; these checks are O(chunks)."""
    required = (
        "mode", "begin", "offsets", "sizes", "lengths", "keys", "key_blob", "key_offsets", "chunk_starts",
        "chunk_first_lines", "dropped_lines", "dropped_sequences", "total_lines", "repeated_keys", "fatal",
    )  # fmt: skip
    if any(name not in flat for name in required):
        return None
    index = {name: value for name, value in flat.items() if "." not in name}
    errors = ErrorRows.from_columns({name[7:]: value for name, value in flat.items() if name.startswith("errors.")})
    if errors is None:
        return None
    index["errors"] = errors
    offsets, sizes, keys = index["offsets"], index["sizes"], index["keys"]
    sequences = len(offsets)
    starts = index["chunk_starts"]
    consistent = (
        sequences > 0 and len(sizes) == len(index["lengths"]) == sequences
        and (
            len(index["key_offsets"]) == sequences + 1 if int(index["mode"]) == IdMode.TEXT
            else keys is None or len(keys) == sequences
        )
        and len(starts) >= 2 and int(starts[0]) == 0 and int(starts[-1]) == sequences
        and bool(np.all(np.diff(starts) > 0))
        and int(offsets[-1]) + int(sizes[-1]) <= file_size and int(offsets[0]) >= 0
        and len(index["chunk_first_lines"]) == len(starts) - 1
        and len(errors.key_offsets) == len(errors) + 1
    )  # fmt: skip
    return index if consistent else None


def _describe(kind: ErrorKind, byte: int, stream: _Stream | None) -> str:
    """Human-readable reason of a bad record, quoting the byte at its offset (-1 at the end of a line)."""
    shown = repr(chr(byte)) if byte >= 0 else "end of line"
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
