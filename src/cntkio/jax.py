"""JAX: ``JaxIterator`` yields fixed-shape batches for this process, multi-process aware.

The public face of ``cntkio._src.integrations.jax``."""

from cntkio._src.integrations.jax import (
    JaxBatch,
    JaxIterator,
    bucket,
)

__all__ = [
    "JaxBatch",
    "JaxIterator",
    "bucket",
]
