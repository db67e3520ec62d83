"""The order algorithms and block steps by name (as :class:`~cntkio._src.order.config.Randomization` names them).

An algorithm is made from (corpus table, randomization, sweep) and gives that sweep's chunk shuffle and its blocks;
a block step rewrites block k of a sweep: both are pure functions of their arguments (and of the seed in the
randomization), so nothing that runs concurrently changes an order."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np

from cntkio._src.corpus.table import Corpus
from cntkio._src.order.bucketing import bucketed
from cntkio._src.order.cntk_compat import CntkOrder
from cntkio._src.order.config import Block, Randomization
from cntkio._src.order.default import DefaultOrder
from cntkio._src.order.file_order import FileOrder


class SweepAlgorithm(Protocol):
    """One sweep's order: its blocks are read in turn, each from a few of the table's chunks."""

    chunk_order: np.ndarray  # the table chunks in randomized order (int64)

    @property
    def num_blocks(self) -> int: ...

    def needed_chunks(self, k: int) -> np.ndarray:
        """Table chunks that units of block k may come from."""
        ...

    def block(self, k: int) -> Block: ...

    def block_start(self, k: int) -> tuple[int, int]:
        """Units and samples of the blocks before block k, without building them."""
        ...


Algorithm = Callable[[Corpus, Randomization, int], SweepAlgorithm]
BlockStep = Callable[[Block, Randomization, int, int], Block]  # (block, randomization, sweep, k) -> block

ALGORITHMS: dict[str, Algorithm] = {"file": FileOrder, "default": DefaultOrder, "cntk": CntkOrder}
BLOCK_STEPS: dict[str, BlockStep] = {"bucketing": bucketed}
