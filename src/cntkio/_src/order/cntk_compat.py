"""CNTK's BlockRandomizer exactly (algorithm ``"cntk"``, ``compat=True``): MT19937-64, its swap shuffles, sweep k
seeded with ``seed + k``; block k = the positions of randomized chunk k. This order is computed for the whole sweep
(as CNTK does), so it costs memory per unit."""

from __future__ import annotations

import numpy as np

from cntkio import _native
from cntkio._src.common.arrays import exclusive_cumsum
from cntkio._src.corpus.table import Corpus
from cntkio._src.order.config import Block, Randomization


class CntkOrder:
    """A sweep in CNTK's BlockRandomizer order, computed whole when made."""

    def __init__(self, corpus: Corpus, randomization: Randomization, sweep: int):
        r = randomization
        self.corpus = corpus
        self._units, self.chunk_order, _, _ = _native.compat_block_order(
            corpus.units_per_chunk.tolist(), corpus.chunk_samples.tolist(), r.window, r.sample_window,
            (r.seed + sweep) % 2**64,
        )  # fmt: skip
        self._starts = exclusive_cumsum(corpus.units_per_chunk[self.chunk_order])  # first position of each block

    @property
    def num_blocks(self) -> int:
        return self.corpus.num_chunks

    def needed_chunks(self, k: int) -> np.ndarray:
        return np.unique(self.block(k).chunks)

    def block(self, k: int) -> Block:
        return Block.of_units(self.corpus, self._units[self._starts[k] : self._starts[k + 1]])

    def block_start(self, k: int) -> tuple[int, int]:
        units = int(self._starts[k])
        return units, units if self.corpus.frame_mode else int(self.corpus.lengths[self._units[:units]].sum())
