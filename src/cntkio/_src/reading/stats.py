"""Where a source's time goes: per-stage seconds and counts, and how long the consumer waited for the reader.

The reader adds to a :class:`StageClock` as it works: per chunk, per wait for a chunk, and on the first
:data:`STAGE_SAMPLE` reads and one read in :data:`STAGE_SAMPLE` after them (a few ``perf_counter`` calls: well under
1 % of the work); :meth:`cntkio.MinibatchSource.stats` returns a :class:`ReaderStats` snapshot. Counts and the
``index``, ``parse``, ``load`` and ``wait`` seconds are exact; the reading thread's other stages (``randomize``,
``plan``, ``assemble``, ``handoff``) are exact for the first reads and then estimated from a systematic sample of the
reads (their cost hardly varies from read to read; waits, which do, are timed whenever they happen), and so is the
time in the reader. Stages:

* ``index``: building the deserializers' indexes and joining them (once, when the source is built);
* ``parse``: reading and decoding chunks (``get_chunk``), on the parse threads — thread seconds, so with prefetch it
  overlaps the consumer's time;
* ``load``: checking a parsed chunk and handing it to the native store;
* ``randomize``: choosing the next minibatch's sequences (the sweep order, block by block);
* ``plan``: deciding which chunks to keep, load and prefetch;
* ``wait``: the reading thread waiting for chunks that were not parsed yet;
* ``assemble``: the native gather of the minibatch's samples;
* ``handoff``: the rest of ``next_minibatch`` (building the Minibatch and its arrays).

``reader_fraction`` is the share of the time since the first read that the consumer spent inside
``next_minibatch``: near 1 the reader is the bottleneck, near 0 the training step is.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["STAGES", "STAGE_SAMPLE", "ReaderStats", "StageClock"]

STAGES = ("index", "parse", "load", "randomize", "plan", "wait", "assemble", "handoff")
STAGE_SAMPLE = 32  # the reading thread's stages are timed on the first reads, then on one read in this many
_READ_STAGES = ("randomize", "plan", "assemble", "handoff")


class StageClock:
    """Accumulated seconds and counts per stage, and the consumer's time in the reader.

    The reading thread's stages (randomize, plan, assemble, handoff) are added by that thread alone (reads are
    serialised by the source's lock) on the reads it times (``countdown`` reaching 0: :meth:`timed_read`), and
    ``minibatches``/``sequences`` on every read; ``wait`` whenever it waits; the parse threads add ``parse`` and
    ``load`` under a lock, once per chunk.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.seconds = dict.fromkeys(STAGES, 0.0)
        self.counts = dict.fromkeys(STAGES, 0)
        self.wait = 0.0  # the reading thread's seconds waiting for chunks (ensure), read back to split "plan"
        self.waits = 0
        self.sequences = 0
        self.empty_reads = 0  # reads that gave nothing (the end)
        self.timed_reads = 0  # reads before the last countdown started
        self.exact_reads = 0  # the first reads, every one timed
        self.sampled = dict.fromkeys(_READ_STAGES, 0.0)  # then the seconds of one read in STAGE_SAMPLE
        self.samples = 0  # reads sampled after the first ones
        self.padded_cells = self.padded_samples = 0  # of the timed reads' minibatches (padding)
        self.first_read: float | None = None
        self.countdown = self.period = 1  # reads until the next one whose stages are timed (the first one is), of
        # `period` since the last one

    def add(self, stage: str, seconds: float, count: int = 1) -> None:
        """Adds to a stage of the reading thread (or of construction)."""
        self.seconds[stage] += seconds
        self.counts[stage] += count

    def add_chunk(self, parse: float, load: float) -> None:
        """A chunk parsed (``parse`` seconds) and loaded into the store (``load``), from any thread."""
        with self._lock:
            self.seconds["parse"] += parse
            self.seconds["load"] += load
            self.counts["parse"] += 1
            self.counts["load"] += 1

    def timed_read(self, started: float, stage_ends: list[float], ended: float, waited: float) -> None:
        """A sampled ``next_minibatch`` call from ``started`` to ``ended`` (perf_counter): ``stage_ends`` holds when
        the selection (randomize), the chunk plan (of which ``waited`` seconds waiting for chunks) and the gather
        ended."""
        if self.first_read is None:
            self.first_read = started
        selected, planned, assembled = stage_ends
        exact = self.exact_reads < STAGE_SAMPLE
        into = self.seconds if exact else self.sampled
        into["randomize"] += selected - started
        into["plan"] += planned - selected - waited
        into["assemble"] += assembled - planned
        into["handoff"] += ended - assembled
        if exact:
            self.exact_reads += 1
        else:
            self.samples += 1
        self.timed_reads += self.period
        self.countdown = self.period = 1 if self.exact_reads < STAGE_SAMPLE else STAGE_SAMPLE

    def padding(self, lengths: np.ndarray) -> None:
        """A sampled minibatch's sequence lengths: the cells a padded ``[sequences, max_len]`` layout has, and the
        samples in them."""
        if len(lengths):
            self.padded_cells += len(lengths) * int(lengths.max())
            self.padded_samples += int(lengths.sum())

    @property
    def minibatches(self) -> int:
        """Reads that gave a minibatch (every read counts down to the next timed one)."""
        return self.timed_reads + self.period - self.countdown - self.empty_reads

    def snapshot(self) -> ReaderStats:
        with self._lock:
            elapsed = 0.0 if self.first_read is None else time.perf_counter() - self.first_read
            seconds, counts = dict(self.seconds), dict(self.counts)
            minibatches = self.minibatches
            sampled, samples, later_reads = dict(self.sampled), self.samples, minibatches - self.exact_reads
        for stage, value in sampled.items():  # the sampled reads' seconds, scaled to every read after the first ones
            seconds[stage] += value * later_reads / samples if samples else 0.0
        busy = sum(seconds[stage] for stage in _READ_STAGES)
        seconds["wait"] += self.wait
        counts["wait"] += self.waits
        for stage in _READ_STAGES:
            counts[stage] += minibatches
        in_reader = min(busy + self.wait, elapsed)  # (an estimate: never more than the time elapsed)
        padding = 1.0 - self.padded_samples / self.padded_cells if self.padded_cells else 0.0
        return ReaderStats(seconds, counts, minibatches, self.sequences, in_reader, elapsed, padding)


@dataclass(frozen=True)
class ReaderStats:
    """A snapshot of a source's stage times (seconds) and counts.

    Example::

        stats = source.stats()
        print(stats)                       # a small table
        stats.reader_fraction              # 0.97: the training loop waits for the reader
        stats.seconds["parse"], stats.counts["parse"]   # thread seconds parsing, chunks parsed
    """

    seconds: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    minibatches: int = 0
    sequences: int = 0
    in_reader: float = 0.0  # the consumer's seconds inside next_minibatch
    elapsed: float = 0.0  # seconds since the first next_minibatch call
    padding: float = 0.0  # share of a padded [sequences, max_len] layout that is padding (sampled minibatches)
    equal_steps: dict[str, Any] | None = None  # the equal-steps plan of the epoch read (EpochSteps.report), if any
    memory_budget: dict[str, Any] | None = None  # what memory_budget_bytes allowed (BudgetReport's fields), if set

    @property
    def reader_fraction(self) -> float:
        """Share of the time since the first read spent waiting in ``next_minibatch`` (0 before any read)."""
        return min(1.0, self.in_reader / self.elapsed) if self.elapsed > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "seconds": dict(self.seconds), "counts": dict(self.counts), "minibatches": self.minibatches,
            "sequences": self.sequences, "in_reader": self.in_reader,
            "elapsed": self.elapsed, "reader_fraction": self.reader_fraction, "padding": self.padding,
            "equal_steps": self.equal_steps, "memory_budget": self.memory_budget,
        }  # fmt: skip

    def __str__(self) -> str:
        lines = [
            f"{self.minibatches} minibatches, {self.sequences} sequences in "
            f"{self.elapsed:.3f} s; the consumer waited in the reader {self.in_reader:.3f} s "
            f"({100 * self.reader_fraction:.1f} %); padding {100 * self.padding:.1f} % of a padded layout",
            f"{'stage':<10} {'seconds':>10} {'count':>9}",
        ]
        lines += [
            f"{stage:<10} {self.seconds.get(stage, 0.0):>10.4f} {self.counts.get(stage, 0):>9}" for stage in STAGES
        ]
        plan = self.equal_steps
        if plan is not None:
            lines.append(
                f"equal steps ({plan['rule']}), epoch {plan['epoch']}: {plan['steps']} steps on every rank; own "
                f"minibatches {plan['own']}, carried in {plan['carried_in']}, carried out {plan['carried_out']} "
                f"({plan['carried_out_samples']} samples), padded {plan['padded']}"
            )
        budget = self.memory_budget
        if budget is not None:
            lines.append(
                f"memory budget {budget['budget']:,} bytes: window {budget['requested_window']} -> {budget['window']}, "
                f"parse threads {budget['requested_threads']} -> {budget['threads']}, at most {budget['held_chunks']} "
                "chunks held"
            )
        return "\n".join(lines)
