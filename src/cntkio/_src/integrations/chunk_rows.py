"""A corpus as Arrow tables, one per chunk: what the Ray datasources, the Hugging Face datasets and
``cntkio convert --to parquet`` read (one builder of rows and columns for all of them).

A corpus is read in *parts*, each made by a picklable *factory*: a callable (``functools.partial`` of a deserializer
class, or a module-level function) returning a deserializer, a plug-in, a group, or a list of them — primary first,
joined by key as :class:`~cntkio.MinibatchSource` joins them (:func:`cntkio._src.corpus.join.join`). A CTF corpus of
several files is a part per file; HTK features with MLF labels, or an image map, one part. A :class:`ChunkPlan`
opens each part once (in the driver) to learn its streams and chunks and, for joined deserializers, to join the whole
part (:class:`PartJoin`: the sequences kept and the secondaries' matches, as :class:`~cntkio.MinibatchSource` joins
them); :func:`read_chunk` then opens the part again wherever it runs (a Ray task, a DataLoader worker), parses one
chunk of its primary, takes the chunk's share of that join (:class:`ChunkJoin`; never a join of the chunk alone,
which could keep or drop other sequences), parses only the secondary chunks holding its matches and returns one
Arrow table, a row per joined sequence:

========================================  ==========================================================================
column                                    holds
========================================  ==========================================================================
``file``                                  the part's number (a file's, for a corpus of files)
``chunk``, ``row``                        the primary's chunk, the sequence's place in it
``key``                                   the sequence id, as text
``<name>``, ``<name>.samples``            a dense stream: its samples flattened (large list), how many samples
``<name>.indices``/``.values``/``.entries``  a sparse stream: every sample's indices and values, entries per sample
========================================  ==========================================================================

Sequences a counted error damaged (``max_errors``; in any of the joined deserializers) and primary sequences a
secondary lacks are left out, as :func:`cntkio.write_cbf` leaves them out. :func:`read_chunk` reads with a fresh
reader, so ``max_errors`` is that chunk's budget (each task's, in Ray and ``datasets``); :meth:`ChunkPlan.tables`
reads each part's chunks in order with one reader, spending one budget over the part as a MinibatchSource does.
Sweep-dependent data (random image augmentation) is read as sweep ``sweep`` reads it: drawn from (seed, sweep, key,
view), the same in any task.

:func:`chunk_errors` gives the errors a chunk's read counts, as a table (:data:`ERROR_COLUMNS`). This module needs
pyarrow (imported when first used).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from cntkio._src.common.errors import ConfigError, FormatError
from cntkio._src.common.streams import StreamInformation
from cntkio._src.corpus.join import JoinReport, LengthMismatch, join
from cntkio._src.formats.protocol import Deserializer, SparseStream, StreamData, flatten_deserializers

__all__ = ["ERROR_COLUMNS", "ChunkPlan", "EncodedStream", "Factory", "chunk_errors", "read_chunk", "schema"]

#: Makes the deserializers of one part (primary first); must pickle to run in other processes.
Factory = Callable[[], Any]

#: The columns of an error record: the part and chunk whose read counted it, where it is (the file, byte offset,
#: line, column and sequence key as the reader gives them) and why (``reason``; ``message`` is the whole text).
ERROR_COLUMNS = ("file", "chunk", "source", "offset", "line", "column", "key", "reason", "message")


@dataclass(frozen=True)
class EncodedStream:
    """A stream of bytes, a sample per sequence (an image file as it is): ``items[i]`` is sequence i's. A
    deserializer giving one names it in ``encoded_streams`` (its :class:`StreamInformation` says dense uint8), and
    its column is ``large_binary``."""

    items: list[bytes]
    seq_offsets: np.ndarray  # int64, (num_sequences + 1,): one sample each


def encoded_streams(deserializers: Sequence[Any]) -> frozenset[str]:
    """The names of the streams the deserializers give as bytes (:class:`EncodedStream`)."""
    return frozenset(name for d in deserializers for name in getattr(d, "encoded_streams", ()))


def _pyarrow() -> Any:
    try:
        import pyarrow
    except ImportError as error:  # pragma: no cover - pyarrow comes with ray[data] and datasets
        raise ImportError('reading cntkio data as Arrow tables needs pyarrow: pip install "pyarrow"') from error
    return pyarrow


class _Given:
    """A factory giving deserializers made beforehand (pickled with it to other processes; never closed by a read,
    as its maker may keep using them)."""

    def __init__(self, deserializers: Any):
        self.deserializers = deserializers

    def __call__(self) -> Any:
        return self.deserializers


def as_factories(parts: Any) -> list[Factory]:
    """``parts`` as a list of factories: a factory, a list of factories, or deserializers (a deserializer, a plug-in, a
    group or a list of them: one part, primary first)."""
    if callable(parts) and not isinstance(parts, Deserializer):
        return [parts]
    factories = isinstance(parts, (list, tuple)) and all(callable(p) and not isinstance(p, Deserializer) for p in parts)
    if factories and parts:
        return list(parts)
    flatten_deserializers(parts)  # (a TypeError naming what is not a deserializer)
    return [_Given(parts)]


def open_part(factory: Factory) -> list[Deserializer]:
    """The deserializers a factory makes, primary first."""
    deserializers = flatten_deserializers(factory())
    if not deserializers:
        raise ConfigError("a cntkio data factory made no deserializer")
    return deserializers


def close_part(factory: Factory, deserializers: list[Deserializer]) -> None:
    if not isinstance(factory, _Given):
        for deserializer in deserializers:
            deserializer.close()


@dataclass(frozen=True)
class ChunkJoin:
    """One primary chunk's share of its part's join: the chunk's rows kept (counted from the chunk's first
    sequence) and, per secondary, the sequence joined to each kept row."""

    rows: np.ndarray
    matches: tuple[np.ndarray, ...]


@dataclass(frozen=True)
class PartJoin:
    """The join of a whole part (as :class:`~cntkio.MinibatchSource` joins it: one length reference, one set of
    sequences kept), cut into the primary's chunks by :meth:`chunk`. A chunk's rows are its slice of this join, never
    a join of the chunk alone (which could keep or drop other sequences)."""

    kept: np.ndarray | None  # absolute primary rows kept (None: all)
    matches: tuple[np.ndarray, ...]
    chunk_starts: np.ndarray

    @staticmethod
    def of(deserializers: Sequence[Deserializer], length_mismatch: LengthMismatch) -> tuple[PartJoin, JoinReport]:
        primary = deserializers[0].sequence_index()
        joined = join(deserializers, 0, primary.num_sequences, length_mismatch=length_mismatch)
        starts = np.asarray(primary.chunk_starts, dtype=np.int64)
        return PartJoin(joined.kept, tuple(joined.matches), starts), joined.report

    def chunk(self, chunk: int) -> ChunkJoin:
        first, stop = int(self.chunk_starts[chunk]), int(self.chunk_starts[chunk + 1])
        if self.kept is None:
            return ChunkJoin(np.arange(stop - first, dtype=np.int64), tuple(m[first:stop] for m in self.matches))
        lo, hi = (int(i) for i in np.searchsorted(self.kept, [first, stop]))
        rows = np.asarray(self.kept[lo:hi], dtype=np.int64) - first
        return ChunkJoin(rows, tuple(m[lo:hi] for m in self.matches))


@dataclass(frozen=True)
class PartInfo:
    """What the plan knows of a part: its factory, its primary's chunks, an estimate of each chunk's bytes and, for
    joined deserializers, the part's join (each chunk's task is given its share: :meth:`chunk_join`)."""

    number: int
    factory: Factory
    name: str
    chunk_bytes: tuple[int, ...]
    join_report: JoinReport | None
    joined: PartJoin | None = None

    def chunk_join(self, chunk: int) -> ChunkJoin | None:
        """Chunk ``chunk``'s share of the part's join (None: a single deserializer)."""
        return None if self.joined is None else self.joined.chunk(chunk)


class ChunkPlan:
    """The chunks of a corpus read in parts (see the module): opens each part once to learn its streams (the same in
    every part), its chunks and, for joined deserializers, how they join (a join of the whole part, validating keys
    and lengths as a :class:`~cntkio.MinibatchSource` would; a failure raises here, in the driver).

    Args:
        parts: a factory, a list of factories (a part each), or deserializers (one part; see :func:`as_factories`).
        sweep: which sweep's data a sweep-dependent deserializer (random augmentation) gives.
        length_mismatch: ``"pad"`` (each stream keeps its samples), ``"drop"`` or ``"error"``, as MinibatchSource.
    """

    def __init__(self, parts: Any, *, sweep: int = 0, length_mismatch: LengthMismatch | str = LengthMismatch.PAD):
        self.length_mismatch = LengthMismatch.parse(length_mismatch)
        if self.length_mismatch is LengthMismatch.TRUNCATE:
            raise ConfigError("length_mismatch='truncate' is for minibatches; give 'pad', 'drop' or 'error'")
        if isinstance(sweep, bool) or int(sweep) < 0:
            raise ConfigError(f"sweep must be >= 0, got {sweep}")
        self.sweep = int(sweep)
        self.parts: list[PartInfo] = []
        self.stream_infos: list[StreamInformation] = []
        self.encoded: frozenset[str] = frozenset()
        for number, factory in enumerate(as_factories(parts)):
            deserializers = open_part(factory)
            try:
                infos = [info for d in deserializers for info in d.stream_infos()]
                if number == 0:
                    self.stream_infos, self.encoded = infos, encoded_streams(deserializers)
                elif _described(infos) != _described(self.stream_infos):
                    raise ConfigError(f"{deserializers[0].source_name}: its streams differ from the first part's")
                report, joined = None, None
                if len(deserializers) > 1:
                    joined, report = PartJoin.of(deserializers, self.length_mismatch)
                name = deserializers[0].source_name
                self.parts.append(PartInfo(number, factory, name, _chunk_bytes(deserializers[0]), report, joined))
            finally:
                close_part(factory, deserializers)
        names = [info.name for info in self.stream_infos]
        if len(set(names)) < len(names):
            raise ConfigError(f"two deserializers give a stream of the same name ({', '.join(names)}): rename one")
        reserved = {"file", "chunk", "row", "key"} & set(names)
        if reserved:
            raise ConfigError(f"stream names {sorted(reserved)} are column names of the rows; rename the streams")

    @property
    def tasks(self) -> list[tuple[int, int]]:
        """(part, chunk) of every chunk, in corpus order."""
        return [(p.number, c) for p in self.parts for c in range(len(p.chunk_bytes))]

    def read(self, part: int, chunk: int) -> Any:
        """The rows of one chunk (:func:`read_chunk`; a fresh reader, so ``max_errors`` is this chunk's budget)."""
        info = self.parts[part]
        return read_chunk(info.factory, part, chunk, self.sweep, self.length_mismatch, info.chunk_join(chunk))

    def errors(self, part: int, chunk: int) -> Any:
        """The errors reading one chunk counts (:func:`chunk_errors`)."""
        info = self.parts[part]
        return chunk_errors(info.factory, part, chunk, self.sweep, self.length_mismatch, info.chunk_join(chunk))

    def tables(self) -> Iterator[Any]:
        """The rows of every chunk, in order (:attr:`tasks`), each part's chunks read by one reader: its
        deserializers count errors over the whole part, so ``max_errors`` is the part's budget, as a
        :class:`~cntkio.MinibatchSource` reading it spends it (past it, the deserializer raises)."""
        for info in self.parts:
            reader = _PartReader(info.factory, self.sweep, self.length_mismatch, info.joined)
            try:
                for chunk in range(len(info.chunk_bytes)):
                    yield reader.table(info.number, chunk)
            finally:
                reader.close()

    def schema(self) -> Any:
        return schema(self.stream_infos, self.encoded)


def _described(infos: Sequence[StreamInformation]) -> list[tuple[str, bool, tuple[int, ...]]]:
    return [(i.name, i.is_sparse, i.shape) for i in infos]


def _chunk_bytes(primary: Deserializer) -> tuple[int, ...]:
    known = primary.chunk_file_bytes()
    if known is not None:
        return tuple(int(b) for b in known)
    index = primary.sequence_index()
    totals = np.concatenate([[0], np.cumsum(np.asarray(index.lengths, dtype=np.int64))])
    samples = np.diff(totals[index.chunk_starts])  # per chunk
    width = sum(
        (16 if info.is_sparse else int(np.prod(info.shape)) * np.dtype(info.dtype).itemsize)
        for info in primary.stream_infos()
    )
    return tuple(int(s) * width for s in samples)


def schema(infos: Sequence[StreamInformation], encoded: frozenset[str] = frozenset()) -> Any:
    """The Arrow schema of the rows of a corpus with these streams (``encoded``: those given as bytes)."""
    pa = _pyarrow()
    fields = [("file", pa.int32()), ("chunk", pa.int32()), ("row", pa.int32()), ("key", pa.string())]
    for info in infos:
        value = pa.from_numpy_dtype(np.dtype(info.dtype))
        if info.name in encoded:
            fields.append((info.name, pa.large_binary()))
        elif info.is_sparse:
            fields += [
                (f"{info.name}.indices", pa.large_list(pa.int32())),
                (f"{info.name}.values", pa.large_list(value)),
                (f"{info.name}.entries", pa.large_list(pa.int32())),
            ]
        else:
            fields += [(info.name, pa.large_list(value)), (f"{info.name}.samples", pa.int32())]
    return pa.schema(fields)


def _list(offsets: np.ndarray, values: np.ndarray) -> Any:
    """A large-list Arrow array of ``values[offsets[i]:offsets[i+1]]`` (offsets rebased to 0; values copied, as a
    chunk's buffers may be reused once the chunk is gone)."""
    pa = _pyarrow()
    offsets = np.asarray(offsets, dtype=np.int64)
    start, stop = int(offsets[0]), int(offsets[-1])
    return pa.LargeListArray.from_arrays(pa.array(offsets - start), pa.array(np.array(values[start:stop])))


def _stream_columns(info: StreamInformation, stream: StreamData | EncodedStream) -> dict[str, Any]:
    """The columns of one stream over every sequence of a parsed chunk."""
    pa = _pyarrow()
    if isinstance(stream, EncodedStream):
        return {info.name: pa.array(stream.items, pa.large_binary())}
    offsets = np.asarray(stream.seq_offsets, dtype=np.int64)
    if isinstance(stream, SparseStream) or info.is_sparse:
        assert isinstance(stream, SparseStream)
        indptr = np.asarray(stream.indptr, dtype=np.int64)
        return {
            f"{info.name}.indices": _list(indptr[offsets], np.asarray(stream.indices, dtype=np.int32)),
            f"{info.name}.values": _list(indptr[offsets], np.asarray(stream.values)),
            f"{info.name}.entries": _list(offsets, np.diff(indptr).astype(np.int32)),
        }
    width = int(np.prod(info.shape))
    flat = np.asarray(stream.values).reshape(-1)
    return {
        info.name: _list(offsets * width, flat),
        f"{info.name}.samples": pa.array(np.diff(offsets).astype(np.int32)),
    }


def _invalid(chunk: Any, count: int) -> np.ndarray:
    invalid = getattr(chunk, "invalid", None)
    return np.zeros(count, dtype=bool) if invalid is None else np.asarray(invalid) != 0


class _PartReader:
    """One chunk's read of a part: its deserializers open, the secondaries' chunks parsed as needed."""

    def __init__(self, factory: Factory, sweep: int, length_mismatch: LengthMismatch, joined: PartJoin | None = None):
        self.factory, self.sweep, self.length_mismatch = factory, sweep, length_mismatch
        self.deserializers = open_part(factory)
        self._joined = joined

    def _chunk_join(self, chunk: int) -> ChunkJoin:
        """The chunk's share of the whole part's join (joined here once per reader when the plan gave none)."""
        if self._joined is None:
            self._joined = PartJoin.of(self.deserializers, self.length_mismatch)[0]
        return self._joined.chunk(chunk)

    def close(self) -> None:
        close_part(self.factory, self.deserializers)

    def _parse(self, deserializer: Deserializer, chunk: int) -> Any:
        if deserializer.sweep_dependent:
            return deserializer.get_chunk_of_sweep(chunk, self.sweep)
        return deserializer.get_chunk(chunk)

    def table(self, number: int, chunk: int, joined: ChunkJoin | None = None) -> Any:
        pa = _pyarrow()
        primary = self.deserializers[0]
        starts = primary.sequence_index().chunk_starts
        if not 0 <= chunk < len(starts) - 1:
            raise IndexError(f"{primary.source_name}: chunk {chunk} out of range (0..{len(starts) - 2})")
        first, stop = int(starts[chunk]), int(starts[chunk + 1])
        data = self._parse(primary, chunk)
        keys = primary.chunk_index(chunk).keys
        rows = np.arange(stop - first, dtype=np.int64)  # of the primary chunk, the joined ones
        matches: Sequence[np.ndarray] = []
        if len(self.deserializers) > 1:
            if joined is None:
                joined = self._chunk_join(chunk)
            rows, matches = np.asarray(joined.rows, dtype=np.int64), joined.matches
            if len(matches) != len(self.deserializers) - 1 or (len(rows) and int(rows[-1]) >= stop - first):
                raise ConfigError(f"{primary.source_name}: chunk {chunk}'s join does not fit the deserializers")
        keep = ~_invalid(data, stop - first)[rows]
        columns: dict[str, Any] = {}
        for info in primary.stream_infos():
            columns.update(_stream_columns(info, data[info.name]))
        taken = [(columns, rows)]
        for deserializer, match in zip(self.deserializers[1:], matches):
            secondary_columns, positions, valid = self._secondary(deserializer, match)
            keep &= valid
            taken.append((secondary_columns, positions))
        kept_keys = [str(k) for k in np.asarray(keys, dtype=object)[rows[keep]]]  # as text: one schema for any ids
        selected: dict[str, Any] = {
            "file": pa.array(np.full(len(kept_keys), number, dtype=np.int32)),
            "chunk": pa.array(np.full(len(kept_keys), chunk, dtype=np.int32)),
            "row": pa.array(rows[keep].astype(np.int32)),
            "key": pa.array(kept_keys, pa.string()),
        }
        for stream_columns, positions in taken:
            index = pa.array(positions[keep])
            selected.update({name: column.take(index) for name, column in stream_columns.items()})
        infos = [i for d in self.deserializers for i in d.stream_infos()]
        return pa.table(selected).cast(schema(infos, encoded_streams(self.deserializers)))

    def _secondary(
        self, deserializer: Deserializer, match: np.ndarray
    ) -> tuple[dict[str, Any], np.ndarray, np.ndarray]:
        """The columns of the secondary chunks holding sequences ``match``, each one's row in them, and whether it
        is valid."""
        pa = _pyarrow()
        starts = deserializer.sequence_index().chunk_starts
        homes = np.searchsorted(starts, match, side="right") - 1
        needed = np.unique(homes)
        parts: dict[str, list[Any]] = {}
        invalid: list[np.ndarray] = []
        base = np.zeros(len(needed), dtype=np.int64)
        total = 0
        for n, chunk in enumerate(needed.tolist()):
            data = self._parse(deserializer, chunk)
            count = int(starts[chunk + 1] - starts[chunk])
            base[n] = total - int(starts[chunk])
            total += count
            invalid.append(_invalid(data, count))
            for info in deserializer.stream_infos():
                for name, column in _stream_columns(info, data[info.name]).items():
                    parts.setdefault(name, []).append(column)
        positions = match + base[np.searchsorted(needed, homes)] if len(match) else match.astype(np.int64)
        if not parts:  # no sequence needed: empty columns of the streams' types
            fields = schema(deserializer.stream_infos(), encoded_streams([deserializer]))
            empty = {f.name: pa.array([], f.type) for f in fields if f.name not in ("file", "chunk", "row", "key")}
            return empty, positions, np.ones(0, dtype=bool)
        columns = {name: pa.concat_arrays(arrays) for name, arrays in parts.items()}
        valid = ~np.concatenate(invalid)[positions]
        return columns, positions, valid


def read_chunk(factory: Factory, number: int, chunk: int, sweep: int = 0,
               length_mismatch: LengthMismatch | str = LengthMismatch.PAD,
               joined: ChunkJoin | None = None) -> Any:  # fmt: skip
    """The rows of chunk ``chunk`` of the part ``factory`` makes (numbered ``number``), as one Arrow table.
    ``joined``: the chunk's share of the part's join (:meth:`PartInfo.chunk_join`); without it the whole part is
    joined here (so the chunk keeps the sequences a :class:`~cntkio.MinibatchSource` keeps). A fresh reader:
    ``max_errors`` is this chunk's budget."""
    reader = _PartReader(factory, sweep, LengthMismatch.parse(length_mismatch))
    try:
        return reader.table(number, chunk, joined)
    finally:
        reader.close()


def chunk_errors(factory: Factory, number: int, chunk: int, sweep: int = 0,
                 length_mismatch: LengthMismatch | str = LengthMismatch.PAD,
                 joined: ChunkJoin | None = None) -> Any:  # fmt: skip
    """The errors counted (``max_errors``) while reading chunk ``chunk`` of a part, as a table of
    :data:`ERROR_COLUMNS`: those of its primary chunk and of the secondary chunks it reads; the errors found while
    indexing (before any chunk is read) come with chunk 0. A fresh reader counts them, so each task reports its own."""
    reader = _PartReader(factory, sweep, LengthMismatch.parse(length_mismatch))
    try:
        ledgers = [ledger for d in reader.deserializers for ledger, _ in d.ledgers()]
        before = [0 if chunk == 0 else len(ledger.errors) for ledger in ledgers]
        reader.table(number, chunk, joined)
        found = [error for ledger, b in zip(ledgers, before) for error in ledger.errors[b:]]
    finally:
        reader.close()
    return errors_table(number, chunk, found)


def errors_table(number: int, chunk: int, errors: Sequence[FormatError]) -> Any:
    pa = _pyarrow()
    at = [e.location for e in errors]
    return pa.table(
        {
            "file": pa.array([number] * len(errors), pa.int32()),
            "chunk": pa.array([chunk] * len(errors), pa.int32()),
            "source": pa.array([a.file for a in at], pa.string()),
            "offset": pa.array([a.offset for a in at], pa.int64()),
            "line": pa.array([a.line for a in at], pa.int64()),
            "column": pa.array([a.column for a in at], pa.int64()),
            "key": pa.array([None if a.sequence_key is None else str(a.sequence_key) for a in at], pa.string()),
            "reason": pa.array([e.reason for e in errors], pa.string()),
            "message": pa.array([str(e) for e in errors], pa.string()),
        }
    )


def rows_of(plan: ChunkPlan, tasks: Sequence[tuple[int, int]]) -> Iterator[dict[str, Any]]:
    """Every row of the given chunks, as Python dicts, in order."""
    for part, chunk in tasks:
        yield from plan.read(part, chunk).to_pylist()


def file_factories(reader: Any, paths: Sequence[str], *args: Any, **options: Any) -> list[Factory]:
    """A factory per file: ``reader(path, *args, **options)``."""
    return [functools.partial(reader, os.fspath(path), *args, **options) for path in paths]
