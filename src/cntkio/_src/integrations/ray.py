"""Ray Data integration: any cntkio data read by a Ray cluster, one read task per chunk, and CBF shards written by it
— for validating or converting corpora beyond one machine.

:class:`DeserializerDatasource` reads the deserializers a picklable factory makes (primary first, joined by key as
``MinibatchSource`` joins them; a list of factories: a part each), planning a task per chunk of each part's primary
(:class:`~cntkio._src.integrations.chunk_rows.ChunkPlan`). The format-specific datasources are factories over it:
:class:`CTFDatasource` and :class:`CBFDatasource` (a part per file; CTF indexes built once, with
``cache_index=True``: give ``index_cache_dir=`` on storage the nodes share, and each task loads the index instead of
scanning its file), :class:`HTKMLFDatasource` (HTK features, the MLF labels joined inside each task) and
:class:`ImageDatasource` (images decoded and transformed, augmentation drawn from (seed, sweep, key, view)). A task
yields one Arrow block of its chunk's sequences (:mod:`~cntkio._src.integrations.chunk_rows`): ``file`` (the part's
number), ``chunk``, ``row`` (its place in the chunk), ``key`` (the sequence id, as text), and per stream — dense
``<name>`` (the sequence's samples flattened) and ``<name>.samples``; sparse ``<name>.indices``, ``<name>.values``
and ``<name>.entries`` (entries per sample). ``datasource.errors()`` gives the errors counted under ``max_errors`` as
a dataset of error records.

``datasource.dataset().write_datasink(CBFDatasink(directory, datasource))`` writes each chunk's rows as
``part-<file>-<chunk>-<first row>.cbf`` (one file per block of a chunk: Ray may split a large chunk's rows): output
named by the input, so the same bytes whatever the cluster size (``dataset()`` asks Ray for a block per chunk).
Sequences a counted error damaged (``max_errors``) are left out, as :func:`cntkio.write_cbf` does.

Install with ``pip install "cntkio[ray]"``.

Example::

    import ray, cntkio.ray
    corpus = cntkio.ray.CTFDatasource("corpus/part-*.ctf", streams)
    corpus.dataset().write_datasink(cntkio.ray.CBFDatasink("corpus-cbf/", corpus))
    source = MinibatchSource(CBFDeserializer("corpus-cbf/part-*.cbf"))
    again = ray.data.read_datasource(cntkio.ray.CBFDatasource("corpus-cbf/part-*.cbf"))   # CBF through Ray too
    speech = cntkio.ray.HTKMLFDatasource(feature_streams, label_streams, "states.list")
    print(speech.errors().take_all())
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from cntkio._src.common.errors import ConfigError
from cntkio._src.common.streams import StreamInformation, iter_stream_defs
from cntkio._src.corpus.join import JoinReport
from cntkio._src.formats.cbf import CBFDeserializer
from cntkio._src.formats.cbf_writer import write_cbf
from cntkio._src.formats.ctf import CTFDeserializer
from cntkio._src.formats.htk_features import HTKFeatureDeserializer
from cntkio._src.formats.htk_labels import HTKMLFDeserializer
from cntkio._src.formats.image import Base64ImageDeserializer, ImageDeserializer
from cntkio._src.formats.protocol import ChunkIndex, DenseStream, Deserializer, ParsedChunk, SparseStream
from cntkio._src.formats.shards import expand_paths
from cntkio._src.integrations.chunk_rows import ChunkPlan, chunk_errors, file_factories, read_chunk
from cntkio._src.integrations.encoded_images import EncodedImages

__all__ = [
    "CBFDatasink",
    "CBFDatasource",
    "CTFDatasource",
    "DeserializerDatasource",
    "HTKMLFDatasource",
    "ImageDatasource",
]


try:
    import pyarrow as _pa
    import pyarrow.compute as _pc
    import ray.data
    from ray.data import Datasink, Datasource, ReadTask
    from ray.data.block import BlockMetadata
except ImportError as error:  # pragma: no cover - exercised where ray is missing
    raise ImportError('cntkio.ray needs Ray Data: pip install "cntkio[ray]" (or "ray[data]")') from error


class DeserializerDatasource(Datasource):  # type: ignore[misc]
    """Any cntkio data as a Ray dataset of sequences, one read task per chunk of each part's primary deserializer
    (see the module).

    Args:
        parts: a picklable factory making the deserializers of the corpus (primary first, joined by key as
            :class:`~cntkio.MinibatchSource` joins them) — e.g. ``functools.partial(CTFDeserializer, path, streams)``
            —, a list of factories (a part each: the ``file`` column numbers them), or deserializers made beforehand
            (pickled to the tasks).
        name: the datasource's name in Ray's progress and statistics.
        sweep: the sweep whose data a sweep-dependent deserializer gives (random image augmentation is drawn from
            the seed, the sweep and the key, so it is the same in any task).
        length_mismatch: ``"pad"`` (default: each stream keeps its own samples), ``"drop"`` or ``"error"``, as in
            MinibatchSource.
    """

    def __init__(self, parts: Any, *, name: str = "cntkio", sweep: int = 0, length_mismatch: str = "pad"):
        self._plan = ChunkPlan(parts, sweep=sweep, length_mismatch=length_mismatch)
        self.stream_infos = self._plan.stream_infos
        self.name = name

    @property
    def chunk_plan(self) -> ChunkPlan:
        """The parts and chunks the tasks read (what :func:`cntkio.hf.iterable_dataset` also takes)."""
        return self._plan

    @property
    def join_reports(self) -> list[JoinReport | None]:
        """Per part, how its deserializers join (None: a single deserializer), found when the datasource was made."""
        return [part.join_report for part in self._plan.parts]

    def get_name(self) -> str:
        return self.name

    def estimate_inmemory_data_size(self) -> int:
        return sum(sum(part.chunk_bytes) for part in self._plan.parts)

    def get_read_tasks(self, parallelism: int, per_task_row_limit: int | None = None, data_context: Any = None
                       ) -> list[Any]:  # fmt: skip
        """One task per chunk of each part, whatever ``parallelism`` (so blocks are the same on any cluster)."""
        del parallelism, per_task_row_limit, data_context
        return self._tasks(read_chunk)

    def _tasks(self, read: Any) -> list[Any]:
        plan = self._plan
        options = (plan.sweep, plan.length_mismatch)  # and each task's share of its part's join
        return [
            ReadTask(
                functools.partial(_one_table, read, part.factory, part.number, chunk, *options, part.chunk_join(chunk)),
                BlockMetadata(num_rows=None, size_bytes=size, exec_stats=None, input_files=(part.name,)),
            )
            for part in plan.parts
            for chunk, size in enumerate(part.chunk_bytes)
        ]

    def dataset(self, **options: Any) -> Any:
        """``ray.data.read_datasource(self, override_num_blocks=<its tasks>, **options)``: a block per chunk. Without
        ``override_num_blocks`` Ray splits each task's block in ``k`` when the tasks are fewer than about twice the
        cluster's CPUs, so the blocks (and the files a :class:`CBFDatasink` names after them) would depend on the
        cluster's size; with it they depend only on the data (and on ``DataContext.target_max_block_size``, past
        which Ray splits a block anyway)."""
        options.setdefault("override_num_blocks", len(self._plan.tasks))
        return ray.data.read_datasource(self, **options)

    def errors(self) -> Any:
        """The errors the read counts under ``max_errors``, as a Ray dataset with a row per error (columns
        ``file`` (the part), ``chunk``, ``source`` (the file the error is in), ``offset``, ``line``, ``column``,
        ``key``, ``reason``, ``message``): the same tasks again, each parsing its chunk with a fresh reader and
        giving what it counted. The errors found while indexing come with each part's chunk 0; a secondary's
        chunk read by several tasks gives its errors in each."""
        return ray.data.read_datasource(_ErrorDatasource(self))


class _ErrorDatasource(Datasource):  # type: ignore[misc]
    def __init__(self, source: DeserializerDatasource):
        self._source = source

    def get_name(self) -> str:
        return f"{self._source.name} errors"

    def estimate_inmemory_data_size(self) -> int | None:
        return None

    def get_read_tasks(self, parallelism: int, per_task_row_limit: int | None = None, data_context: Any = None
                       ) -> list[Any]:  # fmt: skip
        del parallelism, per_task_row_limit, data_context
        return self._source._tasks(chunk_errors)


def _one_table(read: Any, *args: Any) -> Iterator[Any]:
    yield read(*args)


class CTFDatasource(DeserializerDatasource):
    """CTF files as a Ray dataset of sequences, one read task per chunk (see the module).

    Args:
        paths: a file, a list of files or a glob pattern (files in path order, as a sharded corpus).
        streams: the ``StreamDefs`` of :class:`cntkio.CTFDeserializer`.
        index_cache_dir: where the index caches go (storage every node reads, on a cluster).
        options: other :class:`cntkio.CTFDeserializer` keywords (``chunk_size_in_bytes``, ``max_errors``, ...).
    """

    def __init__(self, paths: Any, streams: Any, *, index_cache_dir: str | os.PathLike[str] | None = None,
                 **options: Any):  # fmt: skip
        options = {**options, "cache_index": True}
        if index_cache_dir is not None:
            options["index_cache_dir"] = os.fspath(index_cache_dir)
        files = expand_paths(paths) or [os.fsdecode(paths)]
        super().__init__(file_factories(CTFDeserializer, files, streams, **options), name="CTF")


class CBFDatasource(DeserializerDatasource):
    """CBF files as a Ray dataset of sequences, one read task per chunk of each file (the file's own chunks).

    Args:
        paths: a file, a list of files or a glob pattern.
        streams: the ``StreamDefs`` of :class:`cntkio.CBFDeserializer` (None: every stream of the file).
        options: other :class:`cntkio.CBFDeserializer` keywords.
    """

    def __init__(self, paths: Any, streams: Any = None, **options: Any):
        files = expand_paths(paths) or [os.fsdecode(paths)]
        super().__init__(file_factories(CBFDeserializer, files, streams, **options), name="CBF")


class HTKMLFDatasource(DeserializerDatasource):
    """HTK features joined with MLF labels by utterance key, one read task per chunk of utterances of the features
    (the labels looked up by key inside the task, as ``MinibatchSource([features, labels])`` joins them).

    Args:
        features: the ``StreamDefs`` of :class:`cntkio.HTKFeatureDeserializer` (``scp=``, ``context=``, ...;
            several streams: a deserializer each, the first one primary).
        labels: the ``StreamDefs`` of :class:`cntkio.HTKMLFDeserializer` (``mlf=``).
        label_mapping_file: the state list (:class:`cntkio.HTKMLFDeserializer`'s first argument).
        feature_options: other :class:`cntkio.HTKFeatureDeserializer` keywords (``chunk_frames``, ``max_errors``).
        label_options: other :class:`cntkio.HTKMLFDeserializer` keywords.
        length_mismatch: as :class:`DeserializerDatasource`.
    """

    def __init__(self, features: Any, labels: Any, label_mapping_file: str | os.PathLike[str] | None, *,
                 feature_options: dict[str, Any] | None = None, label_options: dict[str, Any] | None = None,
                 length_mismatch: str = "pad"):  # fmt: skip
        factory = functools.partial(
            _speech, features, labels, label_mapping_file, dict(feature_options or {}), dict(label_options or {})
        )
        super().__init__(factory, name="HTK+MLF", length_mismatch=length_mismatch)


def _speech(features: Any, labels: Any, label_mapping_file: Any, feature_options: dict[str, Any],
            label_options: dict[str, Any]) -> list[Deserializer]:  # fmt: skip
    readers: list[Deserializer] = [
        HTKFeatureDeserializer({name: definition}, **feature_options) for name, definition in iter_stream_defs(features)
    ]
    return [*readers, HTKMLFDeserializer(label_mapping_file, labels, **label_options)]


class ImageDatasource(DeserializerDatasource):
    """Images of a CNTK image map file, decoded and transformed, as a Ray dataset (a task per chunk of
    ``images_per_chunk`` images). Random transforms draw from (seed, sweep, key, view), so a conversion gives the
    same pixels on any cluster; ``sweep`` picks the sweep whose augmentation is read.

    With ``encoded=True`` the image column holds each image's encoded bytes as they are in its file (an Arrow
    ``large_binary``; nothing decoded or transformed; for Parquet or a training job that decodes itself: a
    :class:`CBFDatasink` holds numbers only and refuses it).

    Args:
        map_file: the map file (:class:`cntkio.ImageDeserializer`).
        streams: its ``StreamDefs`` (an image stream with its transforms, an optional label stream).
        sweep: as :class:`DeserializerDatasource`.
        base64: the file holds base64-encoded images (:class:`cntkio.Base64ImageDeserializer`).
        encoded: the encoded bytes instead of the decoded pixels.
        options: other keywords of the deserializer (``seed``, ``layout``, ``images_per_chunk``, ``max_errors``, ...).
    """

    def __init__(self, map_file: str | os.PathLike[str], streams: Any, *, sweep: int = 0, base64: bool = False,
                 encoded: bool = False, **options: Any):  # fmt: skip
        factory: Any
        if encoded:
            factory = functools.partial(EncodedImages, os.fspath(map_file), streams, base64=base64, **options)
        else:
            reader = Base64ImageDeserializer if base64 else ImageDeserializer
            factory = functools.partial(reader, os.fspath(map_file), streams, **options)
        super().__init__(factory, name="images", sweep=sweep)


class CBFDatasink(Datasink):  # type: ignore[misc]
    """Writes the rows of each (file, chunk) of a block of a dataset any of the datasources read as
    ``part-<file>-<chunk>-<first row>.cbf`` in ``directory`` (one CBF chunk each, the streams as ``source`` declares
    them, rows in their order), so the output depends only on the input and the block size, never on the cluster."""

    def __init__(self, directory: str | os.PathLike[str], source: DeserializerDatasource):
        if source.chunk_plan.encoded:
            raise ConfigError(
                f"CBF holds numbers; streams {sorted(source.chunk_plan.encoded)} are encoded bytes (write them to "
                "Parquet, or read the images decoded)"
            )
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
