"""Helpers for the order, resume and partition tests: generated CTF files of many small chunks, sources
over them, comparable snapshots of minibatches, and a deserializer that counts the chunks it parses."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import cycle
from pathlib import Path
from typing import Any

import numpy as np

from cntkio import CTFDeserializer, Deserializer, MinibatchSource, StreamDef, StreamDefs
from cntkio._src.common.streams import StreamInformation
from cntkio._src.formats.protocol import ChunkIndex, SequenceIndex, StreamData

# x (dense, 2): [sequence id, step]; y (sparse, 7): two entries per sample that also depend on both.
STREAMS = StreamDefs(x=StreamDef(field="x", shape=2), y=StreamDef(field="y", shape=7, is_sparse=True))


@dataclass
class Data:
    """A generated CTF file: its sequence ids (numeric keys) and lengths, in file order."""

    path: Path
    keys: list[Any]
    lengths: list[int]

    @property
    def frames(self) -> list[tuple[Any, int]]:
        """Every (key, frame) unit of frame mode, in file order."""
        return [(key, t) for key, length in zip(self.keys, self.lengths) for t in range(length)]

    @property
    def total_samples(self) -> int:
        return sum(self.lengths)


def random_lengths(count: int, max_length: int, seed: int) -> list[int]:
    """``count`` sequence lengths in [1, max_length]."""
    return np.random.default_rng(seed).integers(1, max_length + 1, size=count).tolist()


def write_ctf(path: Path, lengths: Sequence[int], *, ragged: bool = False, key_prefix: str = "") -> Data:
    """Writes sequences of the given lengths; id i (or ``key_prefix + str(i)``) on every line.

    Every line carries x; y is on every line unless ``ragged``, where it is left out of some later lines
    (which frame mode and truncated BPTT do not allow).
    """
    lines = []
    for i, length in enumerate(lengths):
        key = f"{key_prefix}{i}"
        for t in range(length):
            line = f"{key} |x {i} {t}"
            if not ragged or t == 0 or (i + t) % 3:
                line += f" |y {i % 7}:{t + 1} {(i + t + 3) % 7}:0.5"
            lines.append(line)
    path.write_text("\n".join(lines) + "\n")
    keys: list[Any] = [f"{key_prefix}{i}" if key_prefix else i for i in range(len(lengths))]
    return Data(path, keys, list(lengths))


def make_data(directory: Path, count: int, *, max_length: int = 5, seed: int = 0, ragged: bool = False) -> Data:
    return write_ctf(
        directory / f"data_{count}_{max_length}_{seed}_{int(ragged)}.ctf",
        random_lengths(count, max_length, seed),
        ragged=ragged,
    )


def chunk_keys(data: Data, chunk_size: int) -> list[list[Any]]:
    """The keys of each chunk of ``data`` read with ``chunk_size_in_bytes=chunk_size``."""
    deserializer = CTFDeserializer(data.path, STREAMS, chunk_size_in_bytes=chunk_size)
    return [[_plain(k) for k in deserializer.chunk_index(c).keys] for c in range(deserializer.num_chunks())]


@dataclass
class Sources:
    """Opens sources over CTF files and closes them all at the end."""

    opened: list[MinibatchSource] = field(default_factory=list)

    def open(
        self,
        data: Data | Deserializer,
        *,
        chunk_size: int = 400,
        ctf_options: dict[str, Any] | None = None,
        **options: Any,
    ) -> MinibatchSource:
        """A MinibatchSource over ``data`` (a new CTFDeserializer with small chunks, or a deserializer)."""
        if isinstance(data, Data):
            deserializer: Deserializer = CTFDeserializer(
                data.path, STREAMS, chunk_size_in_bytes=chunk_size, **(ctf_options or {})
            )
        else:
            deserializer = data
        source = MinibatchSource(deserializer, **options)
        self.opened.append(source)
        return source

    def close(self) -> None:
        for source in self.opened:
            source.close()
        self.opened.clear()


def _plain(key: Any) -> Any:
    """Provenance keys as plain Python values (tuples for frames), comparable and JSON-friendly."""
    if isinstance(key, (tuple, list)):
        return tuple(_plain(k) for k in key)
    if isinstance(key, np.generic):
        return key.item()
    return key


def keys_of(minibatch: Any) -> list[Any]:
    """The sequence keys (without the file name) of a minibatch, in row order."""
    return [_plain(key) for _, key in minibatch.sequence_keys]


def snapshot(minibatch: Any) -> tuple[Any, ...]:
    """Everything observable about a minibatch, as comparable plain values."""
    parts: list[Any] = [tuple(keys_of(minibatch))]
    for info in sorted(minibatch, key=lambda i: i.name):
        data = minibatch[info]
        parts.append(
            (
                info.name,
                bool(data.end_of_sweep),
                tuple(data.sequence_lengths.tolist()),
                data.mask.tobytes(),
                data.mask.shape,
                data.asarray().tobytes(),
                None if data.indices is None else (data.indices.tobytes(), data.indptr.tobytes()),
                tuple(_plain(k) for _, k in data.keys),
            )
        )
    return tuple(parts)


def sizes_cycle(sizes: Iterable[int]) -> Iterator[int]:
    return cycle(list(sizes))


def read(source: MinibatchSource, sizes: Iterable[int] | int, limit: int | None = None, **partition: Any) -> list[Any]:
    """Reads minibatches until the end (or ``limit`` of them) with the given sizes (cycled)."""
    sizes = sizes_cycle([sizes] if isinstance(sizes, int) else sizes)
    result: list[Any] = []
    while limit is None or len(result) < limit:
        minibatch = source.next_minibatch(next(sizes), **partition)
        if not minibatch:
            break
        result.append(minibatch)
    return result


def unit_stream(source: MinibatchSource, sizes: Iterable[int] | int, **partition: Any) -> list[Any]:
    """The concatenated keys of every minibatch until the end."""
    return [key for minibatch in read(source, sizes, **partition) for key in keys_of(minibatch)]


def split_sweeps(stream: list[Any], units_per_sweep: int) -> list[list[Any]]:
    assert len(stream) % units_per_sweep == 0, (len(stream), units_per_sweep)
    return [stream[i : i + units_per_sweep] for i in range(0, len(stream), units_per_sweep)]


def assert_exactly_once(stream: Iterable[Any], expected: Iterable[Any], times: int = 1) -> None:
    """Every expected unit occurs exactly ``times`` times in ``stream`` and nothing else does."""
    counts = Counter(stream)
    wanted = Counter({unit: times for unit in expected})
    missing = wanted - counts
    extra = counts - wanted
    assert not missing and not extra, (
        f"missing {dict(list(missing.items())[:5])}, extra {dict(list(extra.items())[:5])}"
    )


class CountingDeserializer(Deserializer):
    """Delegates to a CTFDeserializer and counts the chunks parsed (``calls``: chunk ids in call order)."""

    def __init__(self, inner: CTFDeserializer):
        self.inner = inner
        self.filename = inner.filename
        self.calls: list[int] = []
        self._lock = threading.Lock()

    def stream_infos(self) -> list[StreamInformation]:
        return self.inner.stream_infos()

    def num_chunks(self) -> int:
        return self.inner.num_chunks()

    def chunk_index(self, chunk_id: int) -> ChunkIndex:
        return self.inner.chunk_index(chunk_id)

    def get_chunk(self, chunk_id: int) -> dict[str, StreamData]:
        with self._lock:
            self.calls.append(chunk_id)
        return self.inner.get_chunk(chunk_id)

    def sequence_index(self) -> SequenceIndex:
        return self.inner.sequence_index()

    def identity(self) -> dict[str, Any]:
        return self.inner.identity()


def check_values(minibatch: Any, frame_mode: bool = False) -> None:
    """The x values of every sequence are [id, step] for the sequence (frame) the provenance names."""
    x = minibatch["x"]
    for (_, key), values in zip(minibatch.sequence_keys, x.as_sequences()):
        key = _plain(key)
        if frame_mode:
            (seq, frame) = key
            assert values.tolist() == [[float(seq), float(frame)]]
        else:
            assert values[:, 0].tolist() == [float(key)] * len(values)
            assert values[:, 1].tolist() == [float(t) for t in range(len(values))]
