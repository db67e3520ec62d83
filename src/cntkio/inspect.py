"""Validates a CTF file and summarises its contents (the analysis behind ``cntkio inspect``).

The file is read through :class:`~cntkio.CTFDeserializer`, one chunk at a time, and the statistics are
computed with NumPy per chunk, so memory is bounded by one chunk plus the index.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .deserializer import SparseStream, StreamData
from .errors import ConfigError, FormatError, Location
from .formats.ctf import DEFAULT_CHUNK_SIZE_IN_BYTES, CTFDeserializer
from .infer import infer_streams
from .streams import StreamDef

HISTOGRAM_BINS = 10

Progress = Callable[[str, int, int], None]  # (phase, done, total)


@dataclass(frozen=True)
class StreamSpec:
    """A stream to read: name, CTF alias, dimension and storage format."""

    name: str
    dim: int
    is_sparse: bool
    alias: str


@dataclass
class StreamStats:
    """What one stream holds. Value statistics cover stored values (all dense values, sparse non-zeros)."""

    spec: StreamSpec
    samples: int = 0
    empty_sequences: int = 0  # sequences without a sample of this stream
    max_samples_in_sequence: int = 0
    values: int = 0
    nonzeros: int = 0
    value_sum: float = 0.0
    value_min: float = np.inf
    value_max: float = -np.inf
    nnz_min: int | None = None  # sparse: entries per sample
    nnz_max: int | None = None
    max_index: int = -1  # sparse: highest index seen

    def add(self, data: StreamData) -> None:
        per_sequence = np.diff(data.seq_offsets)
        self.empty_sequences += int(np.count_nonzero(per_sequence == 0))
        if len(per_sequence):
            self.max_samples_in_sequence = max(self.max_samples_in_sequence, int(per_sequence.max()))
        self.samples += int(data.seq_offsets[-1] - data.seq_offsets[0])
        values = data.values
        if isinstance(data, SparseStream):
            nnz = np.diff(data.indptr)
            if len(nnz):
                low, high = int(nnz.min()), int(nnz.max())
                self.nnz_min = low if self.nnz_min is None else min(self.nnz_min, low)
                self.nnz_max = high if self.nnz_max is None else max(self.nnz_max, high)
            if len(data.indices):
                self.max_index = max(self.max_index, int(data.indices.max()))
        if values.size:
            self.values += int(values.size)
            self.nonzeros += int(np.count_nonzero(values))
            self.value_sum += float(values.sum(dtype=np.float64))
            self.value_min = min(self.value_min, float(values.min()))
            self.value_max = max(self.value_max, float(values.max()))

    def to_dict(self) -> dict[str, Any]:
        spec = self.spec
        result: dict[str, Any] = {
            "name": spec.name,
            "alias": spec.alias,
            "format": "sparse" if spec.is_sparse else "dense",
            "dim": spec.dim,
            "samples": self.samples,
            "empty_sequences": self.empty_sequences,
            "max_samples_in_sequence": self.max_samples_in_sequence,
            "values": {
                "min": self.value_min if self.values else None,
                "mean": self.value_sum / self.values if self.values else None,
                "max": self.value_max if self.values else None,
            },
        }
        if spec.is_sparse:
            result["nnz_per_sample"] = {
                "min": self.nnz_min,
                "mean": self.values / self.samples if self.samples else None,
                "max": self.nnz_max,
            }
            result["max_index"] = self.max_index if self.max_index >= 0 else None
        else:
            result["nonzero_fraction"] = self.nonzeros / self.values if self.values else None
        return result


@dataclass
class Report:
    """The result of inspecting a file. ``fatal`` is set when the file could not be indexed at all."""

    file: str
    size: int
    streams_inferred: bool
    streams: list[StreamStats]
    summary: dict[str, Any] = field(default_factory=dict)  # CTFDeserializer.describe()
    sequence_lengths: dict[str, Any] | None = None
    errors: list[FormatError] = field(default_factory=list)
    repeated_ids: int = 0  # sequences whose id an earlier sequence already used (ids should be unique)
    stopped_early: bool = False  # --max-errors reached: the rest of the file was not read
    fatal: FormatError | None = None

    @property
    def ok(self) -> bool:
        return not self.errors and self.fatal is None

    def to_dict(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "bytes": self.size,
            **{k: v for k, v in self.summary.items() if k != "file"},
            "repeated_ids": self.repeated_ids,
            "streams_inferred": self.streams_inferred,
            "streams": [s.to_dict() for s in self.streams],
            "sequence_lengths": self.sequence_lengths,
            "valid": self.ok,
            "fatal": error_to_dict(self.fatal) if self.fatal else None,
            "error_count": len(self.errors),
            "stopped_early": self.stopped_early,
            "errors": [error_to_dict(e) for e in self.errors],
        }


def error_to_dict(error: FormatError) -> dict[str, Any]:
    """The structured fields of an error, JSON-ready."""
    key = error.sequence_key
    return {
        "file": error.file,
        "line": error.line,
        "column": error.column,
        "offset": error.offset,
        "sequence": key.item() if isinstance(key, np.generic) else key,
        "input": error.input,
        "reason": error.reason,
    }


def length_summary(lengths: np.ndarray, bins: int = HISTOGRAM_BINS) -> dict[str, Any]:
    """min/mean/median/max and an equal-width histogram: bins of ``low..high`` (inclusive) lengths."""
    if not len(lengths):
        return {"min": None, "mean": None, "median": None, "max": None, "histogram": []}
    low, high = int(lengths.min()), int(lengths.max())
    width = -(-(high - low + 1) // bins)
    counts = np.bincount((lengths - low) // width)
    histogram = [
        {"low": low + i * width, "high": min(low + (i + 1) * width - 1, high), "count": int(c)}
        for i, c in enumerate(counts)
    ]
    return {
        "min": low,
        "mean": float(lengths.mean()),
        "median": float(np.median(lengths)),
        "max": high,
        "histogram": histogram,
    }


def inspect_file(
    path: str,
    streams: list[StreamSpec] | None = None,
    *,
    max_errors: int | None = None,
    skip_sequence_ids: bool = False,
    precision: str = "float",
    optional_inputs: bool = False,
    chunk_size_in_bytes: int = DEFAULT_CHUNK_SIZE_IN_BYTES,
    progress: Progress | None = None,
) -> Report:
    """Reads the whole file and returns its :class:`Report`.

    Args:
        path: the CTF file.
        streams: the streams to read; ``None`` infers them from a full scan of the file.
        max_errors: stop reading after this many errors and list only these (``None``: no limit).
        skip_sequence_ids, precision, optional_inputs, chunk_size_in_bytes: as in
            :class:`~cntkio.CTFDeserializer`; memory use is bounded by about one chunk.
        progress: called with (phase, done, total) while scanning and parsing.

    Raises:
        OSError: the file cannot be read.
        ConfigError: invalid stream definitions or options.
    """
    size = os.path.getsize(path)
    inferred = streams is None
    if streams is None:
        scan = None if progress is None else lambda done, total: progress("scanning", done, total)
        streams = [StreamSpec(s.alias, s.dim, s.is_sparse, s.alias) for s in infer_streams(path, progress=scan)]
    names = [s.name for s in streams]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ConfigError(f"duplicate stream name(s): {', '.join(duplicates)}")
    report = Report(path, size, inferred, [StreamStats(s) for s in streams])
    if not streams:
        reason = "input file is empty" if size == 0 else "no '|name' input found in the file"
        report.fatal = FormatError(reason, Location(path, 0, 1, 1))
        return report
    definitions = {s.name: StreamDef(field=s.alias, shape=s.dim, is_sparse=s.is_sparse) for s in streams}
    try:
        reader = CTFDeserializer(
            path, definitions, max_errors=sys.maxsize, skip_sequence_ids=skip_sequence_ids,
            precision=precision, trace_level=0, optional_inputs=optional_inputs,
            chunk_size_in_bytes=chunk_size_in_bytes,
        )  # fmt: skip
    except FormatError as e:
        report.fatal = e
        return report
    report.summary = reader.describe()
    report.repeated_ids = reader.repeated_ids
    report.sequence_lengths = length_summary(reader.sequence_lengths())
    limit = sys.maxsize if max_errors is None else max_errors
    chunks = reader.num_chunks()
    for chunk_id in range(chunks):
        if reader.errors.count >= limit:
            report.stopped_early = True
            break
        try:
            chunk = reader.get_chunk(chunk_id)
        except FormatError as e:
            report.fatal = e
            break
        for s in report.streams:
            s.add(chunk[s.spec.name])
        if progress is not None:
            progress("parsing", chunk_id + 1, chunks)
    errors = sorted(reader.errors.errors, key=lambda e: (e.offset, e.input or ""))
    report.stopped_early |= len(errors) > limit
    report.errors = errors[:limit]
    return report
