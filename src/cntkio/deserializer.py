"""The deserializer protocol: an index of chunks and sequences, and stateless chunk parsing.

Every format (and every user plug-in) implements :class:`Deserializer`. After construction a
deserializer is immutable: ``get_chunk`` may be called from any thread, in any order, any number of
times, and returns the same data each time.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Union

import numpy as np
import scipy.sparse

from .streams import StreamInformation


@dataclass(frozen=True)
class DenseStream:
    """Dense samples of a chunk: ``values[seq_offsets[i]:seq_offsets[i+1]]`` is sequence i."""

    values: np.ndarray  # (num_samples, *shape)
    seq_offsets: np.ndarray  # int64, (num_sequences + 1,)


@dataclass(frozen=True)
class SparseStream:
    """Sparse samples of a chunk in CSR form: row = sample, ``seq_offsets`` groups rows by sequence."""

    values: np.ndarray
    indices: np.ndarray  # int32 column indices, sorted within each row
    indptr: np.ndarray  # int64, (num_samples + 1,)
    seq_offsets: np.ndarray  # int64, (num_sequences + 1,)
    dim: int

    def csr(self) -> scipy.sparse.csr_matrix:
        """All samples of the chunk as one CSR matrix (num_samples, dim), sharing memory."""
        return scipy.sparse.csr_matrix(
            (self.values, self.indices, self.indptr), shape=(len(self.indptr) - 1, self.dim), copy=False
        )


StreamData = Union[DenseStream, SparseStream]


@dataclass(frozen=True)
class ChunkIndex:
    """What the index knows of one chunk before parsing it: per-sequence keys and lengths."""

    chunk_id: int
    keys: Sequence[Any]  # a NumPy array (numeric keys) or a list of strings
    lengths: np.ndarray  # int64 samples per sequence (on the stream that defines the minibatch size)

    @property
    def num_sequences(self) -> int:
        return len(self.lengths)

    @property
    def num_samples(self) -> int:
        return int(self.lengths.sum())


class Deserializer(abc.ABC):
    """One data format. Subclass it to add a format: implement the four methods below."""

    @abc.abstractmethod
    def stream_infos(self) -> list[StreamInformation]:
        """The streams this deserializer produces, in order."""

    @abc.abstractmethod
    def num_chunks(self) -> int:
        """Number of chunks (> 0)."""

    @abc.abstractmethod
    def chunk_index(self, chunk_id: int) -> ChunkIndex:
        """Keys and lengths of the sequences of a chunk, without parsing it."""

    @abc.abstractmethod
    def get_chunk(self, chunk_id: int) -> dict[str, StreamData]:
        """Parses a chunk: stream name -> data of every sequence of the chunk, in index order."""

    def sequence_lengths(self) -> np.ndarray:
        """Lengths of every sequence, chunk after chunk (int64)."""
        return np.concatenate([self.chunk_index(c).lengths for c in range(self.num_chunks())])

    def chunk_sequence_counts(self) -> np.ndarray:
        """Number of sequences in each chunk (int64)."""
        return np.array([self.chunk_index(c).num_sequences for c in range(self.num_chunks())], dtype=np.int64)

    def sequence_keys(self, sequence_ids: np.ndarray) -> list[Any]:
        """Keys of sequences given by their index in file order (chunk after chunk)."""
        keys = [key for c in range(self.num_chunks()) for key in self.chunk_index(c).keys]
        return [keys[i] for i in sequence_ids.tolist()]

    @property
    def source_name(self) -> str:
        """Names the data in provenance records (a file name for file formats)."""
        return str(getattr(self, "filename", type(self).__name__))
