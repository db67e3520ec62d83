"""File order (algorithm ``"file"``, not randomized): block k = table chunk k, every sweep alike."""

from __future__ import annotations

import numpy as np

from cntkio._src.corpus.table import Corpus
from cntkio._src.order.config import Block, Randomization


class FileOrder:
    """The table's chunks in order, each one block. ``randomization`` and ``sweep`` do not change it."""

    def __init__(self, corpus: Corpus, randomization: Randomization, sweep: int):
        self.corpus = corpus
        self.chunk_order = np.arange(corpus.num_chunks, dtype=np.int64)

    @property
    def num_blocks(self) -> int:
        return self.corpus.num_chunks

    def needed_chunks(self, k: int) -> np.ndarray:
        return np.array([k], dtype=np.int64)

    def block(self, k: int) -> Block:
        units = self.corpus.units_of_chunk(k)
        return Block(units, np.full(len(units), k, dtype=np.int32), self.corpus.unit_lengths(k))

    def block_start(self, k: int) -> tuple[int, int]:
        return int(self.corpus.unit_starts[k]), int(self.corpus.chunk_samples[:k].sum())
