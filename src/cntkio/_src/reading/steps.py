"""A partition's share of a minibatch; and per partition the samples of each minibatch of an epoch of whole sweeps,
from the order alone, vectorised: what :meth:`ReadingEngine.partition_steps` walks read by read, computed here with
NumPy for the common case — each partition's units in order, then its reads packed greedily as
:meth:`Cursor.select` packs them (whole units while they fit the budget, at least one).
"""

from __future__ import annotations

import numpy as np

from cntkio._src.corpus.table import Corpus
from cntkio._src.order import Randomization
from cntkio._src.reading.cursor import Cursor


def share(total: int, partitions: int, index: int) -> int:
    """Partition ``index``'s part of ``total`` (a minibatch's samples, BPTT slots) split over ``partitions``: the
    remainder goes one each to the first partitions."""
    return total // partitions + (index < total % partitions)


def steps_of_sweeps(
    corpus: Corpus,
    randomization: Randomization,
    minibatch_size: int,
    partitions: int,
    epoch: int,
    epoch_size: float,
    truncation_length: int,
) -> list[np.ndarray] | None:
    """Per partition, the samples of each minibatch it reads in epoch ``epoch``; None where reads end elsewhere
    too (truncated BPTT, length buckets, data that varies by sweep, epochs that are not whole sweeps)."""
    sweep_size = corpus.sweep_size
    if truncation_length or randomization.bucket_samples or corpus.sweep_dependent:
        return None
    if epoch_size % sweep_size:
        return None
    sweeps = int(epoch_size // sweep_size)
    cursor = Cursor(corpus, randomization)
    pieces: list[list[np.ndarray]] = [[] for _ in range(partitions)]
    for sweep in range(epoch * sweeps, (epoch + 1) * sweeps):
        order, position = cursor.order(sweep), 0
        for k in range(order.num_blocks):
            block = order.block(k)
            if partitions == 1:
                pieces[0].append(block.lengths)
            else:
                owners = order.owners(block, position + np.arange(len(block), dtype=np.int64), partitions)
                for index in range(partitions):
                    pieces[index].append(block.lengths[owners == index])
            position += len(block)
    sizes = []
    for index, lengths in enumerate(pieces):
        budget = max(1, share(minibatch_size, partitions, index))
        units = np.concatenate(lengths or [np.zeros(0, dtype=np.int64)]).astype(np.int64)
        ends = np.concatenate([np.zeros(1, dtype=np.int64), np.cumsum(units)])
        count = len(ends) - 1
        fitting = np.searchsorted(ends, ends[:-1] + budget, side="right") - 1  # the read starting at unit i ends
        following = np.maximum(fitting, np.arange(1, count + 1)).tolist()  # ... before this unit (at least one)
        firsts, unit = [], 0
        while unit < count:  # one step per minibatch
            firsts.append(unit)
            unit = following[unit]
        sizes.append(np.diff(ends[np.asarray([*firsts, count], dtype=np.int64)]).astype(np.int64))
    return sizes
