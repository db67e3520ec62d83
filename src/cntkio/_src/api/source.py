"""``MinibatchSource``: the public face of the reader (mirrors ``cntk.io.MinibatchSource``)."""

from __future__ import annotations

import dataclasses
import enum
import json
import logging
import math
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from functools import cached_property
from typing import Any

import numpy as np

from cntkio._src.assemble.minibatch import Minibatch, MinibatchData
from cntkio._src.common.deprecation import deprecated
from cntkio._src.common.errors import ConfigError
from cntkio._src.common.sentinels import DEFAULT_RANDOMIZATION_WINDOW_IN_CHUNKS, FULL_DATA_SWEEP, INFINITELY_REPEAT
from cntkio._src.common.streams import Record, StreamInformation
from cntkio._src.common.system import available_cores
from cntkio._src.corpus.data_slice import parse_slice
from cntkio._src.corpus.join import JoinReport, LengthMismatch
from cntkio._src.corpus.table import Corpus
from cntkio._src.formats.error_ledger import ErrorReport, ledgers_of, restored_ledgers
from cntkio._src.formats.error_ledger import report as error_report
from cntkio._src.formats.protocol import Deserializer, DeserializerGroup, ReadsAsDeserializer, flatten_deserializers
from cntkio._src.order import Randomization
from cntkio._src.reading.budget import BudgetReport, window_within
from cntkio._src.reading.checkpoint import PendingCheckpoint, merge_checkpoints, validate
from cntkio._src.reading.cursor import Selection
from cntkio._src.reading.engine import ReadingEngine
from cntkio._src.reading.stats import ReaderStats, StageClock

logger = logging.getLogger("cntkio")


# CNTK 2.0's MinibatchSource keywords: cntkio.io.MinibatchSource translates them; here a TypeError says so.
_CNTK_2_0_KEYWORDS = {
    name: f"a CNTK 2.0 spelling: cntkio.io.MinibatchSource takes it, or use {today}"
    for name, today in (
        ("epoch_size", "max_samples="),
        ("randomization_window", "randomization_window_in_chunks= or randomization_window_in_samples="),
        ("sample_based_randomization_window", "randomization_window_in_samples="),
        ("distributed_after", "next_minibatch(..., num_data_partitions=, partition_index=)"),
    )
}

Readers = Deserializer | ReadsAsDeserializer | Sequence[Deserializer | ReadsAsDeserializer | DeserializerGroup]


class TraceLevel(enum.IntEnum):
    Error = 0
    Warning = 1
    Info = 2


def _is_unbounded(value: Any) -> bool:
    return value is None or value == INFINITELY_REPEAT or (isinstance(value, float) and math.isinf(value))


class MinibatchSource:
    """Reads minibatches from a deserializer, or from several joined by sequence key.

    Same arguments and defaults as ``cntk.io.MinibatchSource``, plus keyword-only extras:
    ``compat`` (CNTK's exact randomization order), ``data_slice`` (read only a deterministic slice of
    the sequences, e.g. ``"[10%:20%]"`` or ``"[:5000]"``), ``prefetch``, ``num_parse_threads`` (default: the cores
    this process may use) and ``memory_budget_bytes`` (the parsed data held — window, prefetch — stays within it:
    the randomization window is shrunk to what fits, then the parse threads and the chunks they prefetch, logged
    and reported in :attr:`memory_budget`; a budget that cannot hold what one read needs is an error). Without a
    budget the window is CNTK's: it holds ``window`` parsed chunks (128 by default: with 32 MB CTF chunks, a few GB).
    Sweeps run on from each other: a minibatch may end one sweep and start the next (``end_of_sweep``).
    CNTK 2.0's spellings (``epoch_size``, ``randomization_window``, ``CTFDeserializer(path).map_input(...)``, ...)
    are accepted by :class:`cntkio.io.MinibatchSource`, the ``cntk.io`` face, which translates them.

    With several deserializers the first (the primary) decides the sequences, chunks and order; each
    other one is looked up by key (numbers meet texts by their decimal text). A primary sequence whose key
    a secondary lacks is dropped; drops, duplicate keys and lengths that differ between deserializers are
    reported once, in a warning and in :attr:`join_report`. ``strict=True`` makes a missing or duplicate
    key an error; ``length_mismatch`` (``"pad"``, ``"truncate"`` or ``"error"``, see
    :class:`~cntkio.LengthMismatch`) decides what a length mismatch does.

    A deserializer whose data varies by sweep (random image augmentation) keeps chunks of two sweeps at most, so
    with one a minibatch holds units of at most two consecutive sweeps (shorter than asked only when it would span
    more, i.e. on a corpus smaller than the minibatch); truncated BPTT is refused with it.

    A source may be shared by threads: reads are serialised by a lock. Close it (or use it as a context
    manager) to stop its parse threads.

    Example::

        with MinibatchSource(CTFDeserializer("train.ctf", streams), max_sweeps=1) as source:
            while mb := source.next_minibatch(1024):
                x = mb["features"].asarray()

        features = CTFDeserializer("features.ctf", StreamDefs(x=StreamDef(field="x", shape=40)))
        labels = CTFDeserializer("labels.ctf", StreamDefs(y=StreamDef(field="y", shape=10, is_sparse=True)))
        source = MinibatchSource([features, labels], strict=True)  # x and y joined by sequence id
    """

    def __init__(
        self,
        deserializers: Readers,
        max_samples: int = INFINITELY_REPEAT,
        max_sweeps: int = INFINITELY_REPEAT,
        randomization_window_in_chunks: int = DEFAULT_RANDOMIZATION_WINDOW_IN_CHUNKS,
        randomization_window_in_samples: int = 0,
        randomization_seed: int = 0,
        trace_level: int | None = None,
        multithreaded_deserializer: bool | None = None,
        frame_mode: bool = False,
        truncation_length: int = 0,
        randomize: bool = True,
        *,
        compat: bool = False,
        data_slice: str | slice | None = None,
        prefetch: bool = True,
        num_parse_threads: int | None = None,
        memory_budget_bytes: int | None = None,
        strict: bool = False,
        length_mismatch: LengthMismatch | str = LengthMismatch.PAD,
        bucket_by_length: int = 0,
        **unknown: Any,
    ):
        self._closed = True  # until construction succeeds
        if unknown:
            name = sorted(unknown)[0]
            raise TypeError(
                f"MinibatchSource() got an unexpected keyword argument {name!r}"
                + (f" ({_CNTK_2_0_KEYWORDS[name]})" if name in _CNTK_2_0_KEYWORDS else "")
            )
        deserializers = flatten_deserializers(deserializers)
        if not deserializers:
            raise ConfigError("at least one deserializer is required")
        if not _is_unbounded(max_samples) and not _is_unbounded(max_sweeps):
            raise ConfigError("max_samples and max_sweeps cannot both be set")
        if randomization_window_in_chunks and randomization_window_in_samples:
            raise ConfigError("randomization_window_in_chunks and randomization_window_in_samples cannot both be set")
        if frame_mode and truncation_length > 0:
            raise ConfigError("frame_mode and truncation_length cannot be used together")
        if truncation_length < 0:
            raise ConfigError(f"truncation_length must be >= 0, got {truncation_length}")
        if multithreaded_deserializer is not None:
            deprecated(
                "MinibatchSource(multithreaded_deserializer=...)",
                "num_parse_threads=N (chunks are always parsed on a thread pool; the keyword is ignored)",
            )
        if trace_level is not None:  # only an explicit level overrides the deserializers' own
            for deserializer in deserializers:
                deserializer.set_trace_level(int(trace_level))
        self._deserializer = deserializers[0]
        self.frame_mode = bool(frame_mode)
        for deserializer in deserializers if self.frame_mode else []:
            if not deserializer.supports_frame_mode:
                raise ConfigError(
                    f"{deserializer.source_name}: this deserializer's data cannot be read in frame mode "
                    "(e.g. phone boundaries mark segment starts); use sequence mode or truncated BPTT"
                )
        self.truncation_length = int(truncation_length)
        sample_window = bool(randomization_window_in_samples)
        window = int(randomization_window_in_samples or randomization_window_in_chunks)
        self.randomization = Randomization(
            enabled=bool(randomize) and window > 0,
            window=window,
            sample_window=sample_window,
            seed=int(randomization_seed),
            compat=bool(compat),
            bucket_samples=int(bucket_by_length),
        )
        if bucket_by_length:
            if bucket_by_length < 0:
                raise ConfigError(f"bucket_by_length must be a number of samples >= 0, got {bucket_by_length}")
            if not self.randomization.enabled or compat or frame_mode or truncation_length:
                raise ConfigError(
                    "bucket_by_length orders the sequences of each randomization block by length: it needs the "
                    "default randomization in sequence mode (not randomize=False, compat, frame_mode or "
                    "truncation_length)"
                )
        self.trace_level = 1 if trace_level is None else int(trace_level)
        self._clock = StageClock()
        started = time.perf_counter()
        self.data_slice = parse_slice(data_slice, self._deserializer.sequence_index().num_sequences)
        self._corpus = Corpus(
            deserializers, self.data_slice, self.frame_mode, strict=bool(strict), length_mismatch=length_mismatch
        )
        indexing = sum(d.index_seconds for d in deserializers)
        self._clock.add("index", time.perf_counter() - started + indexing, len(deserializers))
        self._check_aligned()
        if self._corpus.sweep_dependent and self.truncation_length:
            raise ConfigError(
                "truncated BPTT cannot read deserializers whose data varies by sweep (random augmentation): a "
                "sequence carried over into the next sweep would mix two sweeps' data"
            )
        self._infos = self._corpus.streams
        self.streams = Record({info.name: info for info in self._infos})
        if self._corpus.sweep_size == 0:
            raise ConfigError("the data has no samples")
        self.max_samples, self.max_sweeps = max_samples, max_sweeps
        threads = (num_parse_threads if num_parse_threads is not None else available_cores()) if prefetch else 0
        self.memory_budget: BudgetReport | None = None
        if memory_budget_bytes is not None:
            self.randomization, self.memory_budget = window_within(
                int(memory_budget_bytes), self._corpus, self.randomization, threads
            )
            threads = self.memory_budget.threads  # fewer when the budget cannot hold a chunk ahead per thread
        self.equal_steps: dict[str, Any] | None = None  # the plan of ranks stepping together (cntkio.equal_steps)
        # :meth:`fingerprint` as JSON, made at open: the data as indexed (each file checked unchanged since), so a
        # state describes the data the source reads; with warm index caches it costs a few % of the cached open (their
        # digests are kept in the caches), without them far less than indexing. Each state gets its own copy.
        self._identity = json.dumps(self._make_fingerprint(), sort_keys=True)
        self._engine = ReadingEngine(
            self._corpus,
            self.randomization,
            truncation_length=self.truncation_length,
            epoch_size=self.epoch_size,
            threads=threads,
            clock=self._clock,
            budget=self.memory_budget,
        )
        self._lock = threading.RLock()
        self._closed = False

    def _check_aligned(self) -> None:
        """Frame mode and truncated BPTT read step by step: deserializers whose lengths differ (padded) would
        fail at the first such sequence, mid-sweep; say so now."""
        report = self._corpus.join_report
        if report is None or not (self.frame_mode or self.truncation_length):
            return
        if self._corpus.length_mismatch is not LengthMismatch.PAD:  # truncated or dropped: every stream lines up
            return
        if any(d.length_mismatches for d in report.deserializers):
            raise ConfigError(
                "frame mode and truncated BPTT need the same number of samples in every deserializer of a sequence; "
                f"use length_mismatch='truncate' to cut them to the shortest, or 'drop':\n{report}"
            )

    @property
    def epoch_size(self) -> float:
        """Samples in one epoch: ``max_samples``, or ``max_sweeps`` sweeps (``inf`` when infinite)."""
        size = self._corpus.sweep_size
        if not _is_unbounded(self.max_sweeps):
            return int(self.max_sweeps) * size
        if self.max_samples == FULL_DATA_SWEEP:
            return size
        if _is_unbounded(self.max_samples):
            return math.inf
        if int(self.max_samples) < 0:
            raise ConfigError(f"max_samples must be >= 0, got {self.max_samples}")
        return int(self.max_samples)

    def start_epoch(self, epoch: int) -> None:
        """Moves to the start of epoch ``epoch`` of the endless timeline (BrainScript's epochs): it covers
        samples ``[epoch * epoch_size, (epoch + 1) * epoch_size)``, so later epochs read later, reshuffled
        sweeps. Epoch 0 is where a new source starts. A source moved on with it (to a later epoch, or to its first)
        reads its epochs in turn: near the end of one it prefetches the first chunks of the next."""
        if self.is_infinite():
            raise ValueError("an infinite source has no epochs; set max_samples or max_sweeps")
        if int(epoch) < 0:
            raise ValueError(f"epoch must be >= 0, got {epoch}")
        with self._lock:
            engine = self._engine
            # (re-reading the epoch read last, a validation set's start_epoch(0) each time, is not moving on)
            moves_on = int(epoch) > engine.epoch or engine.position == 0
            engine.start_epoch(int(epoch))
            engine.epochs_follow = moves_on

    @property
    def current_epoch(self) -> int:
        """The epoch being read (:meth:`start_epoch`; 0 for a new source)."""
        return self._engine.epoch

    # --- streams ---------------------------------------------------------------------------------
    def stream_infos(self) -> list[StreamInformation]:
        return list(self._infos)

    def stream_info(self, name: str) -> StreamInformation:
        matches = [info for info in self._infos if info.name == name]
        if len(matches) != 1:
            raise KeyError(f"expected exactly one stream named {name!r}, found {len(matches)}")
        return matches[0]

    def __getitem__(self, name: str) -> StreamInformation:
        return self.stream_info(name)

    def is_infinite(self) -> bool:
        return _is_unbounded(self.max_samples) and _is_unbounded(self.max_sweeps)

    @property
    def sweep_size(self) -> int:
        """Samples in one sweep (index lengths; frames in frame mode)."""
        return self._corpus.sweep_size

    @property
    def position(self) -> int:
        """Global sample position of this partition's cursor."""
        return self._engine.position

    @property
    def cached_chunks(self) -> int:
        """Number of chunks held in memory (loaded or being loaded)."""
        return len(self._engine.cache)

    @property
    def engine(self) -> ReadingEngine:
        """The reading engine behind this face (for integrations and tools: its corpus, a chunk loader)."""
        return self._engine

    @property
    def deserializers(self) -> tuple[Deserializer, ...]:
        """The deserializers the source reads, the primary first (groups flattened)."""
        return tuple(self._corpus.deserializers)

    @property
    def join_report(self) -> JoinReport | None:
        """What joining several deserializers by key found: per deserializer the primary keys it lacks
        (those sequences are dropped), its duplicate keys and the sequences whose lengths differ, with
        the first few keys (``str()`` describes it). None for a single deserializer."""
        return self._corpus.join_report

    def stats(self) -> ReaderStats:
        """Where the time went so far: seconds and counts per stage (index, parse, load, randomize, plan, wait,
        assemble, handoff) and the share of time the consumer spent waiting in ``next_minibatch``
        (:class:`~cntkio._src.reading.stats.ReaderStats`; ``print(source.stats())`` shows a table), and the equal-steps
        plan of
        the epoch being read when ranks step together (:mod:`cntkio.equal_steps`), and what ``memory_budget_bytes``
        allowed (window, parse threads: :class:`~cntkio._src.reading.budget.BudgetReport`)."""
        budget = None if self.memory_budget is None else dataclasses.asdict(self.memory_budget)
        return dataclasses.replace(self._clock.snapshot(), equal_steps=self.equal_steps, memory_budget=budget)

    @property
    def invalid_sequences_skipped(self) -> int:
        """Units (frames or BPTT pieces) skipped because a counted error left their sequence short."""
        return self._engine.assembler.invalid_units

    # --- reading ---------------------------------------------------------------------------------
    def next_minibatch(
        self,
        minibatch_size_in_samples: int,
        input_map: Mapping[Any, Any] | None = None,
        device: Any = None,
        num_data_partitions: int | None = None,
        partition_index: int | None = None,
    ) -> Minibatch | dict[Any, MinibatchData]:
        """The next minibatch, or ``{}`` once ``max_samples``/``max_sweeps`` is reached.

        With ``num_data_partitions=k``, partition ``i`` gets its share of every sweep: across the k
        partitions each sequence is delivered exactly once. Each partition reads about
        ``minibatch_size_in_samples / k`` samples per call. ``input_map`` (``{key: stream or stream name}``) keys
        the result by the caller's keys (CNTK's variables); ``device`` is accepted and ignored (host arrays).
        """
        del device  # arrays are returned on the host
        if isinstance(input_map, (int, np.integer)):
            raise TypeError(
                "next_minibatch(samples, sequences) is CNTK 2.0 beta's form: cntkio.io.MinibatchSource takes it; "
                "here the second argument is input_map"
            )
        return self._next_minibatch(minibatch_size_in_samples, input_map, num_data_partitions, partition_index)

    def _next_minibatch(
        self,
        minibatch_size_in_samples: int,
        input_map: Mapping[Any, Any] | None,
        num_data_partitions: int | None,
        partition_index: int | None,
        max_sequences: int = 0,
    ) -> Minibatch | dict[Any, MinibatchData]:
        """:meth:`next_minibatch`, with at most ``max_sequences`` units if > 0."""
        if num_data_partitions is None and partition_index is None:
            partitions, index = 1, 0
        else:
            partitions, index = self._check_partition(num_data_partitions, partition_index)
        with self._lock:
            self._check_open()
            clock, engine = self._clock, self._engine
            clock.countdown -= 1
            if clock.countdown:
                result = engine.read(minibatch_size_in_samples, partitions, index, max_sequences)
            else:
                result = engine.timed_read(minibatch_size_in_samples, partitions, index, max_sequences)
            if result is None:
                clock.empty_reads += 1
                return {}
            clock.sequences += len(result.provenance.units)
            if self.trace_level >= 2 and any(d.end_of_sweep for d in result.values()):
                logger.info("%s: sweep ended; where the time went:\n%s", self._deserializer.source_name, self.stats())
        if input_map is None:
            return result
        mapped = Minibatch(
            {key: result[stream if isinstance(stream, str) else stream.name] for key, stream in input_map.items()}
        )
        mapped.provenance = result.provenance
        return mapped

    @cached_property
    def _longest_unit(self) -> int:
        """Samples of the longest unit (sequence, or frame in frame mode): a sample budget that holds any n units
        is n times this."""
        return 1 if self.frame_mode else int(np.max(self._corpus.lengths))

    def skip_minibatch(
        self, minibatch_size_in_samples: int, num_data_partitions: int | None = None, partition_index: int | None = None
    ) -> bool:
        """Advances exactly as :meth:`next_minibatch` would, without reading any data.

        Returns False at the end. Used to hand out minibatches round-robin to loader workers.
        """
        partitions, index = self._check_partition(num_data_partitions, partition_index)
        with self._lock:
            self._check_open()
            return self._engine.skip(minibatch_size_in_samples, partitions, index)

    def plan_minibatch(
        self, minibatch_size_in_samples: int, num_data_partitions: int | None = None, partition_index: int | None = None
    ) -> Selection | None:
        """The units the next minibatch holds (table chunks and index lengths too), advancing exactly as
        :meth:`skip_minibatch` does, without reading any data (``cntkio explain``); None at the end. Sequence and
        frame mode only (truncated BPTT cuts units into pieces)."""
        partitions, index = self._check_partition(num_data_partitions, partition_index)
        with self._lock:
            self._check_open()
            return self._engine.select(minibatch_size_in_samples, partitions, index)

    def partition_minibatches(
        self,
        minibatch_size_in_samples: int,
        num_data_partitions: int,
        *,
        epoch: int = 0,
        state: Mapping[str, Any] | None = None,
        through_epoch: int | None = None,
    ) -> list[np.ndarray]:
        """Per partition, the samples of each minibatch it reads (:mod:`cntkio.equal_steps`), from the start of epoch
        ``epoch`` — or from checkpoint ``state``, a state every partition restores (as after ``merge_checkpoints``) —
        to the end of epoch ``through_epoch`` (default: the epoch it starts in), moving to the next epoch where one
        ends as :meth:`start_epoch` does. Walked from the index alone (what :meth:`skip_minibatch` does: no data is
        read); the source's own position is unchanged. Finite sources only. Truncated BPTT minibatches count their
        sample budget."""
        if self.is_infinite():
            raise ValueError("an infinite source has no epochs to count minibatches in; set max_samples or max_sweeps")
        partitions, _ = self._check_partition(num_data_partitions, 0)
        position = checked = None
        if state is not None and set(state) == {"minibatchSourcePosition"}:
            position = self._position_of(state)
        elif state is not None:
            checked = self._checked_state(state)
        with self._lock:
            self._check_open()
            return self._engine.partition_steps(
                minibatch_size_in_samples, partitions, epoch=int(epoch), state=checked, position=position,
                through_epoch=through_epoch,
            )  # fmt: skip

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError("the MinibatchSource is closed")

    @staticmethod
    def _check_partition(num_data_partitions: int | None, partition_index: int | None) -> tuple[int, int]:
        partitions = 1 if num_data_partitions is None else int(num_data_partitions)
        index = 0 if partition_index is None else int(partition_index)
        if partitions < 1 or not 0 <= index < partitions:
            raise ValueError(f"invalid partition {partition_index} of {num_data_partitions}")
        return partitions, index

    # --- checkpoints -----------------------------------------------------------------------------
    def _make_fingerprint(self) -> dict[str, Any]:
        order = {**self.randomization.identity(), "frame_mode": self.frame_mode}
        if self.truncation_length:
            order["truncation_length"] = self.truncation_length
        return {**self._corpus.identity(), "order": order}

    def fingerprint(self) -> dict[str, Any]:
        """Identifies the data by content (a copy elsewhere, renamed, restores) and the configuration that decides
        the order: what a checkpoint is checked against (one refused names what differs)."""
        return dict(json.loads(self._identity))

    def get_checkpoint_state(self) -> dict[str, Any]:
        """A small, versioned, JSON-serialisable dict; :meth:`restore_from_checkpoint` continues from it
        exactly (also in a new process, and with another partition count after :meth:`merge_checkpoints`)."""
        return self.pending_checkpoint().state()

    def pending_checkpoint(self) -> PendingCheckpoint:
        """The position now, as :meth:`get_checkpoint_state` would give it, its dict built when first asked for
        (``PendingCheckpoint.state()``): microseconds to take, for a checkpoint after every minibatch."""
        with self._lock:
            entries = self._engine.get_state()
            ledgers = ledgers_of(self._corpus.deserializers)
            if any(ledger.count for ledger, _ in ledgers):  # (without errors, a restore empties the ledgers)
                entries["errors"] = [ledger.get_state() for ledger, _ in ledgers]
            return PendingCheckpoint(entries, self._identity)

    def _checked_state(self, state: Mapping[str, Any]) -> dict[str, Any]:
        """A checkpoint's entries, checked for form, data and configuration (``ConfigError`` names what differs)."""
        return validate(state, json.loads(self._identity))

    @staticmethod
    def _position_of(state: Mapping[str, Any]) -> int:
        """CNTK's state ``{'minibatchSourcePosition': n}``: n."""
        position = state["minibatchSourcePosition"]
        if isinstance(position, bool) or not isinstance(position, (int, np.integer)) or position < 0:
            raise ConfigError(f"checkpoint: minibatchSourcePosition must be an integer >= 0, got {position!r}")
        return int(position)

    def restore_from_checkpoint(self, state: Mapping[str, Any]) -> None:
        """Continues from a state of :meth:`get_checkpoint_state` (or CNTK's ``{'minibatchSourcePosition': n}``,
        rounded up to the next sequence boundary). A malformed state, or one taken on other data or with
        another configuration, raises ``ValueError``."""
        with self._lock:
            if isinstance(state, Mapping) and set(state) == {"minibatchSourcePosition"}:
                self._engine.seek(self._position_of(state))
                return
            checked = self._checked_state(state)
            cursor = self._engine.check_state(checked)  # the source changes only once every check passed
            ledgers = restored_ledgers(ledgers_of(self._corpus.deserializers), checked["errors"])
            for (ledger, deserializer), ledger_state in ledgers:
                ledger.check_restorable(ledger_state, deserializer.num_chunks())
            for (ledger, deserializer), ledger_state in ledgers:
                ledger.set_state(ledger_state, deserializer.num_chunks())
            self._engine.set_state(checked, cursor)

    def error_report(self, limit: int = 20, arrays: bool = False) -> ErrorReport:
        """The bad records counted under ``max_errors`` (:class:`~cntkio._src.formats.error_ledger.ErrorReport`):
        counts by kind
        and by file, the first ``limit`` located errors (messages built now), and with ``arrays=True`` every error
        held as columns. It survives a checkpoint and restore (counts, and the first errors located)."""
        return error_report([ledger for ledger, _ in ledgers_of(self._corpus.deserializers)], limit, arrays)

    merge_checkpoints = staticmethod(merge_checkpoints)

    @property
    def current_position(self) -> dict[str, Any]:
        return self.get_checkpoint_state()

    @current_position.setter
    def current_position(self, state: Mapping[str, Any]) -> None:
        self.restore_from_checkpoint(state)

    def iter_minibatches(self, minibatch_size_in_samples: int, **kwargs: Any) -> Iterator[dict[Any, MinibatchData]]:
        """Yields minibatches until the source is exhausted (forever if it is infinite)."""
        while True:
            minibatch = self.next_minibatch(minibatch_size_in_samples, **kwargs)
            if not minibatch:
                return
            yield minibatch

    def close(self) -> None:
        """Stops background parsing; reading afterwards raises ``ValueError``. Closing twice is harmless."""
        if getattr(self, "_closed", True):
            return
        self._closed = True
        self._engine.close()

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return self._closed

    def __enter__(self) -> MinibatchSource:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
