"""The distributions of a data file — sequence lengths, and per stream the samples per sequence, the values, the
non-zeros per sample and (sparse streams) the indices used — gathered with NumPy chunk by chunk (what ``cntkio
stats`` shows), and the numbers as text, which both the text report and the plot (:mod:`.plot`) use.

Memory stays bounded whatever the file's size: integer distributions are kept as counts per value
(:class:`IntegerCounts`), index usage as counts per index, and values as a uniform random sample of at most
:data:`VALUE_SAMPLE` values per stream (every value when there are fewer: the histogram is then exact). The scalar
statistics of each stream (samples, values min / mean / max, non-zero fraction) are those of ``cntkio inspect``
(:class:`cntkio._src.cli.inspect_ctf.StreamStats`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np

from cntkio._src.cli.inspect_ctf import (
    FROM_FILE,
    HISTOGRAM_BINS,
    INFERRED_DENSE,
    INFERRED_SPARSE,
    StreamSpec,
    StreamStats,
)
from cntkio._src.formats.protocol import Deserializer, SparseStream, StreamData

VALUE_SAMPLE = 1 << 20  # values kept per stream for the value histogram (a uniform sample beyond this)
MAX_INDEX_COUNTS = 1 << 22  # sparse dimensions up to this are counted per index, larger ones per range of indices
TOP_INDICES = 5

Advance = Callable[[int], None]

class IntegerCounts:
    """How often each non-negative integer occurs (lengths, non-zeros per sample), added chunk by chunk."""

    def __init__(self) -> None:
        self.counts = np.zeros(0, dtype=np.int64)

    def add(self, values: np.ndarray) -> None:
        if not len(values):
            return
        counts = np.bincount(np.asarray(values, dtype=np.int64))
        if len(counts) > len(self.counts):
            self.counts = np.concatenate([self.counts, np.zeros(len(counts) - len(self.counts), dtype=np.int64)])
        self.counts[: len(counts)] += counts

    def summary(self, bins: int = HISTOGRAM_BINS) -> dict[str, Any]:
        """What :func:`cntkio._src.cli.inspect_ctf.length_summary` gives for the values counted (computed from the
        counts)."""
        present = np.flatnonzero(self.counts)
        if not len(present):
            return {"min": None, "mean": None, "median": None, "max": None, "histogram": []}
        low, high = int(present[0]), int(present[-1])
        counts = self.counts[low : high + 1]
        total = int(counts.sum())
        cumulative = np.cumsum(counts)
        middle = [low + int(np.searchsorted(cumulative, k, side="right")) for k in ((total - 1) // 2, total // 2)]
        width = -(-(high - low + 1) // bins)
        binned = np.add.reduceat(counts, np.arange(0, len(counts), width))
        histogram = [
            {"low": low + i * width, "high": min(low + (i + 1) * width - 1, high), "count": int(c)}
            for i, c in enumerate(binned)
        ]
        mean = float(np.dot(np.arange(low, high + 1, dtype=np.float64), counts) / total)
        return {"min": low, "mean": mean, "median": sum(middle) / 2, "max": high, "histogram": histogram}


class ValueSample:
    """A uniform random sample (without replacement) of at most ``size`` of the values added, seeded: every value
    while there are no more than ``size``. Each value gets a random key and the smallest keys are kept; a value
    whose key is above the largest kept one cannot enter, so a chunk costs little once the sample is full."""

    def __init__(self, size: int = VALUE_SAMPLE, seed: int = 0):
        self.size = size
        self.seen = 0
        self._rng = np.random.default_rng(seed)
        self._values: list[np.ndarray] = []
        self._keys: list[np.ndarray] | None = None  # None: every value is kept (no key drawn yet)
        self._kept = 0
        self._threshold = 1.0

    def add(self, values: np.ndarray) -> None:
        values = np.asarray(values, dtype=np.float64).ravel()
        self.seen += len(values)
        if self._keys is None:
            self._values.append(values)
            self._kept += len(values)
            if self._kept <= self.size:
                return
            self._keys = [self._rng.random(self._kept)]
            self._values = [np.concatenate(self._values)]
        else:
            keys = self._rng.random(len(values))
            entering = keys < self._threshold
            self._keys.append(keys[entering])
            self._values.append(values[entering])
            self._kept += int(np.count_nonzero(entering))
        if self._kept >= 2 * self.size or len(self._values) == 1:
            self._shrink()

    def _shrink(self) -> None:
        assert self._keys is not None
        keys, values = np.concatenate(self._keys), np.concatenate(self._values)
        if len(keys) > self.size:
            chosen = np.argpartition(keys, self.size)[: self.size]
            keys, values = keys[chosen], values[chosen]
            self._threshold = float(keys.max())
        self._keys, self._values, self._kept = [keys], [values], len(keys)

    @property
    def exact(self) -> bool:
        """Whether the sample holds every value added."""
        return self._keys is None

    def values(self) -> np.ndarray:
        if self._keys is not None:
            self._shrink()
        return np.concatenate(self._values) if self._values else np.zeros(0)


class StreamDistributions:
    """The distributions of one stream (see the module)."""

    def __init__(self, spec: StreamSpec):
        self.spec = spec
        self.stats = StreamStats(spec)
        self.per_sequence = IntegerCounts()
        self.nonzeros = IntegerCounts()  # per sample
        self.sample = ValueSample()
        self.index_width = 1 if spec.dim <= MAX_INDEX_COUNTS else -(-spec.dim // MAX_INDEX_COUNTS)
        self.index_counts = np.zeros(-(-spec.dim // self.index_width) if spec.is_sparse else 0, dtype=np.int64)

    def add(self, data: StreamData, keep: np.ndarray) -> None:
        """Adds a chunk's data; ``keep`` (bool per sequence) leaves out the sequences without any sample."""
        self.stats.add(data, keep)
        self.per_sequence.add(np.diff(data.seq_offsets)[keep])
        values = data.values
        if isinstance(data, SparseStream):
            self.nonzeros.add(np.diff(data.indptr))
            used = np.bincount(data.indices // self.index_width, minlength=len(self.index_counts))
            self.index_counts += used[: len(self.index_counts)]
        else:
            self.nonzeros.add(np.count_nonzero(values.reshape(len(values), -1), axis=1))
        self.sample.add(values)

    def value_histogram(self, bins: int = HISTOGRAM_BINS) -> list[dict[str, Any]]:
        """Equal-width bins from the smallest to the largest value, counted in the sample."""
        stats = self.stats
        if not stats.values:
            return []
        low, high = stats.value_min, stats.value_max
        counts, edges = np.histogram(self.sample.values(), bins=bins if high > low else 1, range=(low, high))
        return [{"low": float(edges[i]), "high": float(edges[i + 1]), "count": int(c)} for i, c in enumerate(counts)]

    def index_usage(self, bins: int = HISTOGRAM_BINS) -> dict[str, Any]:
        """Sparse streams: indices used (exact when counted per index), the most used (``top``: a few for the summary
        line; ``most_used``: ``bins`` of them, most used first, for the bars), and equal ranges' counts."""
        counts, width = self.index_counts, self.index_width
        per_index = width == 1
        ranked = np.argsort(-counts, kind="stable")[: max(bins, TOP_INDICES)] if per_index else np.zeros(0, np.int64)
        top = ranked[:TOP_INDICES]
        step = -(-len(counts) // bins) if len(counts) else 1
        binned = np.add.reduceat(counts, np.arange(0, len(counts), step)) if len(counts) else np.zeros(0)
        dim = self.spec.dim
        return {
            "used": int(np.count_nonzero(counts)) if per_index else None,
            "of": dim,
            "of_lower_bound": self.spec.dim_lower_bound,
            "top": [[int(i), int(counts[i])] for i in top if counts[i]],
            "most_used": [[int(i), int(counts[i])] for i in ranked[:bins] if counts[i]],
            "histogram": [
                {"low": i * step * width, "high": min((i + 1) * step * width, dim) - 1, "count": int(c)}
                for i, c in enumerate(binned)
            ],
        }

    def to_dict(self, bins: int = HISTOGRAM_BINS) -> dict[str, Any]:
        stats = self.stats
        result: dict[str, Any] = {
            "name": self.spec.name,
            "format": "sparse" if self.spec.is_sparse else "dense",
            "dim": self.spec.dim,
            "dim_lower_bound": self.spec.dim_lower_bound,  # inferred: the largest index + 1 (the real one may be more)
            "samples": stats.samples,
            "empty_sequences": stats.empty_sequences,
            "samples_per_sequence": self.per_sequence.summary(bins),
            "values": {
                "count": stats.values,
                "min": stats.value_min if stats.values else None,
                "mean": stats.value_sum / stats.values if stats.values else None,
                "max": stats.value_max if stats.values else None,
                "zero_fraction": 1 - stats.nonzeros / stats.values if stats.values else None,
                "sampled": None if self.sample.exact else len(self.sample.values()),
                "histogram": self.value_histogram(bins),
            },
            "nonzeros_per_sample": self.nonzeros.summary(bins),
        }
        if self.spec.is_sparse:
            result["indices"] = self.index_usage(bins)
        return result


class FileDistributions:
    """The distributions of every stream of a file, and of its sequence lengths (the most samples of any stream)."""

    def __init__(self, path: str, reader: Deserializer, *, dims_inferred: bool = False):
        self.path = path
        self.format = type(reader).__name__.removesuffix("Deserializer")
        self.chunks = reader.num_chunks()
        self.streams = [
            StreamDistributions(
                StreamSpec(
                    info.name,
                    int(np.prod(info.shape)),
                    info.is_sparse,
                    info.name,
                    _dim_source(info.is_sparse) if dims_inferred else FROM_FILE,
                )
            )
            for info in reader.stream_infos()
        ]
        self.lengths = IntegerCounts()
        self.empty_sequences = 0  # sequences without any sample (every one bad): left out
        self.bad_records = 0

    def add(self, chunk: dict[str, StreamData]) -> None:
        counts = [np.diff(chunk[s.spec.name].seq_offsets) for s in self.streams]
        lengths = np.maximum.reduce(counts)
        keep = lengths > 0
        self.empty_sequences += int(np.count_nonzero(~keep))
        self.lengths.add(lengths[keep])
        for stream in self.streams:
            stream.add(chunk[stream.spec.name], keep)

    def to_dict(self, bins: int = HISTOGRAM_BINS) -> dict[str, Any]:
        lengths = self.lengths.summary(bins)
        return {
            "file": self.path,
            "format": self.format,
            "bytes": os.path.getsize(self.path),
            "chunks": self.chunks,
            "sequences": int(self.lengths.counts.sum()),
            "empty_sequences": self.empty_sequences,
            "bad_records": self.bad_records,
            "sequence_lengths": lengths,
            "streams": [s.to_dict(bins) for s in self.streams],
        }


def _dim_source(is_sparse: bool) -> str:
    return INFERRED_SPARSE if is_sparse else INFERRED_DENSE


def gather(
    path: str,
    reader: Deserializer,
    advance: Advance | None = None,
    bins: int = HISTOGRAM_BINS,
    *,
    dims_inferred: bool = False,
) -> dict[str, Any]:
    """Reads every chunk of ``reader`` (the file at ``path``) and returns its distributions, histograms of ``bins``
    bins, as a JSON-ready dict; ``advance`` is called per chunk. Bad records a reader skips under its ``max_errors``
    are counted. ``dims_inferred``: the reader's dimensions were inferred from the file (CTF), so its sparse ones
    are lower bounds.

    Raises:
        FormatError: a chunk cannot be read (a fatal format error).
    """
    found = FileDistributions(path, reader, dims_inferred=dims_inferred)
    for chunk in range(reader.num_chunks()):
        found.add(reader.get_chunk(chunk))
        if advance is not None:
            advance(1)
    errors = reader.errors
    found.bad_records = int(errors.count) if errors is not None else 0
    return found.to_dict(bins)


# ------------------------------------------------------------------------------------------- text
def number(value: Any) -> str:
    """A number as the text and the HTML page show it."""
    if value is None:
        return "-"
    if isinstance(value, (int, np.integer)):
        return f"{int(value):,}"
    return f"{value:.4g}"


def bin_label(entry: dict[str, Any]) -> str:
    low, high = entry["low"], entry["high"]
    return number(low) if low == high else f"{number(low)}..{number(high)}"


def summary_text(summary: dict[str, Any]) -> str:
    if summary["min"] is None:
        return "none"
    return ", ".join(f"{name} {number(summary[name])}" for name in ("min", "mean", "median", "max"))


def value_text(values: dict[str, Any]) -> str:
    if not values["count"]:
        return "none"
    text = f"{number(values['count'])} values: min {number(values['min'])}, mean {number(values['mean'])}, "
    text += f"max {number(values['max'])}; {100 * values['zero_fraction']:.3g}% zero"
    if values["sampled"]:
        text += f" (histogram of a uniform sample of {number(values['sampled'])})"
    return text


def dim_text(dim: int, lower_bound: bool) -> str:
    """A dimension as the text shows it: ``>= 941`` when it is a lower bound (inferred from a sparse stream)."""
    return f">= {number(dim)}" if lower_bound else number(dim)


def index_text(indices: dict[str, Any]) -> str:
    used = "?" if indices["used"] is None else number(indices["used"])
    top = ", ".join(f"{i} ({number(c)})" for i, c in indices["top"])
    of = dim_text(indices["of"], indices.get("of_lower_bound", False))
    return f"{used} of {of} used" + (f"; most used {top}" if top else "")


def stream_sections(stream: dict[str, Any]) -> list[tuple[str, str, list[dict[str, Any]]]]:
    """A stream's distributions as (label, summary text, histogram), in the order the text and the page show. The
    indices' histogram is of the most used ones, most used first (one bin per index: :func:`most_used`)."""
    sections = [
        ("samples per sequence", summary_text(stream["samples_per_sequence"]), stream["samples_per_sequence"]),
        ("values", value_text(stream["values"]), stream["values"]),
        ("non-zeros per sample", summary_text(stream["nonzeros_per_sample"]), stream["nonzeros_per_sample"]),
    ]
    result = [(label, text, part["histogram"]) for label, text, part in sections]
    if "indices" in stream:
        result.append(("indices", index_text(stream["indices"]), most_used(stream["indices"])))
    return result


def most_used(indices: dict[str, Any]) -> list[dict[str, Any]]:
    """The most used indices as histogram bins of one index each, most used first (the ranges' histogram when
    indices are counted per range: a dimension above MAX_INDEX_COUNTS)."""
    ranked = indices.get("most_used") or []
    if not ranked:
        return list(indices["histogram"])
    return [{"low": index, "high": index, "count": count} for index, count in ranked]


def constant(stream: dict[str, Any], label: str) -> str | None:
    """What a section of ``stream`` says in words when its distribution is a single value (a one-hot stream's
    values and non-zeros per sample, say), which a chart of one bar tells no better; None otherwise."""
    if label == "values":
        values = stream["values"]
        return f"every value is {number(values['min'])}" if values["count"] and values["min"] == values["max"] else None
    if label == "indices":
        indices = stream["indices"]
        return f"every entry is index {indices['top'][0][0]}" if indices["used"] == 1 and indices["top"] else None
    key, noun, of = {
        "samples per sequence": ("samples_per_sequence", "sequence", "sample"),
        "non-zeros per sample": ("nonzeros_per_sample", "sample", "non-zero"),
    }[label]
    summary = stream[key]
    if summary["min"] is None or summary["min"] != summary["max"]:
        return None
    count = summary["min"]
    return f"every {noun} has {number(count)} {of}{'' if count == 1 else 's'}"


