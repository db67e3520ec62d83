"""Transitional: the old import path of :mod:`cntkio._src.order`'s names, kept for the importers outside the order
package not switched yet (``grep -rn order.algorithms src``). Import from ``cntkio._src.order``; this module goes
when the last of them does."""

from cntkio._src.order import BLOCK_SPAN, Block, Randomization, SweepOrder, merge_step

__all__ = ["BLOCK_SPAN", "Block", "Randomization", "SweepOrder", "merge_step"]
