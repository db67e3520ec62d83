"""Sharded corpora: several files of one format read as one corpus.

A file format's ``sharded(files, ...)`` (:meth:`Sharded.sharded`: ``CTFDeserializer.sharded``,
``CBFDeserializer.sharded``, ``Base64ImageDeserializer.sharded``) reads a list of files, or a glob pattern, as one
corpus, a :class:`ShardedDeserializer` of one deserializer per file (the public names, ``cntkio.CTFDeserializer``
and the others, given several files call it):

* **File order**: a list is read in the order given; a pattern's matches are sorted by path (byte order), so the
  corpus is the same on every machine. The corpus is the files' sequences one file after the other, chunks of
  every file numbered after those of the files before: ``data_slice``, partitions and randomization span the
  corpus (chunks of all files are shuffled together), and the order for a seed is a pure function of the file list.
* **Keys**: as in the files, as if the files were one concatenated file: a key that appears in several shards
  stays several sequences (a join by key reports it as a duplicate); provenance names the shard each sequence
  comes from.
* Each shard is a deserializer of its own (its index, index cache, errors under ``max_errors`` per file); all
  must have the same streams.

Example::

    train = CTFDeserializer.sharded("corpus/train-*.ctf", streams)   # every shard, in path order
    train = CTFDeserializer.sharded(["a.ctf", "b.ctf"], streams)      # these two, in this order
"""

from __future__ import annotations

import glob
import os
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from cntkio._src.common.errors import ConfigError, FormatError, Location
from cntkio._src.common.keys import KeyColumn
from cntkio._src.common.system import available_cores
from cntkio._src.formats import remote
from cntkio._src.formats.error_ledger import ErrorLedger
from cntkio._src.formats.identity import array_digest, identity_of, index_digest, index_identity, listed
from cntkio._src.formats.protocol import Deserializer, FileTable, IndexedDeserializer, SequenceIndex

__all__ = ["Sharded", "ShardedDeserializer", "expand_paths"]

_GLOB_CHARACTERS = frozenset("*?[")


def expand_paths(files: Any) -> list[str] | None:
    """The files a deserializer argument names when it names several (a list, or a glob pattern that is not an
    existing file): sorted matches of a pattern, a list as given; None for a single file."""
    if isinstance(files, (str, bytes, os.PathLike)):
        path = os.fsdecode(files)
        if not _GLOB_CHARACTERS & set(path) or (not remote.is_remote(path) and os.path.exists(path)):
            return None
        matches = remote.expand(path) if remote.is_remote(path) else sorted(glob.glob(path), key=os.fsencode)
        if not matches:
            raise FileNotFoundError(f"no file matches the pattern '{path}'")
        return matches
    paths = [os.fsdecode(p) for p in files]
    if not paths:
        raise ConfigError("an empty list of files")
    return paths


class Sharded(Deserializer):
    """A file format that can read several files as one corpus: :meth:`sharded` opens them (its constructor opens
    one file)."""

    @classmethod
    def sharded(cls, files: Any, *args: Any, **kwargs: Any) -> ShardedDeserializer:
        """A :class:`ShardedDeserializer` of ``files`` (a list of paths, read in its order; a glob pattern, its
        matches in path order; or one path): one deserializer per file, each made as ``cls(path, *args,
        **kwargs)``, indexed in parallel."""
        paths = expand_paths(files) or [os.fsdecode(files)]
        started = time.perf_counter()
        with ThreadPoolExecutor(max_workers=min(available_cores(), len(paths))) as pool:  # indexes on every core
            futures = [pool.submit(cls, path, *args, **kwargs) for path in paths]
        failed = next((f.exception() for f in futures if f.exception() is not None), None)
        if failed is not None:  # the first file's error, in file order; the shards that opened are closed
            for future in futures:
                if future.exception() is None:
                    future.result().close()
            raise failed
        shards = [future.result() for future in futures]
        if isinstance(files, (str, bytes, os.PathLike)):
            description = os.fsdecode(files)
        else:
            description = f"{len(paths)} files ({paths[0]} ... {paths[-1]})" if len(paths) > 1 else paths[0]
        sharded = ShardedDeserializer(shards, description)
        sharded.index_seconds = time.perf_counter() - started  # (MinibatchSource.stats)
        return sharded


class ShardedDeserializer(IndexedDeserializer):
    """Several deserializers of the same streams read as one corpus, one after the other (see the module).

    ``shards`` are the per-file deserializers, ``source_name`` describes them (the pattern, or the list).
    """

    def __init__(self, shards: Sequence[Deserializer], description: str):
        if not shards:
            raise ConfigError("a sharded corpus needs at least one shard")
        self.shards = list(shards)
        self.filename = description
        self.index_seconds = 0.0  # the time to build the shards and join their indexes (set by the opener)
        first = self.shards[0]
        self.trace_level = first.trace_level
        layout = _layout(first)
        for shard in self.shards[1:]:
            if _layout(shard) != layout:
                raise FormatError(
                    f"its streams {_layout(shard)} differ from those of the first shard ({first.source_name}: "
                    f"{layout}); every shard of a corpus must have the same streams",
                    Location(shard.source_name, 0),
                )
        flags = {(s.sweep_dependent, s.broadcast, s.supports_frame_mode) for s in self.shards}
        if len(flags) > 1:
            raise ConfigError(f"{description}: the shards differ in how their data is read (augmentation, broadcast)")
        self.sweep_dependent, self.broadcast, self.supports_frame_mode = flags.pop()
        self._infos = first.stream_infos()
        indexes = [shard.sequence_index() for shard in self.shards]
        chunks = np.array([len(index.chunk_starts) - 1 for index in indexes], dtype=np.int64)
        sequences = np.array([index.num_sequences for index in indexes], dtype=np.int64)
        self._first_chunk = np.concatenate([[0], np.cumsum(chunks)])  # of each shard, and the total
        self._first_sequence = np.concatenate([[0], np.cumsum(sequences)])
        chunk_starts = np.concatenate(
            [[0]] + [index.chunk_starts[1:] + base for index, base in zip(indexes, self._first_sequence[:-1])]
        ).astype(np.int64)
        lengths = np.concatenate([np.asarray(index.lengths) for index in indexes])
        keys = KeyColumn.concatenate([index.keys for index in indexes])
        self._index = SequenceIndex(chunk_starts, lengths, keys)

    def _shard_of_chunk(self, chunk_id: int) -> tuple[Deserializer, int]:
        if not 0 <= chunk_id < self.num_chunks():
            raise IndexError(f"chunk {chunk_id} out of range (0..{self.num_chunks() - 1})")
        shard = int(np.searchsorted(self._first_chunk, chunk_id, side="right")) - 1
        return self.shards[shard], chunk_id - int(self._first_chunk[shard])

    def get_chunk(self, chunk_id: int) -> Any:
        return self.get_chunk_of_sweep(chunk_id, 0)

    def get_chunk_of_sweep(self, chunk_id: int, sweep: int) -> Any:
        shard, local = self._shard_of_chunk(chunk_id)
        return shard.get_chunk_of_sweep(local, sweep)

    def prefetch_chunk(self, chunk_id: int) -> None:
        shard, local = self._shard_of_chunk(chunk_id)
        shard.prefetch_chunk(local)

    def cancel_prefetch(self, chunk_id: int) -> None:
        shard, local = self._shard_of_chunk(chunk_id)
        shard.cancel_prefetch(local)

    def chunk_file_bytes(self) -> np.ndarray | None:
        """The shards' chunk sizes in shard order (None if a shard's format does not know them)."""
        parts = [shard.chunk_file_bytes() for shard in self.shards]
        return None if any(p is None for p in parts) else np.concatenate(parts)  # type: ignore[arg-type]

    def file_table(self) -> FileTable:
        """The shards (files), and the first sequence of each (numbered across the corpus)."""
        return FileTable([shard.source_name for shard in self.shards], self._first_sequence[:-1])

    def identity(self) -> dict[str, Any]:
        """The first shard's kind and options, every shard's files in order, and the corpus index (digested as its
        shards' index digests, which determine it: those kept in the shards' index caches are used as they are)."""
        first = identity_of(self.shards[0])
        files = [entry for shard in self.shards for entry in identity_of(shard).get("files", [])]
        digest = array_digest(["shards", *(index_digest(shard) for shard in self.shards)])
        identity = {"kind": f"sharded {first['kind']}", "files": listed(files), "index": index_identity(self, digest)}
        if "options" in first:
            identity["options"] = first["options"]
        return identity

    def set_trace_level(self, level: int) -> None:
        self.trace_level = level
        for shard in self.shards:
            shard.set_trace_level(level)

    def ledgers(self) -> list[tuple[ErrorLedger, Deserializer]]:
        return [pair for shard in self.shards for pair in shard.ledgers()]

    def close(self) -> None:
        for shard in self.shards:
            shard.close()


def _layout(deserializer: Deserializer) -> list[tuple[Any, ...]]:
    return [(i.name, i.storage_format, str(i.dtype), tuple(i.shape)) for i in deserializer.stream_infos()]
