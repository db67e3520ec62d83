"""Writing any deserializer's data as CBF (the layout CNTK's ``ctf2bin.py`` writes; binary-format.md §5)."""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from cntkio import _native
from cntkio._src.common.arrays import exclusive_cumsum
from cntkio._src.common.errors import ConfigError
from cntkio._src.common.streams import StreamInformation, parse_precision
from cntkio._src.formats.data_file import replacement_file
from cntkio._src.formats.protocol import DenseStream, Deserializer, ReadsAsDeserializer, SparseStream, as_deserializer

DEFAULT_CBF_CHUNK_SIZE_IN_BYTES = 32 * 1024 * 1024
MAGIC = 0x636E746B5F62696E


def write_cbf(
    reader: Deserializer | ReadsAsDeserializer,
    path: str | os.PathLike[str],
    *,
    chunk_size_in_bytes: int | None = DEFAULT_CBF_CHUNK_SIZE_IN_BYTES,
    precision: str | None = None,
    progress: bool | None = None,
) -> Path:
    """Writes every sequence of ``reader`` (a deserializer, or a plug-in: in its order) to a CBF file at ``path``.

    Streams keep their names, formats and dimensions; ``precision`` (``'float'``/``'double'``) converts
    every stream, ``None`` keeps each one's own. A chunk is closed once it holds ``chunk_size_in_bytes``
    (after a whole sequence); ``None`` keeps the source's chunks (one CBF chunk per source chunk, so that
    both read in the same randomized order). A sequence's length is the most samples any of its streams has.
    Sequences the source flags as damaged by a counted error (``max_errors``) are left out. The file is
    written under a temporary name and renamed when complete, so an interrupted conversion never leaves
    a partial file at ``path``. ``progress``: a tqdm bar (None: when tqdm is installed and stderr is a
    terminal).

    Example::

        write_cbf(CTFDeserializer("train.ctf", streams), "train.cbf")
        source = MinibatchSource(CBFDeserializer("train.cbf"))
    """
    deserializer = as_deserializer(reader)
    if chunk_size_in_bytes is not None and int(chunk_size_in_bytes) <= 0:
        raise ConfigError(f"chunk_size_in_bytes must be positive, got {chunk_size_in_bytes}")
    limit = 2**62 if chunk_size_in_bytes is None else int(chunk_size_in_bytes)
    infos = deserializer.stream_infos()
    dtypes = [_output_dtype(info, precision) for info in infos]
    target = Path(path)
    if target.is_dir():
        raise IsADirectoryError(21, "the output is a directory", str(target))
    if not target.parent.is_dir():
        raise FileNotFoundError(2, "the output's directory does not exist", str(target.parent))
    handle, name = replacement_file(target.parent, f".{target.name}.", ".partial")
    temporary = Path(name)
    chunks: list[tuple[int, int, int]] = []  # (offset, sequences, samples)
    try:
        with os.fdopen(handle, "wb") as out, _progress_bar(deserializer, progress) as advance:
            out.write(struct.pack("<QI", MAGIC, 1))
            pending = _PendingChunk(len(infos))
            for columns, lengths, sizes in _parsed_ahead(deserializer, infos, dtypes):
                first = 0
                while first < len(lengths):
                    last = _fill(sizes, first, limit - pending.size)
                    pending.add(columns, lengths, sizes, first, last)
                    first = last
                    if pending.size >= limit:
                        chunks.append(pending.flush(out))
                if chunk_size_in_bytes is None and pending.sequences:
                    chunks.append(pending.flush(out))
                advance(1)
            if pending.sequences:
                chunks.append(pending.flush(out))
            if not chunks:
                raise ConfigError(f"{deserializer.source_name}: no sequence to write (a CBF file needs one)")
            _write_header(out, infos, dtypes, chunks)
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
        raise
    return target


def _output_dtype(info: StreamInformation, precision: str | None) -> np.dtype[Any]:
    if precision is not None:
        return parse_precision(precision)
    if info.dtype not in (np.float32, np.float64):
        raise ConfigError(f"stream '{info.name}' is {info.dtype}; CBF holds float32 or float64 (set precision)")
    return info.dtype


def _parsed_ahead(
    deserializer: Deserializer, infos: list[StreamInformation], dtypes: list[np.dtype[Any]]
) -> Iterator[tuple[list[tuple[Any, ...]], np.ndarray, np.ndarray]]:
    """The source's chunks in order (see :func:`_chunk_columns`), the next one parsed on a thread while the
    caller encodes and writes the current one (parsers release the GIL)."""
    count = deserializer.num_chunks()
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="cntkio-convert") as pool:
        ahead = pool.submit(_chunk_columns, deserializer, 0, infos, dtypes) if count else None
        for chunk_id in range(count):
            assert ahead is not None
            current = ahead.result()
            if chunk_id + 1 < count:
                ahead = pool.submit(_chunk_columns, deserializer, chunk_id + 1, infos, dtypes)
            yield current


def _chunk_columns(
    deserializer: Deserializer, chunk_id: int, infos: list[StreamInformation], dtypes: list[np.dtype[Any]]
) -> tuple[list[tuple[Any, ...]], np.ndarray, np.ndarray]:
    """A source chunk's columns (as the native encoder takes them), each sequence's length (the most samples
    of any stream) and its encoded size in bytes."""
    data = deserializer.get_chunk(chunk_id)
    invalid = getattr(data, "invalid", None)
    keep = None if invalid is None or not np.any(invalid) else ~np.asarray(invalid, dtype=bool)
    columns: list[tuple[Any, ...]] = []
    counts = []
    sizes: np.ndarray | None = None
    for info, dtype in zip(infos, dtypes):
        if info.name not in data:
            raise ConfigError(f"{deserializer.source_name}: chunk {chunk_id} has no stream '{info.name}'")
        stream = data[info.name] if keep is None else _valid_sequences(data[info.name], keep)
        seq_offsets = np.ascontiguousarray(stream.seq_offsets, dtype=np.int64)
        samples = np.diff(seq_offsets)
        values = np.ascontiguousarray(stream.values, dtype=dtype)
        if isinstance(stream, SparseStream):
            indptr = np.ascontiguousarray(stream.indptr, dtype=np.int64)
            indices = np.ascontiguousarray(stream.indices, dtype=np.int32)
            nnz = indptr[seq_offsets[1:]] - indptr[seq_offsets[:-1]]
            size = 8 + nnz * (dtype.itemsize + 4) + samples * 4
            columns.append((values, seq_offsets, indices, indptr))
        else:
            width = int(np.prod(info.shape)) if info.shape else 1
            size = 4 + samples * width * dtype.itemsize
            columns.append((values.reshape(len(values), width), seq_offsets, None, None))
        counts.append(samples)
        sizes = size if sizes is None else sizes + size
    lengths = np.maximum.reduce(counts) if len(counts) > 1 else counts[0]
    if len(lengths) and int(lengths.min()) == 0:
        raise ConfigError(f"{deserializer.source_name}: chunk {chunk_id} has a sequence without samples")
    assert sizes is not None
    return columns, lengths.astype(np.uint32), sizes + 4


def _valid_sequences(stream: Any, keep: np.ndarray) -> Any:
    """A stream's data without the sequences ``keep`` leaves out (vectorised)."""
    lengths: np.ndarray = np.diff(np.asarray(stream.seq_offsets)).astype(np.int64)
    samples = np.repeat(keep, lengths)
    seq_offsets = exclusive_cumsum(lengths[keep])
    if isinstance(stream, SparseStream):
        indptr = np.asarray(stream.indptr, dtype=np.int64)
        entries = np.repeat(samples, np.diff(indptr))
        return SparseStream(
            np.asarray(stream.values)[entries], np.asarray(stream.indices)[entries],
            exclusive_cumsum(np.diff(indptr)[samples]), seq_offsets, stream.dim,
        )  # fmt: skip
    return DenseStream(np.asarray(stream.values)[samples], seq_offsets)


def _fill(sizes: np.ndarray, first: int, room: int) -> int:
    """The end of the run of sequences from ``first`` that reaches ``room`` bytes (at least one sequence)."""
    reach = np.cumsum(sizes[first:])
    return first + min(len(reach), int(np.searchsorted(reach, room, side="left")) + 1)


class _PendingChunk:
    """The CBF chunk being built: sequence lengths, then each stream's blocks of every run added."""

    def __init__(self, num_streams: int):
        self.num_streams = num_streams
        self._reset()

    def _reset(self) -> None:
        self.lengths: list[np.ndarray] = []
        self.blocks: list[list[np.ndarray]] = [[] for _ in range(self.num_streams)]
        self.sequences = 0
        self.samples = 0
        self.size = 0

    def add(
        self, columns: list[tuple[Any, ...]], lengths: np.ndarray, sizes: np.ndarray, first: int, last: int
    ) -> None:
        for blocks, block in zip(self.blocks, _native.cbf_encode(columns, first, last)):
            blocks.append(block)
        self.lengths.append(lengths[first:last])
        self.sequences += last - first
        self.samples += int(lengths[first:last].sum(dtype=np.int64))
        self.size += int(sizes[first:last].sum())

    def flush(self, out: Any) -> tuple[int, int, int]:
        offset = out.tell()
        if self.sequences >= 2**32 or self.samples >= 2**32:
            raise ConfigError("a CBF chunk holds fewer than 2^32 sequences and samples; lower chunk_size_in_bytes")
        out.write(np.concatenate(self.lengths).astype("<u4").tobytes())
        for blocks in self.blocks:
            for block in blocks:
                out.write(block.data)
        entry = (offset, self.sequences, self.samples)
        self._reset()
        return entry


def _write_header(
    out: Any, infos: list[StreamInformation], dtypes: list[np.dtype[Any]], chunks: list[tuple[int, int, int]]
) -> None:
    header = out.tell()
    parts = [struct.pack("<QII", MAGIC, len(chunks), len(infos))]
    for info, dtype in zip(infos, dtypes):
        name = info.name.encode("utf-8")
        dim = int(np.prod(info.shape)) if info.shape else 1
        parts.append(struct.pack("<BI", int(info.is_sparse), len(name)) + name)
        parts.append(struct.pack("<BI", int(dtype == np.float64), dim))
    parts += [struct.pack("<qII", *entry) for entry in chunks]
    parts.append(struct.pack("<q", header))
    out.write(b"".join(parts))


def _progress_bar(deserializer: Deserializer, progress: bool | None) -> contextlib.AbstractContextManager[Any]:
    """A function advancing a tqdm bar over the source's chunks (a no-op without a bar;
    :mod:`cntkio._src.common.progress`)."""
    from cntkio._src.common.progress import bar

    return bar(progress, deserializer.num_chunks(), f"writing CBF ({deserializer.source_name})")
