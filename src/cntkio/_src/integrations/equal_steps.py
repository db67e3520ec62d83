"""Equal steps: every rank (data partition) of a job yields the same number of minibatches per epoch.

With chunk-level partitioning the partitions of a sweep hold different numbers of samples, so ranks reading their
own partitions take different numbers of minibatches per epoch, and ranks that step together (``torch.distributed``
collectives, JAX's global arrays) wait forever at the end of an epoch for a rank that has stopped. The order is a pure
function of the index, so every rank computes every rank's count without communication
(:meth:`~cntkio.MinibatchSource.partition_minibatches` walks the plan from the index: no data is read), once per
epoch, and all stop together by one rule with two presets:

* ``"carry"``: every rank stops at the fewest, but no rank leaves more than ``max_carry`` minibatches (default
  :data:`MAX_CARRY`) behind: the steps are ``max(min(available), max(available) - max_carry)``. A rank's minibatches
  past that point are the first it yields in the next epoch, so across epochs every sequence is read exactly once
  (what is carried past the last epoch a job reads is not read); a rank short of the steps yields empty minibatches
  of weight zero, as under ``"pad"``. The backlog stays bounded however uneven the shares are, epoch after epoch.
* ``"pad"``: the same with ``max_carry=0``: every rank yields as many as the most; a rank whose data has ended
  yields empty minibatches of weight zero (no sequences) until then. Every epoch reads every sequence exactly once.

:class:`EpochSteps` is one epoch's plan (the same on every rank, carried in checkpoint states); :class:`EqualSteps`
computes it; :class:`RankStream` walks one rank's minibatches of an epoch under it (:mod:`cntkio.torch` deals them to
loader workers; :mod:`cntkio.jax` and :class:`EqualStepsReader` read them all).
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from cntkio._src.api.source import MinibatchSource
from cntkio._src.assemble.minibatch import Minibatch, Provenance
from cntkio._src.common.errors import CNTKIOError, ConfigError

__all__ = ["RULES", "EpochSteps", "EqualSteps", "EqualStepsReader", "RankStream", "SharedCarry", "check_rule"]

RULES = ("carry", "pad")
MAX_CARRY = 8  # the default bound of a rank's backlog under "carry", in minibatches


def check_rule(rule: str) -> str:
    if rule not in RULES:
        raise ValueError(f"unknown equal-steps rule {rule!r}; one of {', '.join(RULES)} (or None: off)")
    return rule


def check_max_carry(max_carry: int) -> int:
    if isinstance(max_carry, bool) or not isinstance(max_carry, int) or max_carry < 0:
        raise ValueError(f"max_carry must be a count of minibatches >= 0, got {max_carry!r}")
    return max_carry


@dataclass(frozen=True)
class EpochSteps:
    """The equal-steps plan of one epoch, the same on every rank.

    ``own[r]``: the minibatches rank ``r`` reads of this epoch (from its start, or from ``start``: a state every rank
    restored, as after an elastic resume); ``carried_in[r]``: minibatches of earlier epochs it yields first (carry);
    ``sizes[r]``: the samples of each of its own minibatches; ``max_carry``: the bound of a rank's backlog (0 under
    ``"pad"``). Every rank yields :attr:`steps` minibatches.
    """

    rule: str
    epoch: int
    carried_in: tuple[int, ...]
    own: tuple[int, ...]
    start: dict[str, Any] | None = None
    max_carry: int = 0
    sizes: tuple[np.ndarray, ...] = field(default=(), compare=False, repr=False)

    @property
    def partitions(self) -> int:
        return len(self.own)

    @property
    def available(self) -> tuple[int, ...]:
        return tuple(c + o for c, o in zip(self.carried_in, self.own, strict=True))

    @property
    def steps(self) -> int:
        """Minibatches every rank yields this epoch: the fewest, but none leaving more than ``max_carry`` behind.
        An epoch resumed from a merged state (``start``) is completed by padding under either rule: what it would
        carry out lies in the merged state's partitioning, which the next epoch's does not know."""
        available = self.available
        if self.start is not None:
            return max(available)
        return max(min(available), max(available) - self.max_carry)

    def data_steps(self, rank: int) -> int:
        """Of :attr:`steps`, those in which rank ``rank`` yields data (the rest are padding)."""
        return min(self.steps, self.available[rank])

    @property
    def carried_out(self) -> tuple[int, ...]:
        """Per rank, the minibatches left for the next epoch."""
        return tuple(max(a - self.steps, 0) for a in self.available)

    @property
    def padded(self) -> tuple[int, ...]:
        """Per rank, the empty minibatches of weight zero it yields."""
        return tuple(max(self.steps - a, 0) for a in self.available)

    def report(self) -> dict[str, Any]:
        """What the rule does this epoch (per rank, and the samples of this epoch it carries or pads)."""
        carried_samples = [
            int(s[len(s) - min(n, len(s)) :].sum()) for s, n in zip(self.sizes, self.carried_out, strict=True)
        ]
        budget = [int(s.max()) if len(s) else 0 for s in self.sizes]
        return {
            "rule": self.rule,
            "max_carry": self.max_carry,
            "epoch": self.epoch,
            "steps": self.steps,
            "own": list(self.own),
            "own_samples": [int(s.sum()) for s in self.sizes],
            "carried_in": list(self.carried_in),
            "carried_out": list(self.carried_out),  # the backlog, each <= max_carry
            "carried_out_samples": carried_samples,  # of this epoch's own minibatches
            "padded": list(self.padded),
            "padded_sample_slots": [p * max(budget) for p in self.padded],  # empty steps x the largest minibatch
        }

    def state(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "max_carry": self.max_carry,
            "epoch": self.epoch,
            "carried_in": list(self.carried_in),
            "own": list(self.own),
            "start": self.start,
        }

    @classmethod
    def from_state(cls, value: Any, rule: str, partitions: int, epoch: int, max_carry: int = 0) -> EpochSteps:
        """A plan of :meth:`state`, checked against the job (the counts are checked against the data by
        :meth:`EqualSteps.check`)."""
        keys = {"rule", "max_carry", "epoch", "carried_in", "own", "start"}
        if not isinstance(value, Mapping) or set(value) != keys:
            raise ConfigError(
                f"checkpoint: equal_steps must hold rule, max_carry, epoch, carried_in, own and start: {value!r}"
            )
        if value["rule"] != rule:
            raise ConfigError(f"checkpoint: equal_steps rule {value['rule']!r} but this job uses {rule!r}")
        if value["max_carry"] != max_carry:
            raise ConfigError(f"checkpoint: equal_steps max_carry {value['max_carry']!r} but this job uses {max_carry}")
        if value["epoch"] != epoch:
            raise ConfigError(f"checkpoint: equal_steps plan of epoch {value['epoch']!r} in a state of epoch {epoch}")
        vectors = []
        for name in ("carried_in", "own"):
            entries = value[name]
            if not isinstance(entries, list) or len(entries) != partitions:
                raise ConfigError(f"checkpoint: equal_steps {name} must list {partitions} counts, got {entries!r}")
            if any(isinstance(n, bool) or not isinstance(n, int) or n < 0 for n in entries):
                raise ConfigError(f"checkpoint: equal_steps {name} must be counts >= 0, got {entries!r}")
            vectors.append(tuple(entries))
        carried_in = vectors[0]
        if any(carried_in) and (min(carried_in) != 0 or max(carried_in) > max_carry or value["start"] is not None):
            raise ConfigError(f"checkpoint: equal_steps carried_in {list(carried_in)} is not a carry rule's "
                              f"(max_carry {max_carry})")  # fmt: skip
        start = value["start"]
        if start is not None and not isinstance(start, Mapping):
            raise ConfigError("checkpoint: equal_steps start must be a source state or None")
        return cls(rule, epoch, carried_in, vectors[1], dict(start) if start is not None else None, max_carry)


class SharedCarry:
    """The carry vector of the latest epoch any process planned, shared with loader worker processes (persistent or
    not) so that the next pass starts from it instead of re-planning every earlier epoch. A record is kept with the
    planning it was made under (rule, ``max_carry``, minibatch size, ranks): a planner of another one starts afresh.
    Holds up to ``CAPACITY`` ranks (more: each process plans the earlier epochs itself)."""

    CAPACITY = 4096
    HEADER = 5  # epoch + 1 (0: empty), partitions, rule, max_carry, minibatch size

    def __init__(self) -> None:
        self._shared: Any = None
        self._local: list[int] = [0] * self.HEADER
        try:  # [header..., carried_in...]; spawn's lock serves forked processes too
            self._shared = multiprocessing.get_context("spawn").Array("q", self.HEADER + self.CAPACITY, lock=True)
        except (OSError, PermissionError):  # no shared memory here: one process only
            self._shared = None

    @staticmethod
    def _key(planner: EqualSteps) -> list[int]:
        return [planner.partitions, RULES.index(planner.rule), planner.max_carry, planner.minibatch_size]

    def get(self, planner: EqualSteps) -> tuple[int, tuple[int, ...]] | None:
        """(epoch, carried_in) of the latest epoch recorded by a planner like ``planner``, or None."""
        partitions = planner.partitions
        if self._shared is None:
            values = self._local
        else:
            with self._shared.get_lock():
                values = list(self._shared[: self.HEADER + min(partitions, self.CAPACITY)])
        if not values[0] or values[1 : self.HEADER] != self._key(planner) or len(values) < self.HEADER + partitions:
            return None
        return values[0] - 1, tuple(values[self.HEADER : self.HEADER + partitions])

    def put(self, planner: EqualSteps, epoch: int, carried_in: tuple[int, ...]) -> None:
        if planner.partitions > self.CAPACITY:
            return
        values = [epoch + 1, *self._key(planner), *carried_in]
        if self._shared is None:
            self._local = values
            return
        with self._shared.get_lock():
            self._shared[: len(values)] = values

    def __getstate__(self) -> dict[str, Any]:
        from multiprocessing.context import get_spawning_popen

        if self._shared is not None and get_spawning_popen() is None:  # an ordinary pickle: the numbers only
            with self._shared.get_lock():
                count = self.HEADER + min(int(self._shared[1]), self.CAPACITY)
                return {"_shared": None, "_local": list(self._shared[:count])}
        return self.__dict__


class EqualSteps:
    """Plans the epochs of a job of ``partitions`` ranks reading ``minibatch_size`` samples per step (split across the
    ranks as ``next_minibatch`` does) under ``rule`` (``max_carry``: the bound of a rank's backlog under ``"carry"``;
    ``"pad"`` is ``max_carry=0``). Every rank's counts come from one walk of the plan per epoch
    (:meth:`MinibatchSource.partition_minibatches`), kept for the epochs still needed."""

    def __init__(
        self,
        rule: str,
        minibatch_size: int,
        partitions: int,
        shared: SharedCarry | None = None,
        max_carry: int = MAX_CARRY,
    ):
        self.rule = check_rule(rule)
        self.max_carry = check_max_carry(max_carry) if rule == "carry" else 0
        self.minibatch_size = int(minibatch_size)
        self.partitions = int(partitions)
        self.shared = shared
        self._sizes: dict[int, list[np.ndarray]] = {}  # per epoch from its start: every rank's minibatch samples
        self._carry: dict[int, tuple[int, ...]] = {0: (0,) * self.partitions}  # carried_in of epochs known

    def sizes(self, source: MinibatchSource, epoch: int) -> list[np.ndarray]:
        sizes = self._sizes.get(epoch)
        if sizes is None:
            sizes = self._sizes[epoch] = source.partition_minibatches(self.minibatch_size, self.partitions, epoch=epoch)
            while len(self._sizes) > 4:
                del self._sizes[min(self._sizes)]
        return sizes

    def plan(self, source: MinibatchSource, epoch: int) -> EpochSteps:
        """The plan of epoch ``epoch`` started afresh (what earlier epochs carried into it first)."""
        plan = self._plan(source, epoch, self.carried_in(source, epoch))
        self.record(plan)
        return plan

    def plan_from(self, source: MinibatchSource, state: Mapping[str, Any], epoch: int) -> EpochSteps:
        """The plan of the rest of epoch ``epoch`` when every rank restores ``state`` (a merged state of another
        partitioning: nothing is carried in; what the old ranks had not read is in the state's rest)."""
        sizes = source.partition_minibatches(self.minibatch_size, self.partitions, state=state, through_epoch=epoch)
        own = tuple(len(s) for s in sizes)
        plan = EpochSteps(self.rule, epoch, (0,) * self.partitions, own, dict(state), self.max_carry, tuple(sizes))
        self.record(plan)
        return plan

    def check(self, source: MinibatchSource, value: Any, epoch: int) -> EpochSteps:
        """A plan from a checkpoint state, its own counts checked against the data (a modified or foreign state is
        refused before it can make a rank step a different number of times than the others)."""
        plan = EpochSteps.from_state(value, self.rule, self.partitions, epoch, self.max_carry)
        if plan.start is not None:
            sizes = source.partition_minibatches(
                self.minibatch_size, self.partitions, state=plan.start, through_epoch=epoch
            )
        else:
            sizes = self.sizes(source, epoch)
        if tuple(len(s) for s in sizes) != plan.own:
            raise ConfigError(
                f"checkpoint: equal_steps counts {list(plan.own)} for epoch {epoch} differ from the data's "
                f"{[len(s) for s in sizes]} (another minibatch size, partitioning or data?)"
            )
        plan = EpochSteps(plan.rule, epoch, plan.carried_in, plan.own, plan.start, self.max_carry, tuple(sizes))
        self.record(plan)
        return plan

    def _plan(self, source: MinibatchSource, epoch: int, carried_in: tuple[int, ...]) -> EpochSteps:
        sizes = self.sizes(source, epoch)
        own = tuple(len(s) for s in sizes)
        return EpochSteps(self.rule, epoch, carried_in, own, None, self.max_carry, tuple(sizes))

    def record(self, plan: EpochSteps) -> None:
        """Remembers what ``plan`` carries into the next epoch (here and for the other processes of the job)."""
        self._carry[plan.epoch + 1] = plan.carried_out
        if self.shared is not None:
            self.shared.put(self, plan.epoch + 1, plan.carried_out)

    def carried_in(self, source: MinibatchSource, epoch: int) -> tuple[int, ...]:
        """What earlier epochs carry into epoch ``epoch``: from the latest epoch known at or before it (recorded
        here, by another process of the job, or epoch 0), planning the epochs between."""
        if not self.max_carry:
            return (0,) * self.partitions
        shared = self.shared.get(self) if self.shared is not None else None
        if shared is not None and shared[0] <= epoch:
            self._carry.setdefault(shared[0], shared[1])
        known = max(e for e in self._carry if e <= epoch)
        carried = self._carry[known]
        for earlier in range(known, epoch):
            carried = self._plan(source, earlier, carried).carried_out
            self._carry[earlier + 1] = carried
        return carried

    def stream(
        self,
        source: MinibatchSource,
        epoch: int,
        rank: int,
        state: Mapping[str, Any] | None = None,
        plan: Any = None,
        step: int = 0,
    ) -> RankStream:
        """Rank ``rank``'s stream of ``epoch``, positioned at its first minibatch, or where a checkpoint was taken:
        ``state`` (the source's state) with ``plan`` (its epoch's plan, :meth:`EpochSteps.state`) and ``step`` (the
        steps taken of it) — a state of this partitioning — or without a plan, a merged state of every rank
        (:meth:`MinibatchSource.merge_checkpoints`), whose epoch gets a plan of its own (:meth:`plan_from`). A rank's
        own state without a plan is refused: the ranks' positions differ, so they cannot agree on their steps."""
        if state is None:
            fresh = self.plan(source, epoch)
            self.locate(source, fresh, rank)
            return RankStream(source, self, fresh, rank)
        if plan is None:
            cursor = state.get("cursor")
            if step or (isinstance(cursor, Mapping) and cursor.get("partitioning")):
                raise ConfigError(
                    "checkpoint: a rank's own state without an equal-steps plan (taken with equal_steps=None): the "
                    "ranks' positions differ, so they cannot agree on their steps; resume from the merged state "
                    "of every rank (gather_state / merge_states / merge_checkpoints), or with equal_steps=None"
                )
            merged = self.plan_from(source, state, epoch)
            self.locate(source, merged, rank)
            return RankStream(source, self, merged, rank)
        own = self.check(source, plan, epoch)
        if step:
            source.restore_from_checkpoint(dict(state))
        else:  # (a state taken before the epoch's first step: where the plan starts the rank)
            self.locate(source, own, rank)
        return RankStream(source, self, own, rank, step)

    def locate(self, source: MinibatchSource, plan: EpochSteps, rank: int) -> None:
        """Moves ``source`` to the first minibatch rank ``rank`` yields in ``plan``'s epoch: the first it carries
        in from earlier epochs, else the start of the epoch (or the plan's start state)."""
        if plan.start is not None:
            source.restore_from_checkpoint(plan.start)
            return
        carried, epoch = plan.carried_in[rank], plan.epoch
        while carried:
            epoch -= 1
            if epoch < 0:
                raise ConfigError(f"equal steps: rank {rank} carries {plan.carried_in[rank]} minibatches into "
                                  f"epoch {plan.epoch}, more than the epochs before it hold")  # fmt: skip
            count = len(self.sizes(source, epoch)[rank])
            if carried <= count:
                break
            carried -= count
        source.start_epoch(epoch)
        skip = len(self.sizes(source, epoch)[rank]) - carried if carried else 0
        for _ in range(skip):
            if not source.skip_minibatch(self.minibatch_size, self.partitions, rank):
                raise CNTKIOError(f"equal steps: rank {rank}'s epoch {epoch} ended before its planned minibatches")


class RankStream:
    """One rank's minibatches of one epoch under a plan: ``index`` counts the steps taken (data or padding); a read
    that reaches the end of an earlier epoch's data (carried minibatches) moves on to the next epoch."""

    def __init__(self, source: MinibatchSource, planner: EqualSteps, plan: EpochSteps, rank: int, index: int = 0):
        self.source, self.planner, self.plan, self.rank, self.index = source, planner, plan, rank, int(index)
        self._data = plan.data_steps(rank)
        source.equal_steps = plan.report()  # (source.stats() reports it)
        if not 0 <= self.index <= plan.steps:
            raise ConfigError(f"checkpoint: step {self.index} is outside the {plan.steps} steps of epoch {plan.epoch}")

    @property
    def done(self) -> bool:
        return self.index >= self.plan.steps

    @property
    def padding(self) -> bool:
        """The next step is padding: this rank's data of the epoch has ended."""
        return self._data <= self.index < self.plan.steps

    def read(self, gather: bool = True) -> Minibatch | None:
        """The next step's minibatch (or, ``gather=False``, moves past it without reading: None)."""
        planner = self.planner
        while True:
            if gather:
                minibatch = self.source.next_minibatch(
                    planner.minibatch_size, num_data_partitions=planner.partitions, partition_index=self.rank
                )
                found = isinstance(minibatch, Minibatch)
            else:
                minibatch = None
                found = self.source.skip_minibatch(planner.minibatch_size, planner.partitions, self.rank)
            if found:
                self.index += 1
                return minibatch if isinstance(minibatch, Minibatch) else None
            if self.source.current_epoch >= self.plan.epoch:
                raise CNTKIOError(
                    f"equal steps: rank {self.rank}'s data of epoch {self.plan.epoch} ended at step {self.index}, "
                    f"but {self._data} were planned (the data changed while it was read?)"
                )
            self.source.start_epoch(self.source.current_epoch + 1)

    def pad(self) -> None:
        self.index += 1


class EqualStepsReader:
    """A source's minibatches for rank ``rank`` of ``partitions``, epoch by epoch, every rank yielding the same number
    per epoch (for frameworks other than PyTorch and JAX; see the module). Each iteration reads the next epoch;
    padding steps yield an empty :class:`~cntkio.Minibatch` (falsy: no streams, no sequences, no keys).

    Example::

        reader = EqualStepsReader(source, 1024, world, rank, rule="carry")
        for epoch in range(10):
            for minibatch in reader:        # the same count on every rank
                step(minibatch)
            print(reader.last_plan.report())
    """

    def __init__(
        self,
        source: MinibatchSource,
        minibatch_size: int,
        partitions: int,
        rank: int,
        rule: str = "carry",
        max_carry: int = MAX_CARRY,
    ) -> None:
        if source.is_infinite():
            raise ValueError("equal steps need epochs: set max_samples or max_sweeps on the source")
        if not 0 <= rank < partitions:
            raise ValueError(f"invalid partition {rank} of {partitions}")
        self.source, self.rank = source, int(rank)
        self.planner = EqualSteps(rule, minibatch_size, partitions, max_carry=max_carry)
        self.epoch = source.current_epoch
        self.last_plan: EpochSteps | None = None
        self._stream: RankStream | None = None

    def __iter__(self) -> Iterator[Minibatch]:
        stream = self._stream
        if stream is None or stream.done:
            stream = self._stream = self.planner.stream(self.source, self.epoch, self.rank)
        self.last_plan = stream.plan
        while not stream.done:
            if stream.padding:
                stream.pad()
                yield self._padding()
            else:
                minibatch = stream.read()
                assert minibatch is not None
                yield minibatch
        self.epoch = stream.plan.epoch + 1

    def _padding(self) -> Minibatch:
        """A padding step's minibatch: no streams, no sequences, no keys."""
        empty = Minibatch()
        corpus = self.source.engine.corpus
        sources = [d.source_name for d in corpus.deserializers]
        empty.provenance = Provenance(corpus.key_names, sources, np.zeros(0, dtype=np.int64))
        return empty

    def get_state(self) -> dict[str, Any]:
        """JSON-able: the position after the last minibatch, with the epoch's plan (an epoch read to its end keeps
        its plan, all steps taken; before the first, the plan of the epoch to read)."""
        stream = self._stream
        if stream is not None:
            plan, step = stream.plan, stream.index
        else:
            plan, step = self.planner.plan(self.source, self.epoch), 0
        return {
            "source": self.source.get_checkpoint_state(),
            "epoch": plan.epoch,
            "step": step,
            "equal_steps": plan.state(),
        }

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Continues right after the minibatch ``state`` was taken at (same ranks, rule and minibatch size), or from
        a merged state of every rank (``{"source": MinibatchSource.merge_checkpoints(...)}``, any partitioning)."""
        self.source.restore_from_checkpoint(dict(state["source"]))
        epoch = int(state.get("epoch", self.source.current_epoch))
        stream = self._stream = self.planner.stream(
            self.source, epoch, self.rank, state["source"], state.get("equal_steps"), int(state.get("step", 0))
        )
        self.epoch = epoch + 1 if stream.done else epoch
