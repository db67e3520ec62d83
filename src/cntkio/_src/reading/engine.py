"""The reading engine: select → plan → load → assemble, over a corpus in a given order.

It owns the cursor (where the partition is in the endless timeline of sweeps), the chunk cache and its planner, the
BPTT slots and the end of the epoch being read; :meth:`ReadingEngine.get_state`/:meth:`~ReadingEngine.set_state` nest
the cursor's and the slots' states. ``MinibatchSource`` is its ``cntk.io`` face: arguments, streams, checkpoints.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from cntkio._src.assemble.gather import Assembler
from cntkio._src.assemble.minibatch import Minibatch
from cntkio._src.common.errors import CNTKIOError, ConfigError
from cntkio._src.corpus.table import SWEEP_VERSIONS, Corpus
from cntkio._src.order import Randomization
from cntkio._src.reading.bptt import BpttSlots, check_in_flight, row_layout
from cntkio._src.reading.budget import BudgetReport
from cntkio._src.reading.chunk_cache import ChunkCache, ChunkLoader
from cntkio._src.reading.cursor import Cursor, Selection
from cntkio._src.reading.planner import ChunkPlanner
from cntkio._src.reading.stats import StageClock
from cntkio._src.reading.steps import share, steps_of_sweeps


class ReadingEngine:
    """Reads one partition's minibatches of ``corpus`` in the order ``randomization`` gives: whole units (sequences,
    or frames in frame mode), or with ``truncation_length`` truncated-BPTT pieces carried over in slots.

    ``threads`` parse threads prefetch chunks (0: parsed on demand); ``epoch_size`` samples make an epoch (``inf``:
    one endless epoch). The engine is not thread-safe: its owner serialises calls."""

    def __init__(
        self,
        corpus: Corpus,
        randomization: Randomization,
        *,
        truncation_length: int,
        epoch_size: float,
        threads: int,
        clock: StageClock,
        budget: BudgetReport | None,
    ):
        self.corpus = corpus
        self.randomization = randomization
        self.truncation_length = truncation_length
        self.epoch_size = epoch_size
        self.clock = clock
        self.epoch = 0
        self.epoch_end = epoch_size
        # The epochs are read one after the other (MinibatchSource.start_epoch): near an epoch's end the planner
        # prefetches the next epoch's first chunks too.
        self.epochs_follow = False
        self.cursor = Cursor(corpus, randomization)
        self.slots = BpttSlots(truncation_length)
        self.cache = ChunkCache(corpus, threads, clock, split=budget is None or budget.split_chunks)
        self.planner = ChunkPlanner(corpus, self.cache, budget)
        self.assembler = Assembler(corpus, self.cache.store, self.cache.ensure)
        self._stage_ends = [0.0, 0.0, 0.0]  # perf_counter when a read's selection, chunk plan and gather ended
        self._marks: list[float] | None = None  # _stage_ends during a read whose stages are timed, else None

    @property
    def position(self) -> int:
        """Global sample position of this partition's cursor."""
        return self.cursor.position

    def use_loader(self, loader: ChunkLoader) -> None:
        """Chunks are produced through ``loader`` from now on (e.g. shared between loader worker processes); the
        loads already asked for finish through the one before (a worker's prefetches at the end of its pass are
        shared ones, not parses of its own)."""
        self.cache.settle()
        self.cache.loader = loader

    # --- reading -------------------------------------------------------------------------------------
    def read(self, minibatch_size: int, partitions: int, index: int, max_sequences: int = 0) -> Minibatch | None:
        """The next minibatch (at most ``max_sequences`` units if > 0), or None at the end of the epoch; the cursor
        moves past it. A read that fails leaves the engine where it was."""
        saved = self._checked_start(minibatch_size, max_sequences)
        try:
            if self.truncation_length:
                return self._read_bptt(minibatch_size, partitions, index)
            return self._read_units(minibatch_size, partitions, index, max_sequences)
        except BaseException:
            self._rewind(saved)
            raise

    def timed_read(self, minibatch_size: int, partitions: int, index: int, max_sequences: int = 0) -> Minibatch | None:
        """:meth:`read` with its stages timed for the stage clock."""
        clock, marks = self.clock, self._stage_ends
        marks[0] = marks[1] = marks[2] = started = time.perf_counter()
        waited = clock.wait
        self._marks = marks
        try:
            result = self.read(minibatch_size, partitions, index, max_sequences)
        finally:
            self._marks = None
        clock.timed_read(started, marks, time.perf_counter(), clock.wait - waited)
        if result:
            clock.padding(next(iter(result.values())).sequence_lengths)
        return result

    def skip(self, minibatch_size: int, partitions: int, index: int) -> bool:
        """Advances exactly as :meth:`read` would, reading no data; False at the end of the epoch."""
        saved = self._checked_start(minibatch_size)
        try:
            if self.truncation_length:
                return self._cut_bptt(minibatch_size, partitions, index) is not None
            return len(self._select(minibatch_size, partitions, index).units) > 0
        except BaseException:
            self._rewind(saved)
            raise

    def select(self, minibatch_size: int, partitions: int, index: int) -> Selection | None:
        """The units the next minibatch holds, advancing as :meth:`skip` does; None at the end. Sequence and frame
        mode only (truncated BPTT cuts units into pieces)."""
        if self.truncation_length:
            raise ConfigError("plan_minibatch needs sequence or frame mode; this source uses truncated BPTT")
        saved = self._checked_start(minibatch_size)
        try:
            selection = self._select(minibatch_size, partitions, index)
        except BaseException:
            self._rewind(saved)
            raise
        return selection if len(selection.units) else None

    def _checked_start(self, minibatch_size: int, max_sequences: int = 0) -> tuple[Any, dict[str, Any] | None]:
        """Checks a read's arguments; the position to :meth:`_rewind` to if the read fails."""
        if minibatch_size <= 0:
            raise ValueError(f"minibatch_size_in_samples must be positive, got {minibatch_size}")
        if max_sequences and self.truncation_length:
            raise ConfigError("minibatch_size_in_sequences cannot be used with truncated BPTT (truncation_length)")
        return self.cursor.mark(), self.slots.get_state() if self.truncation_length else None

    def _rewind(self, saved: tuple[Any, dict[str, Any] | None]) -> None:
        """A read failed: nothing was delivered, so the next starts where it did."""
        mark, slots = saved
        self.cursor.rewind(mark)
        if slots is not None:
            self.slots.set_state(slots)
        self.planner.forget()

    def _select(self, minibatch_size: int, partitions: int, index: int, max_sequences: int = 0) -> Selection:
        """The next units (at most ``max_sequences`` if > 0: a selection of more is taken again with the budget of its
        first ``max_sequences``); the cursor moves past them. Empty at the end of the epoch."""
        budget = max(1, share(minibatch_size, partitions, index))
        held_sweeps = SWEEP_VERSIONS if self.corpus.sweep_dependent else None  # a read spans the sweeps held
        start = self.cursor.mark() if max_sequences else None
        selection = self.cursor.select(budget, partitions, index, self.epoch_end, held_sweeps)
        if start is not None and len(selection.units) > max_sequences:
            self.cursor.rewind(start)
            fitting = int(selection.lengths[:max_sequences].sum())
            selection = self.cursor.select(fitting, partitions, index, self.epoch_end, held_sweeps)
        return selection

    def _read_units(self, minibatch_size: int, partitions: int, index: int, max_sequences: int) -> Minibatch | None:
        """The next minibatch of whole units. A read whose units were all skipped as unusable (images that do not
        decode) reads on, so a minibatch is never empty; an endless source giving a whole sweep of unusable units is
        an error."""
        versioned = self.corpus.sweep_dependent
        skipped, sweep_ended = 0, False
        while True:
            selection = self._select(minibatch_size, partitions, index, max_sequences)
            if self._marks is not None:
                self._stage_end(0)
            if not len(selection.units):
                return None
            if skipped >= self.corpus.num_units and math.isinf(self.epoch_end):  # would read on forever
                raise CNTKIOError(
                    f"{self.corpus.deserializers[0].source_name}: no usable sequence in a whole sweep ({skipped} units "
                    "skipped as invalid; see the errors counted under max_errors)"
                )
            self.planner.load(selection, self.cursor, self._horizon())
            if self._marks is not None:
                self._stage_end(1)
            sweeps = selection.sweeps() if versioned else None
            sweep_ended = sweep_ended or bool(selection.sweep_ends)
            minibatch = self.assembler.minibatch(selection.units, selection.chunks, sweep_ended, sweeps=sweeps)
            if self._marks is not None:
                self._stage_end(2)
            if len(minibatch.provenance.units):
                return minibatch
            skipped += len(selection.units)

    def _cut_bptt(
        self, minibatch_size: int, partitions: int, index: int
    ) -> tuple[bool, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] | None:
        """Truncated BPTT: fills the slots and cuts ``truncation_length`` steps from each, carrying sequences over;
        (whether a sweep ended, the rows' layout), or None at the end."""
        length = self.truncation_length
        total_slots = max(1, minibatch_size // length)
        if partitions > total_slots:
            raise ValueError(
                f"{partitions} partitions need a minibatch of at least {partitions * length} samples with "
                f"truncation_length={length}"
            )
        self.slots.resize(share(total_slots, partitions, index))
        self.cursor.set_partitioning(partitions, index)  # (also when the read takes only pieces carried over)
        self.slots.share(partitions, index)

        def fetch() -> tuple[np.ndarray, np.ndarray, list[int]]:
            selection = self.cursor.select(minibatch_size, partitions, index, self.epoch_end)
            return selection.units, selection.lengths, selection.sweep_ends

        end_of_sweep = self.slots.fill(fetch)
        if self.slots.is_empty():
            return None
        return end_of_sweep, row_layout(self.slots.cut())

    def _read_bptt(self, minibatch_size: int, partitions: int, index: int) -> Minibatch | None:
        cut = self._cut_bptt(minibatch_size, partitions, index)
        if cut is None:
            return None
        end_of_sweep, (units, offsets, counts, rows) = cut
        if self._marks is not None:
            self._stage_end(0)
        chunks = self.corpus.chunk_of_units(units)
        self.planner.load(Selection(units, chunks, counts, []), self.cursor, self._horizon(), extra=self.slots.units())
        if self._marks is not None:
            self._stage_end(1)
        rows_layout = (offsets, counts, rows)
        minibatch = self.assembler.minibatch(units, chunks, end_of_sweep, rows_layout, len(self.slots.slots))
        if self._marks is not None:
            self._stage_end(2)
        return minibatch

    def _horizon(self) -> float:
        """The sample position the planner looks ahead to: the epoch's end, or the next epoch's when epochs follow."""
        return self.epoch_end + self.epoch_size if self.epochs_follow else self.epoch_end

    def _stage_end(self, stage: int) -> None:
        """Marks the end of a read's stage (0 selection, 1 chunk plan, 2 gather) when the read is timed."""
        marks = self._marks
        if marks is not None:
            marks[stage:] = [time.perf_counter()] * (3 - stage)

    # --- position and state --------------------------------------------------------------------------
    def seek(self, position: int) -> None:
        """Moves to global sample ``position`` (rounded up to the next sequence boundary), no sequence in flight."""
        self.cursor.seek(position)
        self.slots.set_state(None)
        self.epoch_end = (self.epoch + 1) * self.epoch_size
        self.planner.forget()

    def start_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        self.seek(int(epoch * self.epoch_size))

    def get_state(self) -> dict[str, Any]:
        """The position as a checkpoint's entries: sample position, epoch, cursor, and the BPTT slots."""
        state: dict[str, Any] = {
            "minibatchSourcePosition": self.position,
            "epoch": self.epoch,
            "cursor": self.cursor.get_state(),
        }
        if self.truncation_length:
            state["bptt_slots"] = self.slots.get_state()
        return state

    def check_state(self, state: dict[str, Any]) -> Cursor:
        """The cursor a checkpoint's entries (already checked for form by ``checkpoint.validate``) describe, checked
        against this corpus and configuration; nothing changes (``ConfigError`` when they do not fit)."""
        bptt = state["bptt_slots"]
        if (bptt is None) == bool(self.truncation_length):
            raise ConfigError(
                "checkpoint: bptt_slots (the sequences in flight) belong in the states of truncated BPTT sources "
                "only, and in each of them"
            )
        if bptt:
            check_in_flight(bptt, self.corpus.lengths)
        position, epoch, size = state["minibatchSourcePosition"], state["epoch"], self.epoch_size
        if math.isfinite(size) and size and not epoch * size <= position <= (epoch + 1) * size:
            raise ConfigError(
                f"checkpoint: minibatchSourcePosition is {position}; epoch {epoch} allows "
                f"[{epoch * size}, {(epoch + 1) * size}] (epoch size {size})"
            )
        cursor = Cursor(self.corpus, self.randomization)
        cursor.set_state(state["cursor"])
        if cursor.position != position:
            raise ConfigError(
                f"checkpoint: minibatchSourcePosition {position} does not match the cursor's sample position "
                f"{cursor.position}"
            )
        return cursor

    def set_state(self, state: dict[str, Any], cursor: Cursor | None = None) -> None:
        """Continues from checked entries (``cursor``: :meth:`check_state`'s, to avoid checking twice)."""
        self.cursor = self.check_state(state) if cursor is None else cursor
        self.slots.set_state(state["bptt_slots"])
        self.epoch = state["epoch"]
        self.epoch_end = (self.epoch + 1) * self.epoch_size
        self.planner.forget()

    def partition_steps(
        self,
        minibatch_size: int,
        partitions: int,
        *,
        epoch: int = 0,
        state: dict[str, Any] | None = None,
        position: int | None = None,
        through_epoch: int | None = None,
    ) -> list[np.ndarray]:
        """Per partition, the samples of each minibatch it reads from the start of epoch ``epoch`` — or from checked
        checkpoint entries ``state``, or sample ``position`` — to the end of epoch ``through_epoch`` (default: the
        epoch it starts in), reading no data; the engine's own position is unchanged. Whole sweeps from an epoch's
        start are computed at once (:func:`steps_of_sweeps`), the rest walked read by read."""
        if state is None and position is None and (through_epoch is None or through_epoch == epoch):
            sizes = steps_of_sweeps(
                self.corpus, self.randomization, minibatch_size, partitions, epoch, self.epoch_size,
                self.truncation_length,
            )  # fmt: skip
            if sizes is not None:
                return sizes
        with self._scratch():
            if position is not None:
                self.seek(position)
            elif state is not None:
                self.set_state(state)
            else:
                self.start_epoch(epoch)
            return self._walk_steps(minibatch_size, partitions, through_epoch)

    @contextmanager
    def _scratch(self) -> Iterator[None]:
        """A cursor and slots of its own for a walk (:meth:`partition_steps`): the engine's are put back after."""
        saved = (self.cursor, self.slots, self.epoch, self.epoch_end, self.planner.planned)
        self.cursor, self.slots = Cursor(self.corpus, self.randomization), BpttSlots(self.truncation_length)
        try:
            yield
        finally:
            self.cursor, self.slots, self.epoch, self.epoch_end, self.planner.planned = saved

    def _walk_steps(self, minibatch_size: int, partitions: int, through_epoch: int | None) -> list[np.ndarray]:
        """:meth:`partition_steps` from the engine's position, read by read (in :meth:`_scratch`)."""
        first_epoch, start, slots = self.epoch, self.cursor.mark(), self.slots.get_state()
        last_epoch = first_epoch if through_epoch is None else int(through_epoch)
        sizes = []
        for index in range(partitions):
            self.cursor.rewind(start)
            self.slots.set_state(slots)
            self.epoch, self.epoch_end = first_epoch, (first_epoch + 1) * self.epoch_size
            mine: list[int] = []
            while True:
                if self.truncation_length:
                    step = minibatch_size // partitions if self.skip(minibatch_size, partitions, index) else 0
                else:
                    selection = self.select(minibatch_size, partitions, index)
                    step = 0 if selection is None else int(selection.lengths.sum())
                if step == 0:
                    if self.epoch >= last_epoch:
                        break
                    self.start_epoch(self.epoch + 1)
                    continue
                mine.append(step)
            sizes.append(np.asarray(mine, dtype=np.int64))
        return sizes

    def close(self) -> None:
        self.cache.close()
