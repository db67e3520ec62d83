"""How the reader's chunk cache uses a ``ChunkLoader`` (``reading/chunk_cache.py``): a loader switched while loads
are queued (a ``DataLoader`` worker ending its pass detaches its exchange of shared chunks) does not take them — they
finish through the loader they were asked of (before: they ran as parses of the worker's own, so a chunk the other
worker shared was parsed twice)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import numpy as np

from cntkio import ChunkIndex, DenseStream, Deserializer, MinibatchSource, StreamInformation
from cntkio._src.reading.chunk_cache import Chunk, ChunkName, ParseHere

CHUNKS, PER_CHUNK = 8, 10


class SlowChunks(Deserializer):
    """Chunks of ``PER_CHUNK`` one-sample sequences that take 50 ms each to parse."""

    def __init__(self) -> None:
        self.info = StreamInformation("x", 0, "dense", np.dtype(np.float32), (1,))

    def stream_infos(self) -> list[StreamInformation]:
        return [self.info]

    def num_chunks(self) -> int:
        return CHUNKS

    def chunk_index(self, chunk: int) -> ChunkIndex:
        keys = np.arange(PER_CHUNK * chunk, PER_CHUNK * (chunk + 1))
        return ChunkIndex(chunk, keys, np.ones(PER_CHUNK, dtype=np.int64))

    def get_chunk(self, chunk: int) -> dict[str, DenseStream]:
        time.sleep(0.05)
        values = np.arange(PER_CHUNK * chunk, PER_CHUNK * (chunk + 1), dtype=np.float32).reshape(-1, 1)
        return {"x": DenseStream(values, np.arange(PER_CHUNK + 1))}


class Recording(ParseHere):
    """Parses here, and records the chunks it was asked for."""

    def __init__(self) -> None:
        self.names: list[ChunkName] = []
        self.lock = threading.Lock()

    def load(self, name: ChunkName, parse: Callable[[], Chunk], *, wait: bool = True) -> Chunk | None:
        with self.lock:
            self.names.append(name)
        return parse()


def test_loads_queued_before_a_loader_switch_finish_through_the_loader_before() -> None:
    source = MinibatchSource(SlowChunks(), max_sweeps=1, randomization_window_in_chunks=CHUNKS, randomization_seed=3,
                             num_parse_threads=1)  # fmt: skip
    first, second = Recording(), Recording()
    source.engine.use_loader(first)
    assert source.next_minibatch(4)  # (the window's other chunks are queued for the one parse thread)
    asked = {slot for _, slot in source.engine.cache._futures}  # (one deserializer: slot = chunk)
    assert len(asked) > 2
    source.engine.use_loader(second)
    assert sorted(name[1] for name in first.names) == sorted(asked)  # (before: only the one being parsed)
    keys = []
    keys = []
    while minibatch := source.next_minibatch(4):
        keys.extend(key for _, key in minibatch.sequence_keys)
    assert len(keys) == CHUNKS * PER_CHUNK - 4
    assert not asked & {name[1] for name in second.names}  # none parsed again
    source.close()
