"""Hugging Face ``datasets``: any cntkio data as a ``datasets.IterableDataset`` whose shards are cntkio chunks.

:func:`iterable_dataset` plans the chunks as the Ray datasources do
(:class:`~cntkio._src.integrations.chunk_rows.ChunkPlan`: a part per factory, the chunks of each part's primary
deserializer) and builds the dataset with
``IterableDataset.from_generator(rows, gen_kwargs={"chunks": [...]})``: a list in ``gen_kwargs`` is what ``datasets``
splits into shards, so ``datasets.distributed.split_dataset_by_node`` and the workers of a PyTorch ``DataLoader``
each read their own chunks, never the same sequence twice. Rows have the columns of the Ray datasource's blocks
(``file``, ``chunk``, ``row``, ``key`` and per stream the flattened samples or the sparse indices, values and entries),
with the features of their Arrow schema.

Each chunk is read by a fresh reader, so ``max_errors`` is a budget per chunk (not one for the corpus, as in a
:class:`~cntkio.MinibatchSource`): a chunk fails while iterating when its own counted errors pass it.
:func:`errors_dataset` gives the errors the chunks' reads count.

Install with ``pip install "cntkio[hf]"`` (``datasets``).

Example::

    import functools, cntkio.hf
    from cntkio import CTFDeserializer
    data = cntkio.hf.iterable_dataset(functools.partial(CTFDeserializer, "train.ctf", streams))
    for row in data.with_format("numpy"):
        ...
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from cntkio._src.integrations.chunk_rows import ChunkPlan

__all__ = ["errors_dataset", "iterable_dataset"]


def _datasets() -> Any:
    try:
        import datasets
    except ImportError as error:
        raise ImportError('cntkio.hf needs Hugging Face datasets: pip install "cntkio[hf]" (or "datasets")') from error
    return datasets


def _rows(plan: ChunkPlan, chunks: Sequence[tuple[int, int]]) -> Iterator[dict[str, Any]]:
    """The rows of the given (part, chunk) pairs, in order (the generator each shard runs)."""
    for part, chunk in chunks:
        yield from plan.read(part, chunk).to_pylist()


def iterable_dataset(source: Any, *, sweep: int = 0, length_mismatch: str = "pad") -> Any:
    """Any cntkio data as a ``datasets.IterableDataset`` of sequences, a shard per chunk (see the module).

    Args:
        source: a picklable factory making the deserializers (primary first, joined by key) — e.g.
            ``functools.partial(CTFDeserializer, path, streams)`` —, a list of factories (a part each, numbered by
            the ``file`` column), deserializers made beforehand (pickled to the workers), or a
            :mod:`cntkio.ray` datasource (its ``chunk_plan``: the same parts and chunks).
        sweep: the sweep whose data a sweep-dependent deserializer gives (random image augmentation).
        length_mismatch: ``"pad"``, ``"drop"`` or ``"error"``, as in MinibatchSource.

    Returns:
        ``datasets.IterableDataset`` with ``n_shards`` = the number of chunks, in corpus order.
    """
    datasets = _datasets()
    plan = getattr(source, "chunk_plan", None)
    if not isinstance(plan, ChunkPlan):
        plan = ChunkPlan(source, sweep=sweep, length_mismatch=length_mismatch)
    features = datasets.Features.from_arrow_schema(plan.schema())
    return datasets.IterableDataset.from_generator(
        _rows, features=features, gen_kwargs={"plan": plan, "chunks": plan.tasks}
    )


def _errors(plan: ChunkPlan, chunks: Sequence[tuple[int, int]]) -> Iterator[dict[str, Any]]:
    """The error records of the given (part, chunk) pairs' reads, in order."""
    for part, chunk in chunks:
        yield from plan.errors(part, chunk).to_pylist()


def errors_dataset(source: Any, *, sweep: int = 0, length_mismatch: str = "pad") -> Any:
    """The errors the reads of :func:`iterable_dataset` count under ``max_errors``, as a ``datasets.IterableDataset``
    with a row per error and a shard per chunk (columns ``file`` (the part), ``chunk``, ``source``, ``offset``,
    ``line``, ``column``, ``key``, ``reason``, ``message``: those of ``cntkio.ray``'s ``datasource.errors()``). Each
    chunk is parsed again by a fresh reader, giving what a read of that chunk counts (its own ``max_errors`` budget);
    the errors found while indexing come with each part's chunk 0. Arguments as :func:`iterable_dataset`."""
    datasets = _datasets()
    plan = getattr(source, "chunk_plan", None)
    if not isinstance(plan, ChunkPlan):
        plan = ChunkPlan(source, sweep=sweep, length_mismatch=length_mismatch)
    from cntkio._src.integrations.chunk_rows import errors_table

    features = datasets.Features.from_arrow_schema(errors_table(0, 0, []).schema)
    return datasets.IterableDataset.from_generator(
        _errors, features=features, gen_kwargs={"plan": plan, "chunks": plan.tasks}
    )
