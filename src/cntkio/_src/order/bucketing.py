"""Length bucketing (block step ``"bucketing"``, ``bucket_by_length``): each block's units in minibatches of similar
length, the minibatches in a random order. The default randomization makes its blocks large enough for many
buckets (:func:`bucket_block_units`)."""

from __future__ import annotations

import math

import numpy as np

from cntkio._src.common.arrays import exclusive_cumsum
from cntkio._src.corpus.table import Corpus
from cntkio._src.order.config import Block, Randomization

BUCKET_STREAM = 0xB0C4E7  # seeds the shuffle of a block's length buckets apart from the other draws
BUCKET_BLOCK_MINIBATCHES = 16  # blocks are merged until they hold about this many minibatches


def bucket_block_units(corpus: Corpus, samples: int) -> int:
    """Units a block should hold for about :data:`BUCKET_BLOCK_MINIBATCHES` minibatches of ``samples`` samples
    (``corpus`` has units)."""
    unit_samples = max(corpus.sweep_size / corpus.num_units, 1.0)
    return math.ceil(BUCKET_BLOCK_MINIBATCHES * samples / unit_samples)


def bucketed(block: Block, randomization: Randomization, sweep: int, k: int) -> Block:
    """Block k of a sweep in minibatches of ``randomization.bucket_samples`` samples (at least one unit each) of
    similar length: the units by length (stable: ties keep the block's random order), cut greedily as a read takes
    them, and the minibatches in a random order (seeded with ``[seed, sweep, k]`` + :data:`BUCKET_STREAM`); ``cuts``
    marks where each ends, so a read stops there. A pure function of its arguments."""
    if len(block) <= 1:
        return block
    samples = randomization.bucket_samples
    by_length = np.argsort(block.lengths, kind="stable")
    cumulative = exclusive_cumsum(block.lengths[by_length])
    ends = []
    start = 0
    while start < len(by_length):  # a batch per pass: what a read of `samples` samples takes
        end = int(cumulative.searchsorted(cumulative[start] + samples, side="right")) - 1
        start = max(end, start + 1)
        ends.append(start)
    sizes = np.diff(np.concatenate([[0], ends]))
    batch_of = np.repeat(np.arange(len(ends)), sizes)
    rank = np.random.default_rng([randomization.seed % 2**64, sweep, k, BUCKET_STREAM]).permutation(len(ends))
    order = by_length[np.argsort(rank[batch_of], kind="stable")]
    cuts = np.cumsum(sizes[np.argsort(rank)])  # the buckets' ends in reading order
    return Block(block.units[order], block.chunks[order], block.lengths[order], cuts)
