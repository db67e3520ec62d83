"""A memory budget for the parsed data a source holds: the randomization window and the prefetch it can afford.

A source holds its randomization window of parsed chunks and, while a read crosses into the next block, the chunks
that block needs besides: a block's keys span up to 1/8 of the window when blocks are merged (tiny chunks, or
length bucketing), so two blocks need that twice (:func:`held_chunks`); plus the chunks prefetched ahead (one per
parse thread). Every parse thread holds the raw bytes of the chunk it parses (``chunk_size_in_bytes`` of a text
format) while it parses; and a chunk of text parsed on several threads (chunks of 2 MiB or more) holds its runs'
arrays besides the joined ones until they are joined (less than one parsed chunk, whatever the threads: idle threads
are the ones that help); a randomized order keeps the key and id of every unit of the window not yet read
(:data:`ORDER_BYTES_PER_UNIT`, counted with the chunk). Given ``memory_budget_bytes``, :func:`window_within`
estimates what a parsed chunk costs — the first chunk of every deserializer is parsed once to learn its bytes per
sample (values, indices, offsets), scaled to each chunk's samples — and gives the largest window whose chunks, with
that overhead, fit. A budget too small for a window of one chunk with the prefetch asked for degrades first: fewer
parse threads (so fewer chunks ahead), then none (chunks parsed on demand), then a chunk parsed on one thread; only a
budget that cannot hold what one read needs even so is refused. The estimate depends only on the data and the
configuration, so the window (and the order) is the same in every run; it is an estimate, so the budget is met up
to how evenly the data packs (chunks of very different densities may exceed it a little). A read of more sequences
than a block holds (a minibatch far larger than a chunk, without bucketing) also holds the chunks of the blocks it
spans.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace

import numpy as np

from cntkio import _native
from cntkio._src.common.errors import ConfigError
from cntkio._src.common.system import available_cores
from cntkio._src.corpus.table import Corpus
from cntkio._src.order import BLOCK_SPAN, Randomization, merge_step

logger = logging.getLogger("cntkio")

__all__ = ["BudgetReport", "held_chunks", "window_within"]

PARALLEL_PARSE_BYTES = 2 << 20  # smaller chunks of text are parsed on one thread (runs of at least 1 MiB)
ORDER_BYTES_PER_UNIT = 32  # randomized: a window unit's key and id in the order's frontier, twice while it grows


@dataclass(frozen=True)
class BudgetReport:
    """What a memory budget allowed: the window asked for and the one used (in chunks, or samples for a sample
    window), the estimated bytes of a parsed chunk (largest and mean), the chunks held at most, and the parse threads
    (each prefetches a chunk ahead; 0: chunks are parsed on demand) asked for and allowed, and whether a chunk of
    text may be parsed on several threads."""

    budget: int
    requested_window: int
    window: int
    largest_chunk_bytes: int
    mean_chunk_bytes: int
    held_chunks: int  # chunks held at most: window + what a read into the next block opens + prefetch
    requested_threads: int
    threads: int
    split_chunks: bool
    sample_window: bool = False  # the windows count samples

    def __str__(self) -> str:
        unit = "samples" if self.sample_window else "chunks"
        split = "" if self.split_chunks else ", each chunk parsed on one thread"
        return (
            f"memory_budget_bytes={self.budget:,}: randomization window {self.requested_window} -> {self.window} "
            f"{unit}, parse threads (chunks prefetched ahead) {self.requested_threads} -> {self.threads}{split}; at "
            f"most {self.held_chunks} chunks held (a parsed chunk ~{self.mean_chunk_bytes:,} bytes, largest "
            f"{self.largest_chunk_bytes:,})"
        )


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


def held_chunks(corpus: Corpus, randomization: Randomization, window: int, ahead: int) -> int:
    """Chunks a source holds at most with a window of ``window`` chunks and ``ahead`` prefetched: a block needs the
    window's chunks and those whose keys start inside the block (``span``: 1 unless blocks are merged), and a read
    that crosses into the next block holds both blocks' (``window + 2 * span - 1``)."""
    r = randomization
    span = 1
    if r.enabled and not r.compat:
        if r.bucket_samples:  # bucketed blocks hold many minibatches: up to 1/BLOCK_SPAN of the window of keys
            span = max(1, window // BLOCK_SPAN)
        else:  # blocks of tiny chunks are merged (order.merge_step); a sample window has up to 2n - 1 intervals
            chunks = corpus.num_chunks
            intervals = 2 * chunks - 1 if r.sample_window else chunks + window - 1
            span = merge_step(intervals, corpus.num_units, window)
    return min(corpus.num_chunks, window + 2 * span - 1 + ahead)


def window_within(
    budget: int, corpus: Corpus, randomization: Randomization, threads: int
) -> tuple[Randomization, BudgetReport]:
    """The randomization with the largest window (at most the one asked for) whose parsed chunks, plus what a read
    into the next block and the prefetch hold, fit in ``budget`` bytes, with the parse threads that allow it (at most
    ``threads``: fewer when a window of one chunk does not fit with them, see the module); a budget that cannot hold
    what one read needs without prefetch is a :class:`ConfigError`."""
    if budget <= 0:
        raise ConfigError(f"memory_budget_bytes must be positive, got {budget}")
    sizes = chunk_bytes(corpus)
    if randomization.enabled and not randomization.compat:  # the order's keys of the window's units
        sizes = sizes + ORDER_BYTES_PER_UNIT * corpus.units_per_chunk.astype(np.int64)
    _native.release_free_memory()  # what indexing and the estimate freed is not held against the budget
    largest, mean = int(sizes.max()), math.ceil(float(sizes.mean()))
    raw = sum(int(d.chunk_size_in_bytes or 0) for d in corpus.deserializers)
    # the largest chunks first: a window of k chunks holds at most the held_chunks(k) largest
    biggest_first = np.cumsum(np.sort(sizes)[::-1])

    def fits(chunks: int, ahead: int, split: bool) -> bool:
        room = budget - max(ahead, 1) * raw  # the raw chunk text each parser (or the reader) holds
        if split:
            room -= largest  # the runs of a chunk parsed on several threads, until they are joined
        return int(biggest_first[held_chunks(corpus, randomization, chunks, ahead) - 1]) <= room

    def splits(ahead: int) -> bool:  # whether a chunk of text may be parsed on several threads (ChunkCache)
        return raw >= PARALLEL_PARSE_BYTES and (ahead > 1 or (ahead == 0 and available_cores() > 1))

    requested_threads = max(threads, 0)
    # fewer chunks ahead first, then none, then a chunk parsed on one thread: the most that holds a window of one
    choices = [(ahead, splits(ahead)) for ahead in range(requested_threads, -1, -1)] + [(0, False)]
    allowed = next(((ahead, split) for ahead, split in choices if fits(1, ahead, split)), None)
    if allowed is None:
        least = held_chunks(corpus, randomization, 1, 0)
        raise ConfigError(
            f"memory_budget_bytes={budget:,} cannot hold what one read needs, even without prefetch and with a chunk "
            f"parsed on one thread: {least} parsed chunk(s) (a read across two blocks) of up to {largest:,} bytes "
            f"each and {raw:,} bytes of a chunk's text while it is parsed; raise the budget or use smaller chunks "
            "(chunk_size_in_bytes)"
        )
    ahead, split = allowed
    affordable = 1
    if randomization.enabled:
        low, high = 1, max(1, len(sizes))
        while low < high:  # the most chunks that fit
            middle = (low + high + 1) // 2
            low, high = (middle, high) if fits(middle, ahead, split) else (low, middle - 1)
        affordable = low
    requested = randomization.window if randomization.enabled else 1
    chunks = window = min(requested, affordable)
    if affordable == len(sizes):  # every chunk fits: the window asked for holds no more
        window = requested
    elif randomization.enabled and randomization.sample_window:
        samples_per_chunk = max(1.0, float(corpus.chunk_samples.mean()))
        window = min(requested, max(1, int(affordable * samples_per_chunk)))
        chunks = min(affordable, math.ceil(window / samples_per_chunk))
    held = held_chunks(corpus, randomization, chunks, ahead)
    report = BudgetReport(
        budget, requested, window, largest, mean, held, requested_threads, ahead, split, randomization.sample_window
    )
    if window < requested or ahead < requested_threads or split != splits(requested_threads):
        logger.info("%s", report)
    return (replace(randomization, window=window) if randomization.enabled else randomization), report
