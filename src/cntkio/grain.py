"""Grain: ``SequenceSource`` (a random-access data source of sequences) and ``minibatches`` (an ``IterDataset`` of a
``MinibatchSource`` whose state is cntkio's checkpoint).

The public face of ``cntkio._src.integrations.grain``."""

from cntkio._src.integrations.grain import (
    MinibatchDataset,
    MinibatchIterator,
    SequenceSource,
    minibatches,
    padded_batch,
)

__all__ = [
    "MinibatchDataset",
    "MinibatchIterator",
    "SequenceSource",
    "minibatches",
    "padded_batch",
]
