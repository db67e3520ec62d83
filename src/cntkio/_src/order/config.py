"""What an order is asked for (:class:`Randomization`) and what it gives, block by block (:class:`Block`)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from cntkio._src.common.arrays import exclusive_cumsum
from cntkio._src.corpus.table import Corpus


@dataclass(frozen=True)
class Randomization:
    """How sweeps are ordered. ``window`` counts chunks, or samples when ``sample_window``; ``bucket_samples`` > 0
    orders each block's units into minibatches of that many samples of similar length (see
    :func:`cntkio._src.order.bucketing.bucketed`)."""

    enabled: bool = False
    window: int = 1
    sample_window: bool = False
    seed: int = 0
    compat: bool = False
    bucket_samples: int = 0

    @property
    def algorithm(self) -> str:
        """The name of the order's algorithm (:data:`cntkio._src.order.registry.ALGORITHMS`): ``"file"`` when not
        randomized, ``"cntk"`` for CNTK's BlockRandomizer (``compat``), else ``"default"``."""
        if not self.enabled:
            return "file"
        return "cntk" if self.compat else "default"

    @property
    def block_steps(self) -> tuple[str, ...]:
        """The names of the steps applied to each block, in turn (:data:`cntkio._src.order.registry.BLOCK_STEPS`):
        ``"bucketing"`` when ``bucket_samples`` is set, on the default randomization's blocks only."""
        return ("bucketing",) if self.bucket_samples and self.algorithm == "default" else ()

    def identity(self) -> dict[str, object]:
        """What decides the order (for checkpoint fingerprints; an option left off is not listed, so states of
        sources without it keep their fingerprint)."""
        fields = dict(self.__dict__)
        if not fields["bucket_samples"]:
            del fields["bucket_samples"]
        return fields


@dataclass(frozen=True)
class Block:
    """The units of one block in reading order, their table chunks and sample counts."""

    units: np.ndarray  # int64 unit ids
    chunks: np.ndarray  # int32 table chunk of each unit
    lengths: np.ndarray  # int64 samples per unit
    cuts: np.ndarray | None = None  # length bucketing: positions where a read stops (each bucket's end)

    @classmethod
    def of_units(cls, corpus: Corpus, units: np.ndarray) -> Block:
        """The block of ``units`` (int64 unit ids of ``corpus``, in reading order)."""
        lengths = np.ones(len(units), dtype=np.int64) if corpus.frame_mode else corpus.lengths[units].astype(np.int64)
        return cls(units, corpus.chunk_of_units(units), lengths)

    def __len__(self) -> int:
        return len(self.units)

    @cached_property
    def starts(self) -> np.ndarray:
        """Sample offset of each unit inside the block, and the block's sample count last."""
        return exclusive_cumsum(self.lengths)

    @property
    def samples(self) -> int:
        return int(self.starts[-1])
