"""Hugging Face ``datasets``: any cntkio data as a ``datasets.IterableDataset``, a shard per chunk, and the errors
counted under ``max_errors`` as a dataset of records.

The public face of ``cntkio._src.integrations.hf``."""

from cntkio._src.integrations.hf import errors_dataset, iterable_dataset

__all__ = ["errors_dataset", "iterable_dataset"]
