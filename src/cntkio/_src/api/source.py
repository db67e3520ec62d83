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

from cntkio import _native
from cntkio._src.assemble.gather import Assembler
from cntkio._src.assemble.minibatch import Minibatch, MinibatchData
from cntkio._src.common.errors import CNTKIOError, ConfigError
from cntkio._src.common.sentinels import DEFAULT_RANDOMIZATION_WINDOW_IN_CHUNKS, FULL_DATA_SWEEP, INFINITELY_REPEAT
from cntkio._src.common.streams import Record, StreamInformation
from cntkio._src.common.system import available_cores
from cntkio._src.compat.legacy import build_deferred, deprecated, sequence_limit, source_keywords
from cntkio._src.corpus.data_slice import parse_slice
from cntkio._src.corpus.join import JoinReport, LengthMismatch
from cntkio._src.corpus.table import SWEEP_VERSIONS, Corpus
from cntkio._src.formats.error_ledger import ErrorReport, ledgers_of, restored_ledgers
from cntkio._src.formats.error_ledger import report as error_report
from cntkio._src.formats.protocol import Deserializer, DeserializerGroup, flatten_deserializers
from cntkio._src.integrations.shared_chunks import ChunkExchange
from cntkio._src.order.algorithms import Randomization
from cntkio._src.reading.bptt import BpttSlots, check_in_flight, row_layout
from cntkio._src.reading.budget import BudgetReport, window_within
from cntkio._src.reading.checkpoint import CHECKPOINT_VERSION, merge_checkpoints, seal, validate
from cntkio._src.reading.chunk_cache import ChunkCache
from cntkio._src.reading.cursor import Cursor, Selection
from cntkio._src.reading.stats import ReaderStats, StageClock

logger = logging.getLogger("cntkio")


class TraceLevel(enum.IntEnum):
    Error = 0
    Warning = 1
    Info = 2


def _share(total: int, partitions: int, index: int) -> int:
    """Partition ``index``'s part of ``total`` (a minibatch's samples, BPTT slots) split over ``partitions``: the
    remainder goes one each to the first partitions."""
    return total // partitions + (index < total % partitions)


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
    CNTK 2.0's keywords are accepted with a ``DeprecationWarning`` (:mod:`cntkio.legacy`): ``epoch_size``
    (= ``max_samples``; 0 = one sweep), ``randomization_window`` (chunks, or samples with
    ``sample_based_randomization_window=True``) and ``distributed_after`` (ignored: partitions are chosen per call).
    Deserializers whose streams are mapped after construction (``CTFDeserializer(path).map_input(...)``) are built
    here; their streams are final from then on.

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
        deserializers: Deserializer | Sequence[Deserializer | DeserializerGroup],
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
        **cntk_2_0: Any,
    ):
        self._closed = True  # until construction succeeds
        if cntk_2_0:  # epoch_size, distributed_after, randomization_window (deprecated; legacy.source_keywords)
            max_samples, randomization_window_in_chunks, randomization_window_in_samples = source_keywords(
                cntk_2_0, max_samples, randomization_window_in_chunks, randomization_window_in_samples
            )
        deserializers = flatten_deserializers(build_deferred(deserializers))
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
                if hasattr(deserializer, "trace_level"):
                    deserializer.trace_level = int(trace_level)
                    if hasattr(deserializer, "errors"):
                        deserializer.errors.trace_level = int(trace_level)
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
        indexing = sum(float(getattr(d, "index_seconds", 0.0)) for d in deserializers)
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
        self._trimmed_at = 0  # chunks the cache had dropped when free heap pages were last given back
        if memory_budget_bytes is not None:
            self.randomization, self.memory_budget = window_within(
                int(memory_budget_bytes), self._corpus, self.randomization, threads
            )
            threads = self.memory_budget.threads  # fewer when the budget cannot hold a chunk ahead per thread
        self._epoch = 0
        self.equal_steps: dict[str, Any] | None = None  # the plan of ranks stepping together (cntkio.equal_steps)
        self._epoch_end = self._compute_epoch_end()
        self._cursor = Cursor(self._corpus, self.randomization)
        # :meth:`_fingerprint` as JSON, made at open: the data as indexed (each file checked unchanged since), so a
        # state describes the data the source reads; with warm index caches it costs a few % of the cached open (their
        # digests are kept in the caches), without them far less than indexing. Each state gets its own copy.
        self._identity = json.dumps(self._fingerprint(), sort_keys=True)
        self._cache = ChunkCache(
            self._corpus, threads, self._clock, split=self.memory_budget is None or self.memory_budget.split_chunks
        )
        self._assembler = Assembler(self._corpus, self._cache)
        self._slots = BpttSlots(self.truncation_length)
        self._planned: tuple[Any, ...] | None = None  # the block whose chunks are loaded
        self._stage_ends = [0.0, 0.0, 0.0]  # perf_counter when a read's selection, chunk plan and gather ended
        self._marks: list[float] | None = None  # _stage_ends during a read whose stages are timed, else None
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

    def _compute_epoch_end(self) -> float:
        return (self._epoch + 1) * self.epoch_size

    def start_epoch(self, epoch: int) -> None:
        """Moves to the start of epoch ``epoch`` of the endless timeline (BrainScript's epochs): it covers
        samples ``[epoch * epoch_size, (epoch + 1) * epoch_size)``, so later epochs read later, reshuffled
        sweeps. Epoch 0 is where a new source starts."""
        if self.is_infinite():
            raise ValueError("an infinite source has no epochs; set max_samples or max_sweeps")
        if int(epoch) < 0:
            raise ValueError(f"epoch must be >= 0, got {epoch}")
        with self._lock:
            self._epoch = int(epoch)
            self._restore_position(int(self._epoch * self.epoch_size))

    @property
    def current_epoch(self) -> int:
        """The epoch being read (:meth:`start_epoch`; 0 for a new source)."""
        return self._epoch

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
        return self._cursor.position

    @property
    def cached_chunks(self) -> int:
        """Number of chunks held in memory (loaded or being loaded)."""
        return len(self._cache)

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
        (:class:`~cntkio.stats.ReaderStats`; ``print(source.stats())`` shows a table), and the equal-steps plan of
        the epoch being read when ranks step together (:mod:`cntkio.equal_steps`), and what ``memory_budget_bytes``
        allowed (window, parse threads: :class:`~cntkio.budget.BudgetReport`)."""
        budget = None if self.memory_budget is None else dataclasses.asdict(self.memory_budget)
        return dataclasses.replace(self._clock.snapshot(), equal_steps=self.equal_steps, memory_budget=budget)

    @property
    def invalid_sequences_skipped(self) -> int:
        """Units (frames or BPTT pieces) skipped because a counted error left their sequence short."""
        return self._assembler.invalid_units

    # --- reading ---------------------------------------------------------------------------------
    def next_minibatch(
        self,
        minibatch_size_in_samples: int | None = None,
        input_map: Mapping[Any, Any] | None = None,
        device: Any = None,
        num_data_partitions: int | None = None,
        partition_index: int | None = None,
        *,
        minibatch_size_in_sequences: int | None = None,
    ) -> Minibatch | dict[Any, MinibatchData]:
        """The next minibatch, or ``{}`` once ``max_samples``/``max_sweeps`` is reached.

        With ``num_data_partitions=k``, partition ``i`` gets its share of every sweep: across the k
        partitions each sequence is delivered exactly once. Each partition reads about
        ``minibatch_size_in_samples / k`` samples per call. ``input_map`` (``{key: stream or stream name}``) keys
        the result by the caller's keys (CNTK's variables); ``device`` is accepted and ignored (host arrays).
        CNTK 2.0 beta's ``minibatch_size_in_sequences`` (deprecated; also its second positional place) caps the
        sequences of the minibatch, with or without a sample budget.
        """
        del device  # arrays are returned on the host
        max_sequences = 0
        if isinstance(input_map, (int, np.integer)):  # CNTK 2.0 beta: next_minibatch(samples, sequences)
            minibatch_size_in_sequences, input_map = int(input_map), None
        if minibatch_size_in_sequences is not None or minibatch_size_in_samples is None:
            samples, max_sequences = sequence_limit(minibatch_size_in_samples, minibatch_size_in_sequences)
            minibatch_size_in_samples = samples or max_sequences * self._longest_unit * max(1, num_data_partitions or 1)
        partitions, index = self._check_partition(num_data_partitions, partition_index)
        with self._lock:
            self._check_open()
            clock = self._clock
            clock.countdown -= 1
            if clock.countdown:
                result = self._read(minibatch_size_in_samples, partitions, index, True, max_sequences)
            else:
                result = self._timed_read(minibatch_size_in_samples, partitions, index, max_sequences)
            if isinstance(result, Minibatch):
                clock.sequences += len(result.provenance.units)
            else:
                clock.empty_reads += 1
            if not isinstance(result, Minibatch):
                return {}
            if self.trace_level >= 2 and any(d.end_of_sweep for d in result.values()):
                logger.info("%s: sweep ended; where the time went:\n%s", self._deserializer.source_name, self.stats())
        if input_map is None:
            return result
        mapped = Minibatch(
            {key: result[stream if isinstance(stream, str) else stream.name] for key, stream in input_map.items()}
        )
        mapped.provenance = result.provenance
        return mapped

    def get_next_minibatch(
        self, minibatch_size_in_samples: int, minibatch_size_in_sequences: int | None = None, device: Any = None
    ) -> Minibatch | dict[Any, MinibatchData]:
        """CNTK 2.0 beta's name of :meth:`next_minibatch` (deprecated)."""
        deprecated("MinibatchSource.get_next_minibatch", "next_minibatch")
        return self.next_minibatch(
            minibatch_size_in_samples, device=device, minibatch_size_in_sequences=minibatch_size_in_sequences
        )

    @cached_property
    def _longest_unit(self) -> int:
        """Samples of the longest unit (sequence, or frame in frame mode): a sample budget that holds any n units
        is n times this."""
        return 1 if self.frame_mode else int(np.max(self._corpus.lengths))

    def _timed_read(
        self, minibatch_size: int, partitions: int, index: int, max_sequences: int = 0
    ) -> Minibatch | Selection | bool | None:
        """:meth:`_read` with its stages timed for :meth:`stats` (one read in ``STAGE_SAMPLE``)."""
        clock, marks = self._clock, self._stage_ends
        marks[0] = marks[1] = marks[2] = started = time.perf_counter()
        waited = clock.wait
        self._marks = marks
        try:
            result = self._read(minibatch_size, partitions, index, True, max_sequences)
        finally:
            self._marks = None
        clock.timed_read(started, marks, time.perf_counter(), clock.wait - waited)
        if isinstance(result, Minibatch) and result:
            clock.padding(next(iter(result.values())).sequence_lengths)
        return result

    def skip_minibatch(
        self, minibatch_size_in_samples: int, num_data_partitions: int | None = None, partition_index: int | None = None
    ) -> bool:
        """Advances exactly as :meth:`next_minibatch` would, without reading any data.

        Returns False at the end. Used to hand out minibatches round-robin to loader workers.
        """
        partitions, index = self._check_partition(num_data_partitions, partition_index)
        with self._lock:
            self._check_open()
            return self._read(minibatch_size_in_samples, partitions, index, False) is not None

    def plan_minibatch(
        self, minibatch_size_in_samples: int, num_data_partitions: int | None = None, partition_index: int | None = None
    ) -> Selection | None:
        """The units the next minibatch holds (table chunks and index lengths too), advancing exactly as
        :meth:`skip_minibatch` does, without reading any data (``cntkio explain``); None at the end. Sequence and
        frame mode only (truncated BPTT cuts units into pieces)."""
        if self.truncation_length:
            raise ConfigError("plan_minibatch needs sequence or frame mode; this source uses truncated BPTT")
        partitions, index = self._check_partition(num_data_partitions, partition_index)
        with self._lock:
            self._check_open()
            selection = self._read(minibatch_size_in_samples, partitions, index, False)
        return selection if isinstance(selection, Selection) else None

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
        if state is None and (through_epoch is None or through_epoch == epoch):
            sizes = self._partition_sizes_of_sweeps(minibatch_size_in_samples, partitions, int(epoch))
            if sizes is not None:
                return sizes
        with self._lock:
            self._check_open()
            saved = (self._cursor, self._slots, self._epoch, self._epoch_end, self._planned)
            try:  # a cursor and slots of its own: the saved ones are not touched
                self._cursor, self._slots = Cursor(self._corpus, self.randomization), BpttSlots(self.truncation_length)
                if state is not None:
                    self.restore_from_checkpoint(state)
                else:
                    self._epoch = int(epoch)
                    self._restore_position(int(self._epoch * self.epoch_size))
                first_epoch, start, slots = self._epoch, self._cursor.mark(), self._slots.state()
                last_epoch = first_epoch if through_epoch is None else int(through_epoch)
                sizes = []
                for index in range(partitions):
                    self._cursor.rewind(start)
                    self._slots.restore(slots)
                    self._epoch, self._epoch_end = first_epoch, (first_epoch + 1) * self.epoch_size
                    mine: list[int] = []
                    while True:
                        selection = self._read(minibatch_size_in_samples, partitions, index, False)
                        if selection is None:
                            if self._epoch >= last_epoch:
                                break
                            self._epoch += 1
                            self._restore_position(int(self._epoch * self.epoch_size))
                            continue
                        mine.append(
                            int(selection.lengths.sum()) if isinstance(selection, Selection)
                            else minibatch_size_in_samples // partitions
                        )  # fmt: skip
                    sizes.append(np.asarray(mine, dtype=np.int64))
                return sizes
            finally:
                self._cursor, self._slots, self._epoch, self._epoch_end, self._planned = saved

    def _partition_sizes_of_sweeps(self, minibatch_size: int, partitions: int, epoch: int) -> list[np.ndarray] | None:
        """:meth:`partition_minibatches` of an epoch of whole sweeps, vectorised: each partition's units in order, then
        its reads packed greedily as :meth:`Cursor.select` packs them (whole units while they fit the budget, at least
        one); None where reads end elsewhere too (truncated BPTT, length buckets, data that varies by sweep)."""
        sweep_size, epoch_size = self._corpus.sweep_size, self.epoch_size
        if self.truncation_length or self.randomization.bucket_samples or self._corpus.sweep_dependent:
            return None
        if epoch_size % sweep_size:
            return None
        sweeps = int(epoch_size // sweep_size)
        cursor = Cursor(self._corpus, self.randomization)
        pieces: list[list[np.ndarray]] = [[] for _ in range(partitions)]
        for sweep in range(epoch * sweeps, (epoch + 1) * sweeps):
            order, position = cursor.order(sweep), 0
            for k in range(order.num_blocks):
                block = order.block(k)
                if partitions == 1:
                    pieces[0].append(block.lengths)
                else:
                    owners = order.owners(block, position + np.arange(len(block), dtype=np.int64), partitions)
                    for index in range(partitions):
                        pieces[index].append(block.lengths[owners == index])
                position += len(block)
        sizes = []
        for index, lengths in enumerate(pieces):
            budget = max(1, _share(minibatch_size, partitions, index))
            units = np.concatenate(lengths or [np.zeros(0, dtype=np.int64)]).astype(np.int64)
            ends = np.concatenate([np.zeros(1, dtype=np.int64), np.cumsum(units)])
            count = len(ends) - 1
            fitting = np.searchsorted(ends, ends[:-1] + budget, side="right") - 1  # the read starting at unit i ends
            following = np.maximum(fitting, np.arange(1, count + 1)).tolist()  # ... before this unit (at least one)
            firsts, unit = [], 0
            while unit < count:  # one step per minibatch
                firsts.append(unit)
                unit = following[unit]
            sizes.append(np.diff(ends[np.asarray([*firsts, count], dtype=np.int64)]).astype(np.int64))
        return sizes

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

    def _read(
        self, minibatch_size: int, partitions: int, index: int, gather: bool, max_sequences: int = 0
    ) -> Minibatch | Selection | bool | None:
        """Selects the next minibatch's units (at most ``max_sequences`` if > 0), moves the cursor past them and
        (``gather``) assembles them (else returns the selection, or True for truncated BPTT); None at the end."""
        if minibatch_size <= 0:
            raise ValueError(f"minibatch_size_in_samples must be positive, got {minibatch_size}")
        if max_sequences and self.truncation_length:
            raise ConfigError("minibatch_size_in_sequences cannot be used with truncated BPTT (truncation_length)")
        mark = self._cursor.mark()
        slots = self._slots.state() if self.truncation_length else None
        try:
            if self.truncation_length:
                return self._read_bptt(minibatch_size, partitions, index, gather)
            return self._read_sequences(minibatch_size, partitions, index, gather, max_sequences)
        except BaseException:  # nothing was delivered: the next read starts where this one did
            self._cursor.rewind(mark)
            if slots is not None:
                self._slots.restore(slots)
            self._planned = None
            raise

    def _read_sequences(
        self, minibatch_size: int, partitions: int, index: int, gather: bool, max_sequences: int = 0
    ) -> Minibatch | Selection | None:
        """The next minibatch of whole units (at most ``max_sequences`` if > 0: a selection of more is taken again
        with the budget of its first ``max_sequences``). A read whose units were all skipped as unusable (images that
        do not decode) reads on, so a minibatch is never empty; an endless source giving a whole sweep of unusable
        units is an error."""
        budget = max(1, _share(minibatch_size, partitions, index))
        versioned = self._corpus.sweep_dependent  # then a read spans at most the sweeps whose chunks are held
        held_sweeps = SWEEP_VERSIONS if versioned else None
        skipped, sweep_ended = 0, False
        while True:
            start = self._cursor.mark() if max_sequences else None
            selection = self._cursor.select(budget, partitions, index, self._epoch_end, held_sweeps)
            if start is not None and len(selection.units) > max_sequences:
                self._cursor.rewind(start)
                fitting = int(selection.lengths[:max_sequences].sum())
                selection = self._cursor.select(fitting, partitions, index, self._epoch_end, held_sweeps)
            marks = self._marks
            if marks is not None:  # (stage ends, for the stage clock)
                marks[0] = marks[1] = marks[2] = time.perf_counter()
            if not len(selection.units):
                return None
            if not gather:
                return selection
            if skipped >= self._corpus.num_units and math.isinf(self._epoch_end):  # would read on forever
                raise CNTKIOError(
                    f"{self._deserializer.source_name}: no usable sequence in a whole sweep ({skipped} units skipped "
                    f"as invalid; see the errors counted under max_errors)"
                )
            self._load(selection)
            if marks is not None:
                marks[1] = marks[2] = time.perf_counter()
            sweeps = selection.sweeps() if versioned else None
            sweep_ended = sweep_ended or bool(selection.sweep_ends)
            minibatch = self._assembler.minibatch(selection.units, selection.chunks, sweep_ended, sweeps=sweeps)
            if marks is not None:
                marks[2] = time.perf_counter()
            if len(minibatch.provenance.units):
                return minibatch
            skipped += len(selection.units)

    def _read_bptt(self, minibatch_size: int, partitions: int, index: int, gather: bool) -> Minibatch | bool | None:
        """Truncated BPTT: every slot yields ``truncation_length`` steps, carrying sequences over."""
        length = self.truncation_length
        total_slots = max(1, minibatch_size // length)
        if partitions > total_slots:
            raise ValueError(
                f"{partitions} partitions need a minibatch of at least {partitions * length} samples with "
                f"truncation_length={length}"
            )
        self._slots.resize(_share(total_slots, partitions, index))
        self._cursor.set_partitioning(partitions, index)  # (also when the read takes only pieces carried over)
        self._slots.share(partitions, index)

        def fetch() -> tuple[np.ndarray, np.ndarray, list[int]]:
            selection = self._cursor.select(minibatch_size, partitions, index, self._epoch_end)
            return selection.units, selection.lengths, selection.sweep_ends

        end_of_sweep = self._slots.fill(fetch)
        if self._slots.is_empty():
            return None
        units, offsets, counts, rows = row_layout(self._slots.cut())
        if not gather:
            return True
        marks = self._marks
        if marks is not None:
            marks[0] = marks[1] = marks[2] = time.perf_counter()
        chunks = self._corpus.chunk_of_units(units)
        self._load(Selection(units, chunks, counts, []), extra=self._slots.units())
        if marks is not None:
            marks[1] = marks[2] = time.perf_counter()
        minibatch = self._assembler.minibatch(
            units, chunks, end_of_sweep, (offsets, counts, rows), len(self._slots.slots)
        )
        if marks is not None:
            marks[2] = time.perf_counter()
        return minibatch

    def _load(self, selection: Selection, extra: list[int] | None = None) -> None:
        """Makes sure the chunks of the selection are loaded, drops the chunks no read needs any more and
        prefetches the next blocks' chunks. Chunks are asked for with the sweep they are read in (it matters
        only to chunks that vary by sweep: of those, a copy per sweep parity is held). The sets are arrays of
        (sweep, table chunk) codes, so a read costs Python work per chunk that enters or leaves, not per chunk
        of the window."""
        cursor = self._cursor
        plan = (cursor.sweep, cursor.block, cursor.partitioning)
        if plan == self._planned and extra is None:
            return  # the read stayed in the block planned when the cursor entered it
        self._planned = plan
        corpus = self._corpus
        chunks_per_sweep = max(corpus.num_chunks, 1)
        versioned = corpus.sweep_dependent
        if versioned:
            sweeps = selection.sweeps()
            needed = np.unique(sweeps * chunks_per_sweep + selection.chunks)
            last_sweep = int(sweeps.min()) + SWEEP_VERSIONS - 1  # a later sweep would replace a copy in use
        else:
            needed = np.unique(selection.chunks).astype(np.int64)
            last_sweep = None
        in_flight = np.zeros(0, dtype=np.int64)
        if extra:  # BPTT: units waiting in slots keep their chunks
            in_flight = np.unique(corpus.chunk_of_units(np.asarray(extra, dtype=np.int64))).astype(np.int64)
        threads = self._cache.threads
        upcoming = [
            (sweep if versioned else 0) * chunks_per_sweep + chunks.astype(np.int64)
            for sweep, chunks in cursor.upcoming_chunks(1 + max(1, threads), self._epoch_end)
            if last_sweep is None or sweep <= last_sweep
        ]
        window = np.union1d(np.union1d(needed, in_flight), upcoming[0] if upcoming else in_flight)
        ahead = np.zeros(0, dtype=np.int64)  # the first chunks of the next blocks that are not in the window
        if threads and self.position < self._epoch_end and len(upcoming) > 1:
            later = np.concatenate(upcoming[1:])
            later = later[~np.isin(later, window)]
            _, first = np.unique(later, return_index=True)
            ahead = later[np.sort(first)[:threads]]
        self._cache.retain(self._plan(np.concatenate([window, ahead])))
        budget = self.memory_budget
        if budget is not None and self._cache.dropped - self._trimmed_at >= max(1, budget.held_chunks // 4):
            _native.release_free_memory()  # freed chunks' heap pages count against the budget until given back
            self._trimmed_at = self._cache.dropped
        self._cache.ensure(
            corpus.chunk_keys(zip((needed % chunks_per_sweep).tolist(), (needed // chunks_per_sweep).tolist()))
        )
        if threads and self.position < self._epoch_end:
            # The rest of the block's window, then the next blocks'; a later read in this block that finds
            # a chunk not loaded yet (no prefetch) loads it then (the native gather refuses to guess).
            rest = np.setdiff1d(window, np.union1d(needed, in_flight), assume_unique=True)
            self._cache.prefetch(self._plan(np.concatenate([rest, ahead])))

    def _plan(self, codes: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """:meth:`Corpus.load_plan` of (sweep, table chunk) codes."""
        chunks_per_sweep = max(self._corpus.num_chunks, 1)
        return self._corpus.load_plan(codes % chunks_per_sweep, codes // chunks_per_sweep)

    # --- checkpoints -----------------------------------------------------------------------------
    def _fingerprint(self) -> dict[str, Any]:
        """Identifies the data by content (:mod:`cntkio.identity`: a copy elsewhere, renamed, restores) and the
        configuration that decides the order; a checkpoint refused names what differs."""
        order = {**self.randomization.identity(), "frame_mode": self.frame_mode}
        if self.truncation_length:
            order["truncation_length"] = self.truncation_length
        return {**self._corpus.identity(), "order": order}

    def get_checkpoint_state(self) -> dict[str, Any]:
        """A small, versioned, JSON-serialisable dict; :meth:`restore_from_checkpoint` continues from it
        exactly (also in a new process, and with another partition count after :meth:`merge_checkpoints`)."""
        with self._lock:
            state: dict[str, Any] = {
                "version": CHECKPOINT_VERSION,
                "minibatchSourcePosition": self.position,
                "fingerprint": json.loads(self._identity),
                "epoch": self._epoch,
                "cursor": self._cursor.get_state(),
            }
            if self.truncation_length:
                state["bptt_slots"] = self._slots.state()
            ledgers = ledgers_of(self._corpus.deserializers)
            if any(ledger.count for ledger, _ in ledgers):  # (without errors, a restore empties the ledgers)
                state["errors"] = [ledger.get_state() for ledger, _ in ledgers]
            return seal(state)

    def restore_from_checkpoint(self, state: Mapping[str, Any]) -> None:
        """Continues from a state of :meth:`get_checkpoint_state` (or CNTK's ``{'minibatchSourcePosition': n}``,
        rounded up to the next sequence boundary). A malformed state, or one taken on other data or with
        another configuration, raises ``ValueError``."""
        with self._lock:
            if isinstance(state, Mapping) and set(state) == {"minibatchSourcePosition"}:
                position = state["minibatchSourcePosition"]
                if isinstance(position, bool) or not isinstance(position, (int, np.integer)) or position < 0:
                    raise ConfigError(f"checkpoint: minibatchSourcePosition must be an integer >= 0, got {position!r}")
                self._restore_position(int(position))
                return
            checked = validate(state, json.loads(self._identity))
            bptt = checked["bptt_slots"]
            if (bptt is None) == bool(self.truncation_length):
                raise ConfigError(
                    "checkpoint: bptt_slots (the sequences in flight) belong in the states of truncated BPTT sources "
                    "only, and in each of them"
                )
            if bptt:
                check_in_flight(bptt, self._corpus.lengths)
            position, epoch, size = checked["minibatchSourcePosition"], checked["epoch"], self.epoch_size
            if math.isfinite(size) and size and not epoch * size <= position <= (epoch + 1) * size:
                raise ConfigError(
                    f"checkpoint: minibatchSourcePosition is {position}; epoch {epoch} allows "
                    f"[{epoch * size}, {(epoch + 1) * size}] (epoch size {size})"
                )
            cursor = Cursor(self._corpus, self.randomization)  # the source changes only once every check passed
            cursor.set_state(checked["cursor"])
            if cursor.position != position:
                raise ConfigError(
                    f"checkpoint: minibatchSourcePosition {position} does not match the cursor's sample position "
                    f"{cursor.position}"
                )
            ledgers = restored_ledgers(ledgers_of(self._corpus.deserializers), checked["errors"])
            for (ledger, deserializer), ledger_state in ledgers:
                ledger.check_restorable(ledger_state, deserializer.num_chunks())
            for (ledger, deserializer), ledger_state in ledgers:
                ledger.set_state(ledger_state, deserializer.num_chunks())
            self._cursor = cursor
            self._slots.restore(bptt)
            self._epoch = checked["epoch"]
            self._epoch_end = self._compute_epoch_end()
            self._planned = None

    def error_report(self, limit: int = 20, arrays: bool = False) -> ErrorReport:
        """The bad records counted under ``max_errors`` (:class:`~cntkio.error_ledger.ErrorReport`): counts by kind
        and by file, the first ``limit`` located errors (messages built now), and with ``arrays=True`` every error
        held as columns. It survives a checkpoint and restore (counts, and the first errors located)."""
        return error_report([ledger for ledger, _ in ledgers_of(self._corpus.deserializers)], limit, arrays)

    def _restore_position(self, position: int) -> None:
        self._cursor.seek(position)
        self._slots.restore(None)
        self._epoch_end = self._compute_epoch_end()
        self._planned = None

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

    def _share_chunks(self, exchange: ChunkExchange) -> None:
        """Loads chunks through ``exchange`` (loader workers of one dataset parse each chunk once)."""
        self._cache.exchange = exchange

    def close(self) -> None:
        """Stops background parsing; reading afterwards raises ``ValueError``. Closing twice is harmless."""
        if getattr(self, "_closed", True):
            return
        self._closed = True
        self._cache.close()

    def __enter__(self) -> MinibatchSource:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
