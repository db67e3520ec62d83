"""Sweep orders, computed lazily block by block: which unit is read at each position of a sweep, and which partition
reads it.

An order is a pure function of (corpus, randomization, seed, sweep): nothing that runs concurrently (threads,
prefetch, minibatch sizes, partitions) changes it. A sweep is a sequence of *blocks*; a block is computed when the
reader reaches it (from a window of chunks in the default randomization, so memory is O(window), never O(units)).
The randomization names the algorithm and the steps applied to each block (:mod:`cntkio._src.order.registry`)."""

from __future__ import annotations

import numpy as np

from cntkio._src.corpus.table import Corpus
from cntkio._src.order.config import Block, Randomization
from cntkio._src.order.registry import ALGORITHMS, BLOCK_STEPS


class SweepOrder:
    """The reading order of one sweep, block by block."""

    def __init__(self, corpus: Corpus, randomization: Randomization, sweep: int):
        self.corpus = corpus
        self.randomization = randomization
        self.sweep = sweep
        self._algorithm = ALGORITHMS[randomization.algorithm](corpus, randomization, sweep)
        self._steps = [BLOCK_STEPS[name] for name in randomization.block_steps]
        self.chunk_order = self._algorithm.chunk_order
        count = corpus.num_chunks
        self.chunk_rank = np.empty(count, dtype=np.int64)
        self.chunk_rank[self.chunk_order] = np.arange(count, dtype=np.int64)

    @property
    def num_blocks(self) -> int:
        return self._algorithm.num_blocks

    def needed_chunks(self, k: int) -> np.ndarray:
        """Table chunks that units of block k may come from."""
        return self._algorithm.needed_chunks(k)

    def block(self, k: int) -> Block:
        block = self._algorithm.block(k)
        for step in self._steps:
            block = step(block, self.randomization, self.sweep, k)
        return block

    def block_start(self, k: int) -> tuple[int, int]:
        """Units and samples of the blocks before block k (where a cursor entering block k stands in the sweep),
        without building them."""
        return self._algorithm.block_start(k)

    def owners(self, block: Block, positions: np.ndarray, partitions: int) -> np.ndarray:
        """Partition owning each unit of a block (``positions``: the units' positions in the sweep).

        Randomized sweeps are split by chunk (a partition reads only its chunks) when there are enough
        chunks; otherwise, and in file order, by position."""
        owners: np.ndarray = self.chunk_rank[block.chunks] if self.chunk_level(partitions) else positions
        return owners % partitions

    def chunk_level(self, partitions: int) -> bool:
        return self.randomization.enabled and self.corpus.num_chunks >= partitions
