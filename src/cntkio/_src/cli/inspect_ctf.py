"""Validates a data file and summarises its contents (the analysis behind ``cntkio inspect`` and ``validate``).

A CTF file is read through :class:`~cntkio.CTFDeserializer`, any other format through its deserializer
(:mod:`cntkio._src.cli.inspect_formats`), one chunk at a time; the statistics are computed with NumPy per chunk, so
memory is bounded by one chunk plus the index. What is counted is what a reader delivers: a bad sample that is skipped
counts neither in its stream's samples nor in its sequence's length, and a sequence that is dropped (an input
missing from it, no valid sample at all, no sample of the defining stream) is counted as skipped, not read.
"""

from __future__ import annotations

import json
import keyword
import os
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from cntkio._src.common.errors import ConfigError, FormatError, Location
from cntkio._src.common.streams import StreamDef
from cntkio._src.formats import registry
from cntkio._src.formats.ctf import DEFAULT_CHUNK_SIZE_IN_BYTES, CTFDeserializer
from cntkio._src.formats.ctf_infer import Inference, infer
from cntkio._src.formats.protocol import Deserializer, SparseStream, StreamData

HISTOGRAM_BINS = 10
PROGRESS_STEPS = 64  # chunks a large CTF file is parsed in by inspect: the progress bar's steps
MIN_CHUNK_BYTES = 1 << 20
SHOWN_PER_GROUP = 3  # locations listed per group of errors of one reason
PREVIEW_SAMPLES = 3  # samples shown per stream of a previewed sequence
PREVIEW_VALUES = 6  # values shown per previewed sample

GIVEN = "given"
INFERRED_SPARSE = "inferred: largest index + 1"  # a lower bound: the largest index may never occur
INFERRED_DENSE = "inferred: most values in a sample"
FROM_FILE = "from the file"
_NO_VALID_SAMPLE = "line has no valid sample"  # the CTF parser's summary of a line whose samples were all bad

Progress = Callable[[str, int, int], None]  # (phase, done, total)


@dataclass(frozen=True)
class StreamSpec:
    """A stream to read: name, CTF alias, dimension, storage format, and where the dimension came from."""

    name: str
    dim: int
    is_sparse: bool
    alias: str
    dim_source: str = GIVEN

    def stream_def(self) -> StreamDef:
        """How to read the stream: its alias, dimension and format."""
        return StreamDef(field=self.alias, shape=self.dim, is_sparse=self.is_sparse)

    @property
    def dim_lower_bound(self) -> bool:
        """The dimension is only known to be at least ``dim`` (inferred from the largest sparse index)."""
        return self.dim_source == INFERRED_SPARSE


@dataclass
class StreamStats:
    """What one stream holds. Value statistics cover stored values (all dense values, sparse non-zeros)."""

    spec: StreamSpec
    samples: int = 0
    sequences: int = 0  # sequences read (each counted in every stream)
    empty_sequences: int = 0  # sequences without a sample of this stream
    min_samples_in_sequence: int | None = None
    max_samples_in_sequence: int = 0
    values: int = 0
    nonzeros: int = 0
    value_sum: float = 0.0
    value_min: float = np.inf
    value_max: float = -np.inf
    nnz_min: int | None = None  # sparse: entries per sample
    nnz_max: int | None = None
    max_index: int = -1  # sparse: highest index seen

    def add(self, data: StreamData, keep: np.ndarray | None = None) -> None:
        """Adds a chunk's data; ``keep`` (bool per sequence) leaves out skipped sequences (which hold no sample)."""
        per_sequence = np.diff(data.seq_offsets)
        if keep is not None:
            per_sequence = per_sequence[keep]
        self.sequences += len(per_sequence)
        self.empty_sequences += int(np.count_nonzero(per_sequence == 0))
        if len(per_sequence):
            low = int(per_sequence.min())
            self.min_samples_in_sequence = low if self.min_samples_in_sequence is None else min(
                self.min_samples_in_sequence, low
            )  # fmt: skip
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
            "dim_lower_bound": spec.dim_lower_bound,
            "dim_source": spec.dim_source,
            "samples": self.samples,
            "empty_sequences": self.empty_sequences,
            "max_samples_in_sequence": self.max_samples_in_sequence,
            "samples_per_sequence": {
                "min": self.min_samples_in_sequence,
                "mean": self.samples / self.sequences if self.sequences else None,
                "max": self.max_samples_in_sequence if self.sequences else None,
            },
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
    """The result of inspecting a file. ``fatal`` is set when the file could not be read (to its end).

    ``summary`` holds what the format tells (for CTF: the index's mode, sequences, chunks, lines, skipped lines
    and sequences); ``notes`` are warnings worth showing; ``preview`` the first sequences, compactly.
    """

    file: str
    size: int
    streams_inferred: bool
    streams: list[StreamStats]
    format: str = registry.CTF.name
    detected: str = ""  # why the file was taken for this format
    summary: dict[str, Any] = field(default_factory=dict)
    sequence_lengths: dict[str, Any] | None = None
    errors: list[FormatError] = field(default_factory=list)
    repeated_ids: int = 0  # sequences whose id an earlier sequence already used (ids should be unique)
    stopped_early: bool = False  # max_errors reached: the rest of the file was not read, or errors not listed
    read_bytes: int | None = None  # how far the file was read (CTF)
    fatal: FormatError | None = None
    notes: list[str] = field(default_factory=list)
    preview: list[dict[str, Any]] = field(default_factory=list)
    snippet: str = ""  # Python that reads the file with these streams
    unknown_inputs: list[dict[str, Any]] = field(default_factory=list)  # CTF: inputs not read (not streams)

    @property
    def ok(self) -> bool:
        return not self.errors and self.fatal is None

    def to_dict(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "format": self.format,
            "detected": self.detected,
            "bytes": self.size,
            **{k: v for k, v in self.summary.items() if k != "file"},
            "repeated_ids": self.repeated_ids,
            "streams_inferred": self.streams_inferred,
            "streams": [s.to_dict() for s in self.streams],
            "unknown_inputs": self.unknown_inputs,
            "sequence_lengths": self.sequence_lengths,
            "valid": self.ok,
            "fatal": error_to_dict(self.fatal) if self.fatal else None,
            "error_count": len(self.errors),
            "stopped_early": self.stopped_early,
            "read_bytes": self.read_bytes,
            "error_groups": error_groups(self.errors),
            "errors": [error_to_dict(e) for e in self.errors],
            "notes": list(self.notes),
            "preview": self.preview,
            "snippet": self.snippet,
        }


def error_to_dict(error: FormatError) -> dict[str, Any]:
    """The structured fields of an error, JSON-ready (``stream``: the input or stream it is about)."""
    key = error.sequence_key
    return {
        "file": error.file,
        "line": error.line,
        "column": error.column,
        "offset": error.offset,
        "sequence": key.item() if isinstance(key, np.generic) else key,
        "stream": error.input,
        "reason": error.reason,
    }


def error_order(error: FormatError) -> tuple[Any, ...]:
    """File order: by file, line (or byte offset), a line's own errors before the summary that it had none valid."""
    line = error.line if error.line is not None else -1
    return (error.file, line, error.reason == _NO_VALID_SAMPLE, error.offset, error.input or "")


def error_groups(errors: Iterable[FormatError], shown: int = SHOWN_PER_GROUP) -> list[dict[str, Any]]:
    """Errors grouped by (reason, stream), in order of first appearance: count and the first ``shown`` of each."""
    groups: dict[tuple[str, str | None], dict[str, Any]] = {}
    for error in errors:
        group = groups.setdefault(
            (error.reason, error.input), {"reason": error.reason, "stream": error.input, "count": 0, "first": []}
        )
        group["count"] += 1
        if len(group["first"]) < shown:
            group["first"].append(error_to_dict(error))
    return list(groups.values())


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
    chunk_size_in_bytes: int | None = None,
    progress: Progress | None = None,
    preview: int = 0,
) -> Report:
    """Reads a CTF file (to its end, or until ``max_errors``) and returns its :class:`Report`.

    Args:
        path: the CTF file.
        streams: the streams to read; ``None`` infers them from a full scan of the file.
        max_errors: stop after the chunk that holds the ``max_errors``-th error (in file order) and list only the
            first ``max_errors``; the statistics cover the chunks read (``None``: no limit).
        skip_sequence_ids, precision, optional_inputs, chunk_size_in_bytes: as in
            :class:`~cntkio.CTFDeserializer`; memory use is bounded by about one chunk. The chunk size defaults to
            :func:`progress_chunk_size`: about 1/64 of the file, so that progress moves as the file is parsed.
        progress: called with (phase, done, total bytes) while scanning and parsing: per block of the scan, per
            chunk of the parse (and with 0 when a phase starts).
        preview: how many sequences to show in ``Report.preview``.

    Raises:
        OSError: the file cannot be read.
        ConfigError: invalid stream definitions or options.
    """
    size = os.path.getsize(path)
    inferred = streams is None
    scanned = None if progress is None else lambda done, total: progress("scanning", done, total)
    inference = infer(path, progress=scanned)  # every input: the streams, or what --stream leaves out
    if streams is None:
        streams = [
            StreamSpec(s.alias, s.dim, s.is_sparse, s.alias, INFERRED_SPARSE if s.is_sparse else INFERRED_DENSE)
            for s in inference.streams
        ]
    names = [s.name for s in streams]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ConfigError(f"duplicate stream name(s): {', '.join(duplicates)}")
    report = Report(path, size, inferred, [StreamStats(s) for s in streams])
    typos = _unknown_inputs(report, inference, streams)
    if not streams:
        reason = "input file is empty" if size == 0 else "no '|name' input found in the file"
        report.fatal = FormatError(reason, Location(path, 0, 1, 1))
        report.errors = typos
        return report
    definitions = {s.name: s.stream_def() for s in streams}
    report.snippet = streamdefs_snippet("CTFDeserializer", path, streams)
    options: dict[str, Any] = {
        "skip_sequence_ids": skip_sequence_ids, "precision": precision,
        "chunk_size_in_bytes": chunk_size_in_bytes or progress_chunk_size(size),
    }  # fmt: skip
    try:
        reader = CTFDeserializer(
            path, definitions, max_errors=sys.maxsize, trace_level=0, optional_inputs=optional_inputs, **options
        )
    except FormatError as e:
        report.fatal = e
        report.errors = typos
        return report
    try:
        report.summary = reader.describe()
        report.repeated_ids = reader.repeated_ids
        index_errors = list(reader.errors.errors)  # the index's errors: sequences dropped (an input missing)
        missing_input = len({e.offset for e in index_errors})
        scan = ChunkScan(reader, report, preview)
        limit = sys.maxsize if max_errors is None else max_errors
        if progress is not None:
            progress("parsing", 0, size)
        for chunk_id in range(reader.num_chunks()):
            if not scan.read(chunk_id):
                break
            report.read_bytes = reader.chunk_bytes(chunk_id)[1]
            if progress is not None:
                progress("parsing", report.read_bytes, size)
            if reader.errors.count >= limit:
                errors = sorted(reader.errors.errors, key=error_order)
                if errors[limit - 1].offset < report.read_bytes:  # no error of a later chunk can come before it
                    report.stopped_early = chunk_id + 1 < reader.num_chunks() or len(errors) > limit
                    break
        found = list(reader.errors.errors)
        if missing_input and not report.stopped_early and report.fatal is None:
            found += _errors_of_dropped_sequences(path, definitions, options, progress)
            report.notes += _missing_input_hints(index_errors, report.summary["sequences"])
        errors = sorted(_distinct(found + typos), key=error_order)
        report.errors = errors[:limit]
        report.stopped_early |= len(errors) > limit
        report.sequence_lengths = scan.lengths()
        skipped = {
            "without_defining_stream": report.summary["skipped_sequences"],
            "missing_input": missing_input,
            "no_valid_sample": scan.empty,
        }
        report.summary["sequences"] -= scan.empty
        report.summary["skipped_sequences"] = sum(skipped.values())
        report.summary["skipped"] = skipped
    finally:
        reader.close()
    return report


def progress_chunk_size(size: int) -> int:
    """The chunk size inspect reads a CTF file of ``size`` bytes with: about :data:`PROGRESS_STEPS` chunks, each
    at least :data:`MIN_CHUNK_BYTES` and at most the reader's default (a file's statistics do not depend on it)."""
    return max(MIN_CHUNK_BYTES, min(DEFAULT_CHUNK_SIZE_IN_BYTES, size // PROGRESS_STEPS))


def _unknown_inputs(
    report: Report, inference: Inference, streams: list[StreamSpec], given_by: str = "--stream"
) -> list[FormatError]:
    """The inputs of the file that are not among ``streams``, in ``report.unknown_inputs`` (counted, as CNTK's
    warning did: their samples are skipped); those seen in only a handful of samples are likely typos: an error
    at each place. A frequent one (streams ``given_by`` the user leave it out) is a note."""
    aliases = [s.alias for s in streams]
    errors = []
    for found in inference.inputs:
        if found.alias in aliases:
            continue
        typo = inference.is_rare(found)
        similar = inference.similar(found, [(s.alias, s.is_sparse, s.dim) for s in streams]) if typo else None
        lines = [place.line for place in found.first_seen]
        report.unknown_inputs.append({
            "input": found.alias, "samples": found.samples, "lines": lines, "likely_typo": typo, "similar": similar,
        })  # fmt: skip
        seen = f"seen in only {found.samples:,} sample{'' if found.samples == 1 else 's'}"
        if typo:
            of = f" of '{similar}'" if similar else ""
            why = (
                "not taken for a stream (if it is one, give every stream with --stream)" if report.streams_inferred
                else f"not among the streams given by {given_by}"
            )  # fmt: skip
            reason = f"likely a typo{of}: an input {seen}, {why}; its samples are skipped"
            errors += [
                FormatError(reason, Location(report.file, p.offset, p.line, p.column, None, found.alias))
                for p in found.first_seen
            ]
        else:
            first = f"line {lines[0]:,}" if lines else "nowhere"
            samples = "its sample is" if found.samples == 1 else f"its {found.samples:,} samples are"
            report.notes.append(
                f"input '{found.alias}' is not among the streams given by {given_by}: {samples} skipped "
                f"(first at {first})"
            )
    return errors


def _errors_of_dropped_sequences(
    path: str, definitions: dict[str, StreamDef], options: dict[str, Any], progress: Progress | None
) -> list[FormatError]:
    """Every error of the sequences the index dropped for a missing input (which are not parsed): the file parsed
    again with optional inputs, so that a missing input does not hide the other errors of its sequence."""
    reader = CTFDeserializer(path, definitions, max_errors=sys.maxsize, trace_level=0, optional_inputs=True, **options)
    index_errors = len(reader.errors.errors)  # (what the absence of every input gives: said already)
    try:
        size = os.path.getsize(path)
        for chunk_id in range(reader.num_chunks()):
            reader.get_chunk(chunk_id)
            if progress is not None:
                progress("parsing again (inputs missing)", reader.chunk_bytes(chunk_id)[1], size)
        return list(reader.errors.errors[index_errors:])
    except FormatError as e:
        return [*reader.errors.errors[index_errors:], e]
    finally:
        reader.close()


def _missing_input_hints(index_errors: list[FormatError], sequences: int) -> list[str]:
    """A note per input missing from sequences: how many, and what makes it optional."""
    missing: dict[str, set[int]] = {}
    for error in index_errors:
        if error.input is not None:
            missing.setdefault(error.input, set()).add(error.offset)
    total = sequences + len({e.offset for e in index_errors})
    return [
        f"input '{name}' is missing from {len(dropped):,} of {total:,} sequences, which are dropped (their other "
        "errors are listed too); if it is optional, pass --optional-inputs"
        for name, dropped in missing.items()
    ]


def _distinct(errors: list[FormatError]) -> list[FormatError]:
    """``errors`` without repeats (the same reason at the same place, found by two parses)."""
    seen: set[tuple[Any, ...]] = set()
    kept = []
    for e in errors:
        key = (e.offset, e.line, e.column, e.reason, e.input)
        if key not in seen:
            seen.add(key)
            kept.append(e)
    return kept


def unknown_inputs(report: Report, path: str, given_by: str, progress: Progress | None = None) -> None:
    """The inputs of the CTF file ``path`` that are not among the report's streams (those ``given_by`` a config,
    say), counted and reported as :func:`inspect_file` reports them for ``--stream``: a note each, or a likely-typo
    error at each place."""
    scanned = None if progress is None else lambda done, total: progress("scanning", done, total)
    streams = [s.spec for s in report.streams]
    typos = _unknown_inputs(report, infer(path, progress=scanned), streams, given_by)
    report.errors = sorted(report.errors + typos, key=error_order)


class ChunkScan:
    """Reads chunks of a deserializer into a report's stream statistics, sequence lengths and preview.

    A sequence's length is the most samples any of the report's streams has in it; a sequence without any (every
    sample bad) is skipped: counted in ``empty``, not in the statistics.
    """

    def __init__(self, reader: Deserializer, report: Report, preview: int):
        self.reader = reader
        self.report = report
        self.preview = preview
        self.empty = 0
        self._lengths: list[np.ndarray] = []

    def read(self, chunk_id: int) -> bool:
        """Adds chunk ``chunk_id``; False (and ``report.fatal`` set) when it cannot be read."""
        try:
            chunk = self.reader.get_chunk(chunk_id)
        except FormatError as e:
            self.report.fatal = e
            return False
        stats = self.report.streams
        counts = [np.diff(chunk[s.spec.name].seq_offsets) for s in stats]
        lengths = np.maximum.reduce(counts) if len(counts) > 1 else counts[0]
        keep = lengths > 0
        self.empty += int(np.count_nonzero(~keep))
        self._lengths.append(lengths[keep])
        for s in stats:
            s.add(chunk[s.spec.name], keep)
        if len(self.report.preview) < self.preview:
            keys = self.reader.chunk_index(chunk_id).keys
            for i in np.flatnonzero(keep)[: self.preview - len(self.report.preview)].tolist():
                shown = {s.spec.name: preview_samples(chunk[s.spec.name], i) for s in stats}
                key = keys[i]
                self.report.preview.append({"key": key.item() if isinstance(key, np.generic) else key, **shown})
        return True

    def lengths(self) -> dict[str, Any]:
        """The length summary of the sequences read."""
        return length_summary(np.concatenate(self._lengths) if self._lengths else np.zeros(0, dtype=np.int64))


def preview_samples(data: StreamData, sequence: int) -> str:
    """A sequence's samples of one stream, compactly: ``3 x [1 2 3] [4 5 6] ...`` or ``2 x {4:1} {7:0.5}``."""
    first, last = int(data.seq_offsets[sequence]), int(data.seq_offsets[sequence + 1])
    shown = []
    for sample in range(first, min(last, first + PREVIEW_SAMPLES)):
        if isinstance(data, SparseStream):
            a, b = int(data.indptr[sample]), int(data.indptr[sample + 1])
            entries = [f"{i}:{v:g}" for i, v in zip(data.indices[a:b][:PREVIEW_VALUES], data.values[a:b])]
            shown.append("{" + " ".join(entries) + (" ..." if b - a > PREVIEW_VALUES else "") + "}")
        else:
            values = np.asarray(data.values[sample]).ravel()
            text = " ".join(f"{v:g}" for v in values[:PREVIEW_VALUES].tolist())
            shown.append("[" + text + (" ..." if len(values) > PREVIEW_VALUES else "") + "]")
    more = " ..." if last - first > PREVIEW_SAMPLES else ""
    return f"{last - first} x " + " ".join(shown) + more


def streamdefs_snippet(constructor: str, path: str | list[str], streams: list[StreamSpec]) -> str:
    """Python reading the file (CTF or CBF) with these streams: ``constructor(path, StreamDefs(...))``."""
    definitions = []
    for s in streams:
        sparse = ", is_sparse=True" if s.is_sparse else ""
        comment = f"  # shape >= {s.dim} ({s.dim_source})" if s.dim_lower_bound else ""
        definitions.append((s.name, f"StreamDef(field={json.dumps(s.alias)}, shape={s.dim}{sparse}),{comment}"))
    if all(name.isidentifier() and not keyword.iskeyword(name) for name, _ in definitions):
        body = "".join(f"    {name}={definition}\n" for name, definition in definitions)
        streamdefs = f"StreamDefs(\n{body})"
    else:
        body = "".join(f"    {json.dumps(name)}: {definition}\n" for name, definition in definitions)
        streamdefs = f"StreamDefs(**{{\n{body}}})"
    return (
        f"from cntkio import {constructor}, StreamDef, StreamDefs\n\n"
        f"streams = {streamdefs}\n"
        f"reader = {constructor}({json.dumps(path)}, streams)\n"
    )


def compare_streams(reports: list[Report]) -> list[str]:
    """How the files' streams disagree (names, formats, dimensions), for reading them as one corpus."""
    readable = [r for r in reports if r.streams]
    problems: list[str] = []
    if len(readable) < 2:
        return problems
    names = {s.spec.name for r in readable for s in r.streams}
    for name in sorted(names):
        specs = [(r.file, next((s.spec for s in r.streams if s.spec.name == name), None)) for r in readable]
        absent = [file for file, spec in specs if spec is None]
        if absent:
            problems.append(f"stream '{name}' is missing from {', '.join(absent)}")
        present = [(file, spec) for file, spec in specs if spec is not None]
        formats = {spec.is_sparse for _, spec in present}
        if len(formats) > 1:
            shown = ", ".join(f"{file}: {'sparse' if spec.is_sparse else 'dense'}" for file, spec in present)
            problems.append(f"stream '{name}' is sparse in some files and dense in others ({shown})")
            continue
        exact = {spec.dim for _, spec in present if not spec.dim_lower_bound}
        bounds = [spec.dim for _, spec in present if spec.dim_lower_bound]
        if len(exact) > 1 or (exact and bounds and max(bounds) > min(exact)):
            shown = ", ".join(f"{file}: {'>= ' if spec.dim_lower_bound else ''}{spec.dim}" for file, spec in present)
            problems.append(f"stream '{name}' has different dimensions ({shown})")
    return problems


def agreed_streams(reports: list[Report]) -> list[StreamSpec]:
    """The streams of several files that agree (:func:`compare_streams` empty): the largest inferred dimension."""
    merged: dict[str, StreamSpec] = {}
    for report in reports:
        for s in report.streams:
            known = merged.get(s.spec.name)
            if known is None or (known.dim_lower_bound and s.spec.dim > known.dim) or not s.spec.dim_lower_bound:
                merged[s.spec.name] = s.spec
    return list(merged.values())
