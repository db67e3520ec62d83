"""Where a source's time goes: per-stage seconds and counts, and how long the consumer waited for the reader.

The reader adds to a :class:`StageClock` as it works (a few ``perf_counter`` calls per minibatch and per chunk, well
under 1 % of the work); :meth:`cntkio.MinibatchSource.stats` returns a :class:`ReaderStats` snapshot. Stages:

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

__all__ = ["STAGES", "ReaderStats", "StageClock"]

STAGES = ("index", "parse", "load", "randomize", "plan", "wait", "assemble", "handoff")


class StageClock:
    """Accumulated seconds and counts per stage, and the consumer's time in the reader.

    The reading thread's stages (randomize, plan, wait, assemble, handoff) are added by that thread alone (reads are
    serialised by the source's lock) and cost a few ``perf_counter`` calls and one :meth:`read` per minibatch; the
    parse threads add ``parse`` and ``load`` under a lock, once per chunk.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.seconds = dict.fromkeys(STAGES, 0.0)
        self.counts = dict.fromkeys(STAGES, 0)
        self.wait = 0.0  # the reading thread's seconds waiting for chunks (ensure), read back to split "plan"
        self.waits = 0
        self.minibatches = self.sequences = 0
        self.in_reader = 0.0
        self.first_read: float | None = None

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

    def read(self, started: float, selected: float, planned: float, waited: float, assembled: float, ended: float,
             sequences: int) -> None:  # fmt: skip
        """One ``next_minibatch`` call, by its time stamps (perf_counter): selected (randomize), planned (the chunk
        plan, of which ``waited`` seconds waiting for chunks), assembled (the gather), ended; ``sequences`` 0 when
        the read gave nothing."""
        seconds = self.seconds
        seconds["randomize"] += selected - started
        seconds["plan"] += planned - selected - waited
        seconds["assemble"] += assembled - planned
        seconds["handoff"] += ended - assembled
        self.in_reader += ended - started
        if self.first_read is None:
            self.first_read = started
        if sequences:
            self.minibatches += 1
            self.sequences += sequences

    def snapshot(self) -> ReaderStats:
        with self._lock:
            elapsed = 0.0 if self.first_read is None else time.perf_counter() - self.first_read
            seconds, counts = dict(self.seconds), dict(self.counts)
        seconds["wait"] += self.wait
        counts["wait"] += self.waits
        for stage in ("randomize", "plan", "assemble", "handoff"):
            counts[stage] += self.minibatches
        return ReaderStats(seconds, counts, self.minibatches, self.sequences, self.in_reader, elapsed)


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

    @property
    def reader_fraction(self) -> float:
        """Share of the time since the first read spent waiting in ``next_minibatch`` (0 before any read)."""
        return min(1.0, self.in_reader / self.elapsed) if self.elapsed > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "seconds": dict(self.seconds), "counts": dict(self.counts), "minibatches": self.minibatches,
            "sequences": self.sequences, "in_reader": self.in_reader,
            "elapsed": self.elapsed, "reader_fraction": self.reader_fraction,
        }  # fmt: skip

    def __str__(self) -> str:
        lines = [
            f"{self.minibatches} minibatches, {self.sequences} sequences in "
            f"{self.elapsed:.3f} s; the consumer waited in the reader {self.in_reader:.3f} s "
            f"({100 * self.reader_fraction:.1f} %)",
            f"{'stage':<10} {'seconds':>10} {'count':>9}",
        ]
        lines += [
            f"{stage:<10} {self.seconds.get(stage, 0.0):>10.4f} {self.counts.get(stage, 0):>9}" for stage in STAGES
        ]
        return "\n".join(lines)
