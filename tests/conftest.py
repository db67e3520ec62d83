"""Shared test helpers: write CTF text to a file and read it back per sequence, or as a MinibatchSource."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import scipy.sparse

from cntkio import CTFDeserializer, DenseStream, MinibatchSource, SparseStream


@dataclass
class Parsed:
    """What a CTF file yields, in index order: keys, index lengths and per-sequence arrays per stream.

    ``streams[name][i]`` is sequence i of a stream: a dense ``(samples, dim)`` ndarray, or a sparse
    ``(samples, dim)`` CSR matrix (entries in the order the reader stored them).
    """

    deserializer: CTFDeserializer
    keys: list[Any]
    lengths: list[int]
    chunk_keys: list[list[Any]]
    streams: dict[str, list[Any]]

    def dense(self, name: str) -> list[list[list[float]]]:
        """A dense stream as nested lists: sequence -> sample -> values."""
        return [sequence.tolist() for sequence in self.streams[name]]

    def sparse(self, name: str) -> list[list[list[tuple[int, float]]]]:
        """A sparse stream as nested lists: sequence -> sample -> (index, value) in stored order."""
        return [_rows(matrix) for matrix in self.streams[name]]


def numbered_ctf(path: Path, sequences: int) -> Path:
    """Sequence k holds one sample ``x = [k, k]``; every line has the same length (keys padded)."""
    path.write_text("".join(f"{k:06d} |x {k:06d} {k:06d}\n" for k in range(sequences)))
    return path


def _rows(matrix: scipy.sparse.csr_matrix) -> list[list[tuple[int, float]]]:
    indptr = matrix.indptr.tolist()
    return [list(zip(matrix.indices[a:b].tolist(), matrix.data[a:b].tolist())) for a, b in itertools.pairwise(indptr)]


def _key(key: Any) -> Any:
    return key if isinstance(key, str) else int(key)


def parse_all(deserializer: CTFDeserializer) -> Parsed:
    """Parses every chunk of a deserializer and splits the streams into sequences."""
    keys: list[Any] = []
    chunk_keys: list[list[Any]] = []
    streams: dict[str, list[Any]] = {info.name: [] for info in deserializer.stream_infos()}
    for chunk_id in range(deserializer.num_chunks()):
        these = [_key(k) for k in deserializer.chunk_index(chunk_id).keys]
        chunk_keys.append(these)
        keys += these
        for name, data in deserializer.get_chunk(chunk_id).items():
            bounds = data.seq_offsets.tolist()
            assert len(bounds) == len(these) + 1
            if isinstance(data, DenseStream):
                streams[name] += [data.values[a:b] for a, b in itertools.pairwise(bounds)]
            else:
                assert isinstance(data, SparseStream)
                matrix = data.csr()
                streams[name] += [matrix[a:b] for a, b in itertools.pairwise(bounds)]
    lengths = deserializer.sequence_lengths().tolist()
    assert len(lengths) == len(keys)
    return Parsed(deserializer, keys, lengths, chunk_keys, streams)


class CTFFiles:
    """Writes CTF content into a directory and opens it with cntkio."""

    def __init__(self, directory: Path):
        self.directory = directory
        self._names = itertools.count()
        self._sources: list[MinibatchSource] = []
        self._written: dict[bytes, Path] = {}

    def write(self, content: str | bytes) -> Path:
        """Writes ``content`` (str as UTF-8, bytes as they are) to a new file; returns its path. The same
        content gets the same file."""
        data = content.encode("utf-8") if isinstance(content, str) else content
        path = self._written.get(data)
        if path is None or not path.exists() or path.read_bytes() != data:
            path = self.directory / f"data{next(self._names)}.ctf"
            path.write_bytes(data)
            self._written[data] = path
        return path

    def deserializer(self, content: str | bytes, streams: Any, **options: Any) -> CTFDeserializer:
        return CTFDeserializer(self.write(content), streams, **options)

    def read(self, content: str | bytes, streams: Any, **options: Any) -> Parsed:
        """Writes ``content``, opens it with ``CTFDeserializer(**options)`` and parses every chunk."""
        return parse_all(self.deserializer(content, streams, **options))

    def source(
        self, content: str | bytes, streams: Any, ctf_options: dict[str, Any] | None = None, **options: Any
    ) -> MinibatchSource:
        """A ``MinibatchSource(randomize=False)`` over ``content``; closed when the fixture ends."""
        options.setdefault("randomize", False)
        source = MinibatchSource(self.deserializer(content, streams, **(ctf_options or {})), **options)
        self._sources.append(source)
        return source

    def close(self) -> None:
        for source in self._sources:
            source.close()
        self._sources.clear()


@pytest.fixture
def ctf(tmp_path: Path) -> Iterator[CTFFiles]:
    """CTF files in the test's own temporary directory."""
    files = CTFFiles(tmp_path)
    yield files
    files.close()


@pytest.fixture(scope="session")
def ctf_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CTFFiles]:
    """CTF files in a session-wide directory (for Hypothesis tests, which cannot use function fixtures)."""
    files = CTFFiles(tmp_path_factory.mktemp("ctf"))
    yield files
    files.close()
