"""Ray Data integration: CTF corpora read by a Ray cluster, one read task per chunk of each file, and CBF shards
written by it — for validating or converting corpora beyond one machine.

``ray.data.read_datasource(CTFDatasource(paths, streams))`` plans its tasks from the cntkio index of every file (built
once, with ``cache_index=True``: give ``index_cache_dir=`` on storage the nodes share, and each task loads the index
instead of scanning its file). A task parses its chunk natively and yields one Arrow block of that chunk's
sequences: ``file`` (the file's number in the corpus), ``chunk``, ``row`` (its place in the chunk), ``key`` (the
sequence id, as text), and per stream — dense ``<name>`` (the sequence's samples flattened) and ``<name>.samples``;
sparse ``<name>.indices``, ``<name>.values`` and ``<name>.entries`` (entries per sample).
``Dataset.write_datasink(CBFDatasink(directory, datasource))`` writes each chunk's rows as
``part-<file>-<chunk>-<first row>.cbf`` (one file per block of a chunk: Ray may split a large chunk's rows): output
named by the input, so the same bytes whatever the cluster size. Sequences a counted error damaged (``max_errors``)
are left out, as :func:`cntkio.write_cbf` does.

Install with ``pip install "cntkio[ray]"``.

Example::

    import ray, cntkio.ray
    corpus = cntkio.ray.CTFDatasource("corpus/part-*.ctf", streams)
    ray.data.read_datasource(corpus).write_datasink(cntkio.ray.CBFDatasink("corpus-cbf/", corpus))
    source = MinibatchSource(CBFDeserializer("corpus-cbf/part-*.cbf"))
    again = ray.data.read_datasource(cntkio.ray.CBFDatasource("corpus-cbf/part-*.cbf"))   # CBF through Ray too
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from cntkio._src.common.streams import StreamInformation
from cntkio._src.formats.cbf import CBFDeserializer
from cntkio._src.formats.cbf_writer import write_cbf
from cntkio._src.formats.ctf import CTFDeserializer
from cntkio._src.formats.protocol import ChunkIndex, DenseStream, Deserializer, ParsedChunk, SparseStream
from cntkio._src.formats.shards import expand_paths

__all__ = ["CBFDatasink", "CBFDatasource", "CTFDatasource"]


try:
    import pyarrow as _pa
    import pyarrow.compute as _pc
    from ray.data import Datasink, Datasource, ReadTask
    from ray.data.block import BlockMetadata
except ImportError as error:  # pragma: no cover - exercised where ray is missing
    raise ImportError('cntkio.ray needs Ray Data: pip install "cntkio[ray]" (or "ray[data]")') from error


class _FileDatasource(Datasource):  # type: ignore[misc]
    """Files of one cntkio format as a Ray dataset of sequences, one read task per chunk of each file, planned from
    the reader's index (see the module)."""

    reader: Any = None  # the deserializer class
    name = ""

    def __init__(self, paths: Any, streams: Any, options: dict[str, Any]):
        self._paths = expand_paths(paths) or [os.fsdecode(paths)]
        self._streams = streams
        self._options = options
        self._plan: list[tuple[int, str, int, int]] = []  # (file, path, chunk, estimated bytes)
        for number, path in enumerate(self._paths):
            reader = self.reader(path, streams, **options)
            try:
                self.stream_infos = reader.stream_infos()
                size = os.path.getsize(path) // max(reader.num_chunks(), 1)
                self._plan += [(number, path, chunk, size) for chunk in range(reader.num_chunks())]
            finally:
                reader.close()

    def get_name(self) -> str:
        return self.name

    def estimate_inmemory_data_size(self) -> int:
        return sum(size for *_, size in self._plan)

    def get_read_tasks(self, parallelism: int, per_task_row_limit: int | None = None, data_context: Any = None
                       ) -> list[Any]:  # fmt: skip
        """One task per chunk of each file, whatever ``parallelism`` (so blocks are the same on any cluster)."""
        del parallelism, per_task_row_limit, data_context
        return [
            ReadTask(
                functools.partial(_read_chunk, self.reader, path, self._streams, self._options, number, chunk),
                BlockMetadata(num_rows=None, size_bytes=size, exec_stats=None, input_files=(path,)),
            )
            for number, path, chunk, size in self._plan
        ]


class CTFDatasource(_FileDatasource):
    """CTF files as a Ray dataset of sequences, one read task per chunk (see the module).

    Args:
        paths: a file, a list of files or a glob pattern (files in path order, as a sharded corpus).
        streams: the ``StreamDefs`` of :class:`cntkio.CTFDeserializer`.
        index_cache_dir: where the index caches go (storage every node reads, on a cluster).
        options: other :class:`cntkio.CTFDeserializer` keywords (``chunk_size_in_bytes``, ``max_errors``, ...).
    """

    reader = CTFDeserializer
    name = "CTF"

    def __init__(self, paths: Any, streams: Any, *, index_cache_dir: str | os.PathLike[str] | None = None,
                 **options: Any):  # fmt: skip
        options = {**options, "cache_index": True}
        if index_cache_dir is not None:
            options["index_cache_dir"] = os.fspath(index_cache_dir)
        super().__init__(paths, streams, options)


class CBFDatasource(_FileDatasource):
    """CBF files as a Ray dataset of sequences, one read task per chunk of each file (the file's own chunks).

    Args:
        paths: a file, a list of files or a glob pattern.
        streams: the ``StreamDefs`` of :class:`cntkio.CBFDeserializer` (None: every stream of the file).
        options: other :class:`cntkio.CBFDeserializer` keywords.
    """

    reader = CBFDeserializer
    name = "CBF"

    def __init__(self, paths: Any, streams: Any = None, **options: Any):
        super().__init__(paths, streams, options)


def _read_chunk(reader_class: Any, path: str, streams: Any, options: dict[str, Any], number: int, chunk: int
                ) -> Iterator[Any]:  # fmt: skip
    reader = reader_class(path, streams, **options)
    try:
        data = reader.get_chunk(chunk)
        keys = reader.chunk_index(chunk).keys
        infos = reader.stream_infos()
    finally:
        reader.close()
    kept = np.arange(len(keys)) if data.invalid is None else np.flatnonzero(data.invalid == 0)
    yield _table(number, chunk, keys, kept, data, infos)


def _list(offsets: np.ndarray, values: np.ndarray, kept: np.ndarray) -> Any:
    """A large-list Arrow column of ``values[offsets[i]:offsets[i+1]]`` for the kept rows i."""
    column = _pa.LargeListArray.from_arrays(_pa.array(offsets.astype(np.int64)), _pa.array(values))
    return column if len(kept) == len(offsets) - 1 else column.take(_pa.array(kept))


def _table(number: int, chunk: int, keys: Any, kept: np.ndarray, data: ParsedChunk,
           infos: list[StreamInformation]) -> Any:  # fmt: skip
    # ids as text in every file (a corpus may mix numeric and text ids; Arrow blocks need one schema)
    key_array = np.asarray(keys)[kept].astype(str)
    columns: dict[str, Any] = {
        "file": _pa.array(np.full(len(kept), number, dtype=np.int32)),
        "chunk": _pa.array(np.full(len(kept), chunk, dtype=np.int32)),
        "row": _pa.array(kept.astype(np.int32)),  # the sequence's place in its chunk
        "key": _pa.array(key_array),
    }
    for info in infos:
        stream = data[info.name]
        offsets = np.asarray(stream.seq_offsets, dtype=np.int64)
        samples = np.diff(offsets).astype(np.int32)
        if isinstance(stream, SparseStream):
            indptr = np.asarray(stream.indptr, dtype=np.int64)
            columns[f"{info.name}.indices"] = _list(indptr[offsets], np.asarray(stream.indices), kept)
            columns[f"{info.name}.values"] = _list(indptr[offsets], np.asarray(stream.values), kept)
            columns[f"{info.name}.entries"] = _list(offsets, np.diff(indptr).astype(np.int32), kept)
        else:
            width = int(np.prod(info.shape))
            flat = np.asarray(stream.values).reshape(-1)
            columns[info.name] = _list(offsets * width, flat, kept)
            columns[f"{info.name}.samples"] = _pa.array(samples[kept])
    return _pa.table(columns)


class CBFDatasink(Datasink):  # type: ignore[misc]
    """Writes the rows of each (file, chunk) of a block of a :class:`CTFDatasource` dataset as
    ``part-<file>-<chunk>-<first row>.cbf`` in ``directory`` (one CBF chunk each, the streams as ``source`` declares
    them, rows in their order), so the output depends only on the input and the block size, never on the cluster."""

    def __init__(self, directory: str | os.PathLike[str], source: _FileDatasource):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._infos = list(source.stream_infos)

    def get_name(self) -> str:
        return "CBF"

    def write(self, blocks: Iterable[Any], ctx: Any) -> list[str]:
        del ctx
        written = []
        for block in blocks:
            table = block if isinstance(block, _pa.Table) else _pa.Table.from_pandas(block)
            if not table.num_rows:
                continue
            parts = np.unique(np.stack([table["file"].to_numpy(), table["chunk"].to_numpy()], axis=1), axis=0)
            for number, chunk in parts.tolist():
                rows = table.filter(_pc.and_(_pc.equal(table["file"], number), _pc.equal(table["chunk"], chunk)))
                rows = rows.sort_by("row")
                first = int(rows["row"][0].as_py())  # a chunk's rows may come in several blocks: one file each
                path = self.directory / f"part-{number:05d}-{chunk:06d}-{first:08d}.cbf"
                write_cbf(_ArrowChunk(rows, self._infos), path, chunk_size_in_bytes=None, progress=False)
                written.append(str(path))
        return written


class _ArrowChunk(Deserializer):
    """The rows of one chunk (an Arrow table of :func:`_table`'s columns) as a one-chunk deserializer."""

    def __init__(self, table: Any, infos: list[StreamInformation]):
        self._table, self._infos = table, infos

    @property
    def source_name(self) -> str:
        return "ray block"

    def stream_infos(self) -> list[StreamInformation]:
        return list(self._infos)

    def num_chunks(self) -> int:
        return 1

    def chunk_index(self, chunk_id: int) -> ChunkIndex:
        lengths = np.zeros(self._table.num_rows, dtype=np.int64)
        for info in self._infos:
            lengths = np.maximum(lengths, self._samples(info))
        keys = self._table["key"].to_numpy(zero_copy_only=False)
        return ChunkIndex(chunk_id, keys if keys.dtype.kind in "iu" else keys.tolist(), lengths)

    def _samples(self, info: StreamInformation) -> np.ndarray:
        if info.is_sparse:
            return np.diff(self._offsets(f"{info.name}.entries"))
        samples: np.ndarray = self._table[f"{info.name}.samples"].to_numpy().astype(np.int64)
        return samples

    def _offsets(self, column: str) -> np.ndarray:
        offsets: np.ndarray = self._table[column].combine_chunks().offsets.to_numpy().astype(np.int64)
        return offsets

    def _values(self, column: str) -> np.ndarray:
        values: np.ndarray = self._table[column].combine_chunks().flatten().to_numpy()
        return values

    def get_chunk(self, chunk_id: int) -> ParsedChunk:
        chunk = ParsedChunk()
        for info in self._infos:
            samples = self._samples(info)
            seq_offsets = np.concatenate([[0], np.cumsum(samples)]).astype(np.int64)
            if info.is_sparse:
                entries = self._values(f"{info.name}.entries").astype(np.int64)
                indptr = np.concatenate([[0], np.cumsum(entries)]).astype(np.int64)
                chunk[info.name] = SparseStream(self._values(f"{info.name}.values"),
                                                self._values(f"{info.name}.indices").astype(np.int32), indptr,
                                                seq_offsets, int(info.shape[0]))  # fmt: skip
            else:
                values = self._values(info.name).reshape(-1, *info.shape)
                chunk[info.name] = DenseStream(values, seq_offsets)
        return chunk
