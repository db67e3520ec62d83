"""A memory budget for the parsed data a source holds: the randomization window it can afford.

A source holds its randomization window of parsed chunks, plus the chunks prefetched ahead (one per parse thread),
one more while a read spans two blocks and, for corpora of tiny chunks, those a merged block opens early (at most
1/16 of the window); every parse thread holds the raw bytes of the chunk it parses (``chunk_size_in_bytes`` of
a text format) while it parses; and a chunk of text parsed on several threads (chunks of 2 MiB or more) holds its
runs' arrays besides the joined ones until they are joined (less than one parsed chunk, whatever the threads: idle
threads are the ones that help); a randomized order keeps the key and id of every unit of the window not yet read
(:data:`ORDER_BYTES_PER_UNIT`, counted with the chunk). Given
``memory_budget_bytes``, :func:`window_within` estimates what a parsed chunk costs — the first chunk of every
deserializer is parsed once to learn its bytes per sample (values, indices, offsets), scaled to each chunk's samples
— and gives the largest window whose chunks, with that overhead, fit. The estimate depends only on the data and the
configuration, so the window (and the order) is the same in every run; it is an estimate, so the budget is met up to
how evenly the data packs (chunks of very different densities may exceed it a little).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace

import numpy as np

from . import _native
from .corpus import Corpus
from .errors import ConfigError
from .order import Randomization

logger = logging.getLogger("cntkio")

__all__ = ["BudgetReport", "window_within"]

PARALLEL_PARSE_BYTES = 2 << 20  # smaller chunks of text are parsed on one thread (runs of at least 1 MiB)
ORDER_BYTES_PER_UNIT = 32  # randomized: a window unit's key and id in the order's frontier, twice while it grows


@dataclass(frozen=True)
class BudgetReport:
    """What a memory budget allowed: the window asked for and the one used (in chunks, or samples for a sample
    window), and the estimated bytes of a parsed chunk (largest and mean)."""

    budget: int
    requested_window: int
    window: int
    largest_chunk_bytes: int
    mean_chunk_bytes: int
    held_chunks: int  # chunks held at most: window (in chunks) + merged block + a read across blocks + prefetch


def chunk_bytes(corpus: Corpus) -> np.ndarray:
    """Estimated bytes of every table chunk once parsed (all deserializers), from their first chunks."""
    per_sample = 0.0
    for deserializer in corpus.deserializers:
        parsed = deserializer.get_chunk_of_sweep(0, 0)
        nbytes = samples = 0
        for data in parsed.values():
            arrays = [getattr(data, name, None) for name in ("values", "indices", "indptr", "seq_offsets")]
            nbytes += sum(int(a.nbytes) for a in arrays if isinstance(a, np.ndarray))
            offsets = np.asarray(data.seq_offsets)
            samples = max(samples, int(offsets[-1]) if len(offsets) else 0)
        per_sample += nbytes / max(samples, 1)
    return np.ceil(corpus.chunk_samples.astype(np.float64) * per_sample).astype(np.int64)


def window_within(
    budget: int, corpus: Corpus, randomization: Randomization, threads: int
) -> tuple[Randomization, BudgetReport]:
    """The randomization with the largest window (at most the one asked for) whose parsed chunks, plus the merged
    block's and the prefetch's, fit in ``budget`` bytes; a budget that cannot hold one chunk and the prefetch is a
    :class:`ConfigError`."""
    if budget <= 0:
        raise ConfigError(f"memory_budget_bytes must be positive, got {budget}")
    sizes = chunk_bytes(corpus)
    if randomization.enabled and not randomization.compat:  # the order's keys of the window's units
        sizes = sizes + ORDER_BYTES_PER_UNIT * corpus.units_per_chunk.astype(np.int64)
    _native.release_free_memory()  # what indexing and the estimate freed is not held against the budget
    largest, mean = int(sizes.max()), math.ceil(float(sizes.mean()))
    ahead = max(threads, 0)
    raw = sum(int(getattr(d, "chunk_size_in_bytes", 0) or 0) for d in corpus.deserializers)
    budget_for_chunks = budget - max(ahead, 1) * raw  # the raw chunk text each parser (or the reader) holds
    if ahead > 1 and raw >= PARALLEL_PARSE_BYTES:
        budget_for_chunks -= largest  # the runs of a chunk parsed on several threads, until they are joined
    # the largest chunks first: a window of k chunks holds at most the k + k/16 + 1 + ahead largest
    biggest_first = np.cumsum(np.sort(sizes)[::-1])

    def held(chunks: int) -> int:
        return min(len(sizes), chunks + chunks // 16 + 1 + ahead)

    def fits(chunks: int) -> bool:
        return int(biggest_first[held(chunks) - 1]) <= budget_for_chunks

    if not fits(1):
        raise ConfigError(
            f"memory_budget_bytes={budget:,} cannot hold one parsed chunk and the prefetch: the largest chunk takes "
            f"about {largest:,} bytes parsed ({raw:,} bytes of text while parsed), and {ahead} more are prefetched "
            "(num_parse_threads); raise the budget, use smaller chunks (chunk_size_in_bytes) or fewer parse threads"
        )
    if not randomization.enabled:
        return randomization, BudgetReport(budget, 1, 1, largest, mean, held(1))
    low, high = 1, max(1, len(sizes))
    while low < high:  # the most chunks that fit
        middle = (low + high + 1) // 2
        low, high = (middle, high) if fits(middle) else (low, middle - 1)
    affordable = low
    requested = randomization.window
    if randomization.sample_window:
        samples_per_chunk = max(1.0, float(corpus.chunk_samples.mean()))
        window = min(requested, max(1, int(affordable * samples_per_chunk)))
    else:
        window = min(requested, affordable)
    report = BudgetReport(
        budget, requested, window, largest, mean, held(affordable if window == affordable else window)
    )
    if window < requested:
        logger.info(
            "memory_budget_bytes=%s: randomization window %d -> %d %s (a parsed chunk ~%s bytes, largest %s)",
            f"{budget:,}", requested, window, "samples" if randomization.sample_window else "chunks",
            f"{mean:,}", f"{largest:,}",
        )  # fmt: skip
    return replace(randomization, window=window), report
