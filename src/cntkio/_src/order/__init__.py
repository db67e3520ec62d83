"""Sequence orders: pure functions of (table, configuration, seed, sweep, partition).

* :mod:`.config`: :class:`Randomization` (what is asked for: it names the algorithm and block steps) and :class:`Block`
* :mod:`.registry`: the algorithms and block steps by name
* :mod:`.file_order`, :mod:`.default`, :mod:`.cntk_compat`: the algorithms ``"file"``, ``"default"``, ``"cntk"``
* :mod:`.bucketing`: the block step ``"bucketing"`` (length buckets)
* :mod:`.sweep`: :class:`SweepOrder`, one sweep's blocks and which partition reads each unit"""

from cntkio._src.order.config import Block, Randomization
from cntkio._src.order.default import BLOCK_SPAN, merge_step
from cntkio._src.order.sweep import SweepOrder

__all__ = ["BLOCK_SPAN", "Block", "Randomization", "SweepOrder", "merge_step"]
