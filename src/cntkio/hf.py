"""Hugging Face ``datasets``: any cntkio data as a ``datasets.IterableDataset``, a shard per chunk.

The public face of ``cntkio._src.integrations.hf``."""

from cntkio._src.integrations.hf import iterable_dataset

__all__ = ["iterable_dataset"]
