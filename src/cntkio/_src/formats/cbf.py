"""CNTK Binary Format (CBF) deserializer: the file's own chunks, decoded natively (``pread``, GIL released)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from cntkio import _native
from cntkio._src.common.arrays import narrow_lengths
from cntkio._src.common.errors import ConfigError, FormatError, Location
from cntkio._src.common.keys import RangeKeys
from cntkio._src.common.streams import StreamInformation, iter_stream_defs, parse_precision
from cntkio._src.formats.data_file import FileBacked, open_data_file
from cntkio._src.formats.identity import file_entry
from cntkio._src.formats.protocol import DenseStream, IndexedDeserializer, ParsedChunk, SequenceIndex, SparseStream
from cntkio._src.formats.shards import Sharded

_CHUNK_ENTRY = np.dtype([("offset", "<i8"), ("sequences", "<u4"), ("samples", "<u4")])  # the header's chunk table


class CBFDeserializer(Sharded, FileBacked, IndexedDeserializer):
    """Reads a CBF file (what CNTK's ``ctf2bin.py`` and :func:`cntkio.write_cbf` write).

    The file decides the streams' formats, dimensions and precisions, and its chunks are the reader's
    chunks. Sequence keys are the running sequence number over the file (0, 1, ...).

    Args:
        filename: path of the CBF file; or a list of files, or a glob pattern, read as one corpus
            (:mod:`cntkio._src.formats.shards`).
        streams: ``StreamDefs(name=StreamDef(field=<stream name in the file>))`` renames file streams;
            ``None`` or empty exposes every stream under its own name. As in CNTK, file streams not
            listed are exposed too, under their own names. A ``shape`` or ``is_sparse`` given must agree
            with the file.
        precision: ``None`` (each stream as stored), or ``'float'``/``'double'``, which every stream must
            match (CNTK's rule; convert with :func:`cntkio.write_cbf` otherwise).

    Every malformed file (truncated, wrong magic or version, a chunk table pointing outside the file,
    counts that disagree, sparse indices out of range) raises :class:`~cntkio.FormatError` naming the file,
    the byte offset and the chunk and sequence.

    Example::

        reader = CBFDeserializer("train.cbf")                       # every stream of the file
        source = MinibatchSource(reader, max_sweeps=1)
    """

    def __init__(
        self,
        filename: str | os.PathLike[str],
        streams: Any = None,
        *,
        precision: str | None = None,
        trace_level: int = 1,
        **options: Any,
    ):
        self.filename = os.fspath(filename)
        self._arguments = ((self.filename, streams), {"precision": precision, "trace_level": trace_level, **options})
        unknown = set(options) - {"max_errors", "keep_data_in_memory", "cache_index", "chunk_size_in_bytes"}
        if unknown:
            raise ConfigError(f"CBFDeserializer: unknown option(s) {sorted(unknown)}")
        self.trace_level: int = int(trace_level)
        self.data_file = open_data_file(self.filename, "CBF")
        self._files = [self.data_file]
        try:
            self._file = self._open_native()
            self._infos, self._columns = self._streams(streams, precision)
            self._index = self._build_index()
        except BaseException:
            self.close()
            raise

    def _open_native(self) -> Any:
        try:
            with self.data_file.staged(self._header_ranges()):  # (a remote object: what the native open reads)
                return _native.CbfFile(self.data_file.fd, self.data_file.size)
        except _native.CbfError as error:
            raise self._format_error(error) from None

    def _header_ranges(self) -> list[tuple[int, int]]:
        """What opening the file reads, for a remote object (fetched first, in two rounds: the version and the
        header offset at the end; then the header and each chunk's sequence lengths). A local file: nothing."""
        size = self.data_file.size
        if not self.data_file.is_remote or size < 36:
            return []
        _, tail = self.data_file.read_ranges([(0, 12), (size - 8, size)])
        header = int.from_bytes(tail, "little", signed=True)
        if not 12 <= header <= size - 24:
            return [(0, 12), (size - 8, size)]  # (the native open says what is wrong)
        (table,) = self.data_file.read_ranges([(header, size)])
        chunks = int.from_bytes(table[8:12], "little")
        ranges = [(0, 12), (header, size)]
        if chunks > 0 and chunks * 16 <= len(table) - 8:
            entries = np.frombuffer(table[len(table) - 8 - chunks * 16 : len(table) - 8], dtype=_CHUNK_ENTRY)
            starts = entries["offset"].astype(np.int64)
            ends = starts + entries["sequences"].astype(np.int64) * 4
            ranges += [(int(a), int(b)) for a, b in zip(starts.tolist(), np.minimum(ends, size).tolist())]
        return ranges

    def _streams(self, streams: Any, precision: str | None) -> tuple[list[StreamInformation], list[int]]:
        """The exposed streams (renamed as asked) and, for each, its column in the file."""
        stored = self._file.streams()  # (name, sparse, is_double, dim) in file order
        by_field = {name: number for number, (name, *_) in enumerate(stored)}
        renamed: dict[int, str] = {}
        for name, definition in iter_stream_defs(streams or {}):
            field = definition.field or name
            if field not in by_field:
                raise ConfigError(
                    f"{self.filename}: no stream '{field}' in the file (it has {', '.join(sorted(by_field))})"
                )
            number = by_field[field]
            if number in renamed:
                raise ConfigError(f"{self.filename}: streams '{renamed[number]}' and '{name}' both read '{field}'")
            _, sparse, _, dim = stored[number]
            if definition.shape is not None and definition.dim() != dim:
                raise ConfigError(f"{self.filename}: stream '{field}' has dimension {dim}, not {definition.shape}")
            if definition.is_sparse and not sparse:
                raise ConfigError(f"{self.filename}: stream '{field}' is dense in the file, not sparse")
            renamed[number] = name
        wanted = None
        if precision is not None:
            wanted = parse_precision(precision)
        infos = []
        for number, (name, sparse, is_double, dim) in enumerate(stored):
            dtype = np.dtype(np.float64 if is_double else np.float32)
            if wanted is not None and dtype != wanted:
                raise ConfigError(
                    f"{self.filename}: stream '{name}' is stored as {dtype}, but precision='{precision}' was asked "
                    "(both have to match, as in CNTK; convert the file or leave precision=None)"
                )
            exposed = renamed.get(number, name)
            infos.append(StreamInformation(exposed, number, "sparse" if sparse else "dense", dtype, (dim,), alias=name))
        names = [info.name for info in infos]
        if len(set(names)) != len(names):
            raise ConfigError(f"{self.filename}: two streams would have the same name: {names}")
        return infos, list(range(len(stored)))

    def _build_index(self) -> SequenceIndex:
        offsets, sequences, _ = self._file.chunks()
        self._chunk_offsets = offsets
        starts = np.zeros(len(sequences) + 1, dtype=np.int64)
        np.cumsum(sequences, out=starts[1:])
        lengths = self._file.lengths()
        return SequenceIndex(starts, narrow_lengths(lengths), RangeKeys(0, len(lengths)))

    def chunk_file_bytes(self) -> np.ndarray:
        """A chunk runs to the next one, the last one to the header: the chunk table's offsets end with the header's
        (one more offset than chunks)."""
        return np.diff(self._chunk_offsets.astype(np.int64))

    # ------------------------------------------------------------------------------- protocol
    def identity(self) -> dict[str, Any]:
        """The file (sampled bytes and the chunk table) and the index (the file decides the chunks)."""
        entry = file_entry(self.data_file, [self._chunk_offsets])
        return {**super().identity(), "files": [entry]}

    def prefetch_chunk(self, chunk_id: int) -> None:
        """The chunk's bytes start arriving if they are remote (:meth:`Deserializer.prefetch_chunk`)."""
        self.data_file.prefetch([self._chunk_bytes(chunk_id)])

    def cancel_prefetch(self, chunk_id: int) -> None:
        self.data_file.cancel_prefetch([self._chunk_bytes(chunk_id)])

    def _chunk_bytes(self, chunk_id: int) -> tuple[int, int]:
        return int(self._chunk_offsets[chunk_id]), int(self._chunk_offsets[chunk_id + 1])

    def get_chunk(self, chunk_id: int) -> ParsedChunk:
        self._chunk_range(chunk_id)
        self.data_file.require_open()
        try:
            with self.data_file.staged([self._chunk_bytes(chunk_id)]):
                columns = self._file.decode(chunk_id)
        except _native.CbfError as error:
            self.data_file.check_unchanged("indexed")  # a changed file explains the damage
            raise self._format_error(error) from None
        self.data_file.check_unchanged("indexed")  # after the read: a change before or during it is seen
        chunk = ParsedChunk()
        for info, number in zip(self._infos, self._columns):
            values, seq_offsets, indices, indptr = columns[number]
            if info.is_sparse:
                chunk[info.name] = SparseStream(values, indices, indptr, seq_offsets, info.shape[0])
            else:
                chunk[info.name] = DenseStream(values, seq_offsets)
        return chunk

    def _format_error(self, error: Exception) -> FormatError:
        message, offset, chunk, sequence, stream = error.args
        where = []
        if chunk >= 0:
            where.append(f"chunk {chunk}")
            if sequence >= 0:
                where.append(f"sequence {sequence} of the chunk")
        key = None
        index = getattr(self, "_index", None)
        if index is not None and chunk >= 0 and sequence >= 0:
            key = int(index.chunk_starts[chunk]) + sequence
        stored = self._file.streams() if getattr(self, "_file", None) is not None else []
        name = stored[stream][0] if 0 <= stream < len(stored) else None
        reason = f"{message} ({', '.join(where)})" if where else message
        return FormatError(reason, Location(self.filename, offset, sequence_key=key, input=name))

    def describe(self) -> dict[str, Any]:
        """Summary of the file (for ``cntkio inspect``)."""
        return {"file": self.filename, "sequences": len(self._index.lengths), "chunks": self.num_chunks()}
