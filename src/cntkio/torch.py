"""PyTorch: ``MinibatchDataset`` (an ``IterableDataset`` over a ``MinibatchSource``), ``loader``, tensor layouts.

The public face of ``cntkio._src.integrations.torch``."""

from cntkio._src.integrations.torch import (
    STATE_KEY,
    BatchState,
    MinibatchDataset,
    MinibatchLoader,
    TorchMinibatch,
    distributed_partition,
    gather_state,
    loader,
    merge_states,
)
from cntkio._src.integrations.torch_layouts import LAYOUTS, StreamTensors, stream_tensors, to_tensor

__all__ = [
    "LAYOUTS",
    "STATE_KEY",
    "BatchState",
    "MinibatchDataset",
    "MinibatchLoader",
    "StreamTensors",
    "TorchMinibatch",
    "distributed_partition",
    "gather_state",
    "loader",
    "merge_states",
    "stream_tensors",
    "to_tensor",
]
