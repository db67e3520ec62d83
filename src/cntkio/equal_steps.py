"""Equal steps: every rank (data partition) of a job yields the same number of minibatches per epoch.

With chunk-level partitioning the partitions of a sweep hold different numbers of samples, so ranks reading their
own partitions take different numbers of minibatches per epoch, and ranks that step together (``torch.distributed``
collectives, JAX's global arrays) wait forever at the end of an epoch for a rank that has stopped. The order is a pure
function of the index, so every rank computes every rank's count without communication
(:meth:`~cntkio.MinibatchSource.partition_minibatches` walks the plan from the index: no data is read), once per
epoch, and all stop together by one of two rules:

* ``"carry"``: every rank stops at the fewest; a rank's minibatches past that point are the first it yields in the
  next epoch, so across epochs every sequence is read exactly once (what is carried past the last epoch a job reads
  is not read). Every minibatch is real data.
* ``"pad"``: every rank yields as many as the most; a rank whose data has ended yields empty minibatches of weight
  zero (no sequences) until then. Every epoch reads every sequence exactly once.

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

from .errors import CNTKIOError, ConfigError
from .minibatch import Minibatch
from .source import MinibatchSource

__all__ = ["RULES", "EpochSteps", "EqualSteps", "EqualStepsReader", "RankStream", "SharedCarry", "check_rule"]

RULES = ("carry", "pad")


def check_rule(rule: str) -> str:
    if rule not in RULES:
        raise ValueError(f"unknown equal-steps rule {rule!r}; one of {', '.join(RULES)} (or None: off)")
    return rule


@dataclass(frozen=True)
class EpochSteps:
    """The equal-steps plan of one epoch, the same on every rank.

    ``own[r]``: the minibatches rank ``r`` reads of this epoch (from its start, or from ``start``: a state every rank
    restored, as after an elastic resume); ``carried_in[r]``: minibatches of earlier epochs it yields first (carry);
    ``sizes[r]``: the samples of each of its own minibatches. Every rank yields :attr:`steps` minibatches.
    """

    rule: str
    epoch: int
    carried_in: tuple[int, ...]
    own: tuple[int, ...]
    start: dict[str, Any] | None = None
    sizes: tuple[np.ndarray, ...] = field(default=(), compare=False, repr=False)

    @property
    def partitions(self) -> int:
        return len(self.own)

    @property
    def available(self) -> tuple[int, ...]:
        return tuple(c + o for c, o in zip(self.carried_in, self.own, strict=True))

    @property
    def steps(self) -> int:
        """Minibatches every rank yields this epoch. An epoch resumed from a merged state (``start``) is completed
        by padding under either rule: what it would carry out lies in the merged state's partitioning, which the next
        epoch's does not know."""
        return min(self.available) if self.rule == "carry" and self.start is None else max(self.available)

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
            "epoch": self.epoch,
            "steps": self.steps,
            "own": list(self.own),
            "own_samples": [int(s.sum()) for s in self.sizes],
            "carried_in": list(self.carried_in),
            "carried_out": list(self.carried_out),
            "carried_out_samples": carried_samples,  # of this epoch's own minibatches
            "padded": list(self.padded),
            "padded_sample_slots": [p * max(budget) for p in self.padded],  # empty steps x the largest minibatch
        }

    def state(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "epoch": self.epoch,
            "carried_in": list(self.carried_in),
            "own": list(self.own),
            "start": self.start,
        }

    @classmethod
    def from_state(cls, value: Any, rule: str, partitions: int, epoch: int) -> EpochSteps:
        """A plan of :meth:`state`, checked against the job (the counts are checked against the data by
        :meth:`EqualSteps.check`)."""
        if not isinstance(value, Mapping) or set(value) != {"rule", "epoch", "carried_in", "own", "start"}:
            raise ConfigError(f"checkpoint: equal_steps must hold rule, epoch, carried_in, own and start: {value!r}")
        if value["rule"] != rule:
            raise ConfigError(f"checkpoint: equal_steps rule {value['rule']!r} but this job uses {rule!r}")
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
        if any(carried_in) and (rule != "carry" or min(carried_in) != 0 or value["start"] is not None):
            raise ConfigError(f"checkpoint: equal_steps carried_in {list(carried_in)} is not a carry rule's")
        start = value["start"]
        if start is not None and not isinstance(start, Mapping):
            raise ConfigError("checkpoint: equal_steps start must be a source state or None")
        return cls(rule, epoch, carried_in, vectors[1], dict(start) if start is not None else None)


class SharedCarry:
    """The carry vector of the latest epoch any process planned, shared with loader worker processes (persistent or
    not) so that the next pass starts from it instead of re-planning every earlier epoch. Holds up to ``CAPACITY``
    ranks (more: each process plans the earlier epochs itself)."""

    CAPACITY = 4096

    def __init__(self) -> None:
        self._shared: Any = None
        self._local: list[int] = [0, 0]
        try:  # [epoch + 1 (0: empty), partitions, carried_in...]; spawn's lock serves forked processes too
            self._shared = multiprocessing.get_context("spawn").Array("q", 2 + self.CAPACITY, lock=True)
        except (OSError, PermissionError):  # no shared memory here: one process only
            self._shared = None

    def get(self, partitions: int) -> tuple[int, tuple[int, ...]] | None:
        """(epoch, carried_in) of the latest epoch recorded for ``partitions`` ranks, or None."""
        if self._shared is None:
            values = self._local
        else:
            with self._shared.get_lock():
                values = list(self._shared[: 2 + min(partitions, self.CAPACITY)])
        if not values[0] or values[1] != partitions or len(values) < 2 + partitions:
            return None
        return values[0] - 1, tuple(values[2 : 2 + partitions])

    def put(self, epoch: int, partitions: int, carried_in: tuple[int, ...]) -> None:
        if partitions > self.CAPACITY:
            return
        values = [epoch + 1, partitions, *carried_in]
        if self._shared is None:
            self._local = values
            return
        with self._shared.get_lock():
            self._shared[: len(values)] = values

    def clear(self) -> None:
        if self._shared is None:
            self._local = [0, 0]
            return
        with self._shared.get_lock():
            self._shared[0] = 0

    def __getstate__(self) -> dict[str, Any]:
        from multiprocessing.context import get_spawning_popen

        if self._shared is not None and get_spawning_popen() is None:  # an ordinary pickle: the numbers only
            with self._shared.get_lock():
                count = 2 + min(int(self._shared[1]), self.CAPACITY)
                return {"_shared": None, "_local": list(self._shared[:count])}
        return self.__dict__


class EqualSteps:
    """Plans the epochs of a job of ``partitions`` ranks reading ``minibatch_size`` samples per step (split across the
    ranks as ``next_minibatch`` does) under ``rule``. Every rank's counts come from one walk of the plan per epoch
    (:meth:`MinibatchSource.partition_minibatches`), kept for the epochs still needed."""

    def __init__(self, rule: str, minibatch_size: int, partitions: int, shared: SharedCarry | None = None):
        self.rule = check_rule(rule)
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
        plan = EpochSteps(
            self.rule, epoch, (0,) * self.partitions, tuple(len(s) for s in sizes), dict(state), tuple(sizes)
        )
        self.record(plan)
        return plan

    def check(self, source: MinibatchSource, value: Any, epoch: int) -> EpochSteps:
        """A plan from a checkpoint state, its own counts checked against the data (a modified or foreign state is
        refused before it can make a rank step a different number of times than the others)."""
        plan = EpochSteps.from_state(value, self.rule, self.partitions, epoch)
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
        plan = EpochSteps(plan.rule, epoch, plan.carried_in, plan.own, plan.start, tuple(sizes))
        self.record(plan)
        return plan

    def _plan(self, source: MinibatchSource, epoch: int, carried_in: tuple[int, ...]) -> EpochSteps:
        sizes = self.sizes(source, epoch)
        return EpochSteps(self.rule, epoch, carried_in, tuple(len(s) for s in sizes), None, tuple(sizes))

    def record(self, plan: EpochSteps) -> None:
        """Remembers what ``plan`` carries into the next epoch (here and for the other processes of the job)."""
        self._carry[plan.epoch + 1] = plan.carried_out
        if self.shared is not None:
            self.shared.put(plan.epoch + 1, self.partitions, plan.carried_out)

    def carried_in(self, source: MinibatchSource, epoch: int) -> tuple[int, ...]:
        """What earlier epochs carry into epoch ``epoch``: from the latest epoch known at or before it (recorded
        here, by another process of the job, or epoch 0), planning the epochs between."""
        if self.rule == "pad":
            return (0,) * self.partitions
        shared = self.shared.get(self.partitions) if self.shared is not None else None
        if shared is not None and shared[0] <= epoch:
            self._carry.setdefault(shared[0], shared[1])
        known = max(e for e in self._carry if e <= epoch)
        carried = self._carry[known]
        for earlier in range(known, epoch):
            carried = self._plan(source, earlier, carried).carried_out
            self._carry[earlier + 1] = carried
        return carried

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
    padding steps (rule ``"pad"``) yield an empty :class:`~cntkio.Minibatch` (falsy: no streams, no sequences).

    Example::

        reader = EqualStepsReader(source, 1024, world, rank, rule="carry")
        for epoch in range(10):
            for minibatch in reader:        # the same count on every rank
                step(minibatch)
            print(reader.last_plan.report())
    """

    def __init__(
        self, source: MinibatchSource, minibatch_size: int, partitions: int, rank: int, rule: str = "carry"
    ) -> None:
        if source.is_infinite():
            raise ValueError("equal steps need epochs: set max_samples or max_sweeps on the source")
        if not 0 <= rank < partitions:
            raise ValueError(f"invalid partition {rank} of {partitions}")
        self.source, self.rank = source, int(rank)
        self.planner = EqualSteps(rule, minibatch_size, partitions)
        self.epoch = source.current_epoch
        self.last_plan: EpochSteps | None = None
        self._stream: RankStream | None = None

    def __iter__(self) -> Iterator[Minibatch]:
        stream = self._stream
        if stream is None or stream.done:
            plan = self.planner.plan(self.source, self.epoch)
            self.planner.locate(self.source, plan, self.rank)
            stream = self._stream = RankStream(self.source, self.planner, plan, self.rank)
        self.last_plan = stream.plan
        while not stream.done:
            if stream.padding:
                stream.pad()
                yield Minibatch()
            else:
                minibatch = stream.read()
                assert minibatch is not None
                yield minibatch
        self.epoch = stream.plan.epoch + 1

    def get_state(self) -> dict[str, Any]:
        """JSON-able: the position after the last minibatch, with the epoch's plan."""
        stream, epoch = self._stream, self.epoch
        if stream is not None and stream.done:  # an epoch read to its end: the next one
            epoch, stream = stream.plan.epoch + 1, None
        return {
            "source": self.source.get_checkpoint_state(),
            "epoch": epoch if stream is None else stream.plan.epoch,
            "step": 0 if stream is None else stream.index,
            "equal_steps": None if stream is None else stream.plan.state(),
        }

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Continues right after the minibatch ``state`` was taken at (same ranks, rule and minibatch size)."""
        self.source.restore_from_checkpoint(dict(state["source"]))
        self.epoch = int(state["epoch"])
        if state.get("equal_steps") is None:
            self._stream = None
            return
        plan = self.planner.check(self.source, state["equal_steps"], self.epoch)
        self._stream = RankStream(self.source, self.planner, plan, self.rank, int(state["step"]))
