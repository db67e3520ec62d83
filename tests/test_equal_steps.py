"""Equal steps (cntkio.equal_steps): every rank yields the same number of minibatches per epoch, by the rule "carry"
(all stop at the fewest, the rest read first in the next epoch) or "pad" (all go on to the most with empty batches of
weight 0); gloo jobs of 3 and 4 ranks stepping together through several epochs; plans from the index alone."""

from __future__ import annotations

import functools
import itertools
import json
import socket
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).parent))
import torch

import torch_dist_worker as data_helpers
from cntkio import ConfigError, CTFDeserializer, MinibatchSource, StreamDef, StreamDefs
from cntkio.equal_steps import EpochSteps, EqualSteps, EqualStepsReader, SharedCarry
from cntkio.torch import MinibatchDataset

WORKER = Path(__file__).parent / "equal_steps_worker.py"
MINIBATCH = 16
SEQUENCES = 300


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("equal_steps") / "uneven.ctf"
    data_helpers.write_ctf(path, SEQUENCES, max_length=9)  # 500-byte chunks of 1..9-sample sequences: uneven shares
    return str(path)


def natural_streams(path: str, ranks: int, epochs: int, minibatch: int = MINIBATCH) -> list[list[list[Any]]]:
    """Per rank, per epoch, the keys of each minibatch the rank reads of its partition without equal steps."""
    streams = []
    for rank in range(ranks):
        per_epoch = []
        for epoch in range(epochs):
            with data_helpers.make_source(path) as source:
                source.start_epoch(epoch)
                minibatches = source.iter_minibatches(minibatch, num_data_partitions=ranks, partition_index=rank)
                per_epoch.append([[key for _, key in mb.sequence_keys] for mb in minibatches])
        streams.append(per_epoch)
    return streams


def launch(directory: Path, path: str, world: int, **options: Any) -> list[dict[str, Any]]:
    directory.mkdir()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    processes, outs = [], []
    for rank in range(world):
        out = directory / f"rank{rank}.json"
        command = [sys.executable, str(WORKER), "--data", path, "--port", str(port), "--rank", str(rank)]
        command += ["--world", str(world), "--out", str(out)]
        for name, value in options.items():
            command += [f"--{name.replace('_', '-')}", str(value)]
        log = (directory / f"rank{rank}.log").open("wb")
        processes.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT))
        outs.append(out)
    try:
        codes = [process.wait(timeout=600) for process in processes]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    logs = "\n".join((directory / f"rank{rank}.log").read_text()[-3000:] for rank in range(world))
    assert codes == [0] * world, logs
    return [json.loads(out.read_text()) for out in outs]


def test_the_ranks_shares_are_uneven(data: str) -> None:
    """The premise: without equal steps, 3 and 4 ranks read different numbers of minibatches per epoch (ranks
    stepping together would wait forever at the end of it)."""
    with data_helpers.make_source(data) as source:
        for ranks in (3, 4):
            counts = [len(sizes) for sizes in source.partition_minibatches(MINIBATCH, ranks, epoch=0)]
            assert len(set(counts)) > 1, counts


@pytest.mark.parametrize(("world", "rule", "num_workers"), [(3, "auto", 2), (4, "carry", 0), (4, "pad", 2)])
def test_gloo_ranks_step_together_and_read_exactly_once(
    data: str, tmp_path: Path, world: int, rule: str, num_workers: int
) -> None:
    epochs = 3
    ranks = launch(tmp_path / "job", data, world, rule=rule, epochs=epochs, num_workers=num_workers)
    natural = natural_streams(data, world, epochs)
    for epoch in range(epochs):
        steps = {rank["epochs"][epoch]["steps"] for rank in ranks}
        assert len(steps) == 1, f"epoch {epoch}: steps {steps}"  # no hang: every rank took every collective step
    if rule == "pad":
        for epoch in range(epochs):
            keys = [key for rank in ranks for key in rank["epochs"][epoch]["keys"]]
            assert sorted(Counter(keys).items()) == [(key, 1) for key in range(SEQUENCES)]  # each epoch exactly once
            for rank, stream in zip(ranks, natural, strict=True):
                weights = rank["epochs"][epoch]["weights"]
                own = len(stream[epoch])
                assert weights == [1.0] * own + [0.0] * (len(weights) - own)  # padding after the data, weight 0
        return
    for rank, stream in zip(ranks, natural, strict=True):  # carry: each rank's stream runs on across epochs, in order
        delivered = [key for epoch in rank["epochs"] for key in epoch["keys"]]
        whole = [key for epoch in stream for minibatch in epoch for key in minibatch]
        assert delivered == whole[: len(delivered)]
        carried = rank["epochs"][-1]["plan"]
        left = sum(len(minibatch) for epoch in stream for minibatch in epoch) - len(delivered)
        last_minibatches = [minibatch for epoch in stream for minibatch in epoch]
        available = carried["carried_in"][rank["rank"]] + carried["own"][rank["rank"]]
        counted = max(available - rank["epochs"][-1]["steps"], 0)
        assert left == sum(len(mb) for mb in last_minibatches[len(last_minibatches) - counted :])
        for epoch in rank["epochs"]:  # data, then (a rank more than max_carry short) padding of weight 0
            plan, weights = epoch["plan"], epoch["weights"]
            data_steps = min(plan["carried_in"][rank["rank"]] + plan["own"][rank["rank"]], epoch["steps"])
            assert weights == [1.0] * data_steps + [0.0] * (epoch["steps"] - data_steps)
    assert any(rank["epochs"][0]["plan"]["own"] != rank["epochs"][0]["plan"]["own"][::-1] for rank in ranks)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    minibatch=st.integers(3, 60),
    ranks=st.integers(1, 5),
    epoch=st.integers(0, 2),
    options=st.sampled_from(
        [{}, {"randomize": False}, {"frame_mode": True}, {"max_sweeps": 2}, {"max_samples": 500},
         {"bucket_by_length": 20}, {"truncation_length": 4}]
    ),
)  # fmt: skip
def test_the_plan_counts_what_each_rank_reads(
    data: str, minibatch: int, ranks: int, epoch: int, options: dict[str, Any]
) -> None:
    """The plan (vectorised for epochs of whole sweeps, else the skip walk) counts what each rank reads."""
    if options.get("truncation_length") and minibatch < 4 * ranks:
        minibatch = 4 * ranks
    make = functools.partial(plain_source, data, **options)
    with make() as source:
        source.next_minibatch(7)  # the source's own position is kept
        before = source.get_checkpoint_state()
        planned = source.partition_minibatches(minibatch, ranks, epoch=epoch)
        assert source.get_checkpoint_state() == before
    for rank in range(ranks):
        with make() as reader:
            reader.start_epoch(epoch)
            minibatches = reader.iter_minibatches(minibatch, num_data_partitions=ranks, partition_index=rank)
            sizes = [mb["x"].num_samples for mb in minibatches]
        if options.get("truncation_length"):  # BPTT: counted, with the budget as size
            assert len(sizes) == len(planned[rank])
        else:
            assert sizes == planned[rank].tolist()


def plain_source(path: str, **options: Any) -> MinibatchSource:
    """A source over the test file with any MinibatchSource options (one sweep per epoch unless told)."""
    streams = StreamDefs(x=StreamDef(field="x", shape=3), s=StreamDef(field="s", shape=50, is_sparse=True))
    if "max_samples" not in options:
        options.setdefault("max_sweeps", 1)
    return MinibatchSource(CTFDeserializer(path, streams, chunk_size_in_bytes=500),
                           randomization_window_in_chunks=3, randomization_seed=7, **options)  # fmt: skip


def test_the_plan_from_a_merged_state_counts_what_each_new_rank_reads(data: str) -> None:
    """A walk from a state with layers (an elastic resume) counts every rank alike (the walk of one rank used to
    consume the layers the next rank's walk starts from)."""
    states = []
    for rank, reads in enumerate([2, 3, 5]):
        with data_helpers.make_source(data) as source:
            for _ in range(reads):
                source.next_minibatch(MINIBATCH, num_data_partitions=3, partition_index=rank)
            states.append(source.get_checkpoint_state())
    merged = MinibatchSource.merge_checkpoints(states)
    with data_helpers.make_source(data) as source:
        planned = [len(sizes) for sizes in source.partition_minibatches(MINIBATCH, 2, state=merged)]
    read = []
    for rank in range(2):
        with data_helpers.make_source(data) as source:
            source.restore_from_checkpoint(merged)
            read.append(sum(1 for _ in source.iter_minibatches(MINIBATCH, num_data_partitions=2, partition_index=rank)))
    assert planned == read


def run_ranks(path: str, ranks: int, rule: str, epochs: int) -> list[list[list[Any]]]:
    """Every rank's batches (keys) per epoch through MinibatchDataset with explicit partitions, in this process."""
    out = []
    for rank in range(ranks):
        dataset = MinibatchDataset(functools.partial(data_helpers.make_source, path), MINIBATCH,
                                   num_partitions=ranks, partition_index=rank, equal_steps=rule)  # fmt: skip
        out.append([[[key for _, key in batch.keys] for batch in dataset] for _ in range(epochs)])
    return out


@pytest.mark.parametrize("rule", ["carry", "pad"])
def test_a_resumed_rank_continues_its_plan_exactly(data: str, rule: str) -> None:
    whole = run_ranks(data, 3, rule, 2)[2]
    dataset = MinibatchDataset(functools.partial(data_helpers.make_source, data), MINIBATCH,
                               num_partitions=3, partition_index=2, equal_steps=rule)  # fmt: skip
    first = [[key for _, key in batch.keys] for batch in dataset]
    iterator = iter(dataset)
    head = [next(iterator) for _ in range(5)]
    state = json.loads(json.dumps(head[-1].state))
    del iterator
    resumed = MinibatchDataset(functools.partial(data_helpers.make_source, data), MINIBATCH,
                               num_partitions=3, partition_index=2, equal_steps=rule)  # fmt: skip
    resumed.load_state_dict(state)
    rest = [[key for _, key in batch.keys] for batch in resumed]
    assert [first, [[key for _, key in batch.keys] for batch in head] + rest] == whole


def test_a_state_whose_plan_was_changed_is_refused(data: str) -> None:
    dataset = MinibatchDataset(functools.partial(data_helpers.make_source, data), MINIBATCH,
                               num_partitions=3, partition_index=1, equal_steps="carry")  # fmt: skip
    state = next(iter(dataset)).state
    state["equal_steps"]["own"][0] += 1
    dataset.load_state_dict(state)
    with pytest.raises(ConfigError, match="equal_steps counts"):
        next(iter(dataset))
    own = next(iter(MinibatchDataset(functools.partial(data_helpers.make_source, data), MINIBATCH,
                                     num_partitions=3, partition_index=1, equal_steps=None))).state  # fmt: skip
    dataset.load_state_dict(own)
    with pytest.raises(ConfigError, match="without an equal-steps plan"):
        next(iter(dataset))


def test_padding_batches_are_empty_and_weigh_nothing(data: str) -> None:
    with data_helpers.make_source(data) as source:
        counts = [len(sizes) for sizes in source.partition_minibatches(MINIBATCH, 3, epoch=0)]
    rank = int(np.argmin(counts))
    dataset = MinibatchDataset(functools.partial(data_helpers.make_source, data), MINIBATCH, num_partitions=3,
                               partition_index=rank, equal_steps="pad", layout={"s": "padded"})  # fmt: skip
    batches = list(dataset)
    assert len(batches) == max(counts)
    padding = batches[counts[rank] :]
    assert padding and all(b.weight == 0.0 and b.keys == [] for b in padding)
    assert all(b.weight == 1.0 and b.keys for b in batches[: counts[rank]])
    assert padding[0]["x"].shape[0] == 0 and padding[0]["s"].shape[0] == 0 and padding[0].masks["s"].shape[0] == 0
    for layout in ("packed", "nested"):  # layouts that cannot be empty: one zero sample, weight 0, no keys
        dataset = MinibatchDataset(functools.partial(data_helpers.make_source, data), MINIBATCH, num_partitions=3,
                                   partition_index=rank, equal_steps="pad", layout=layout)  # fmt: skip
        last = list(dataset)[-1]
        assert last.weight == 0.0 and last.keys == [] and last.lengths["x"].tolist() == [1]
        assert float(torch.as_tensor(last["x"].data if layout == "packed" else last["x"].values()).abs().sum()) == 0


def test_the_reader_for_other_frameworks_shares_the_rule(data: str) -> None:
    steps = []
    for rank in range(4):
        reader = EqualStepsReader(data_helpers.make_source(data), MINIBATCH, 4, rank, rule="pad")
        steps.append([sum(1 for _ in reader) for _ in range(2)])
        plan = reader.last_plan
        assert plan is not None and plan.report()["padded"][rank] == plan.steps - plan.own[rank]
        stats = reader.source.stats()  # the plan is reported in stats()
        assert stats.equal_steps == plan.report() and stats.as_dict()["equal_steps"] == plan.report()
        assert f"equal steps (pad), epoch 1: {plan.steps} steps on every rank" in str(stats)
    assert len({tuple(s) for s in steps}) == 1
    planner = EqualSteps("carry", MINIBATCH, 4)
    with data_helpers.make_source(data) as source:
        plans = [planner.plan(source, epoch) for epoch in range(3)]
    for earlier, later in itertools.pairwise(plans):
        assert later.carried_in == earlier.carried_out and min(later.carried_out) == 0
        assert max(later.carried_out) <= planner.max_carry


def test_jax_batches_carry_the_keys_of_their_rows(data: str) -> None:
    jax = pytest.importorskip("jax")
    from cntkio.jax import JaxIterator

    batches = JaxIterator(functools.partial(data_helpers.make_source, data), MINIBATCH, partition=(1, 0))
    total = jax.jit(lambda batch: batch["x"].sum() + batch["mask"]["x"].sum())
    keys = []
    for batch in batches:
        assert batch.sequence_keys == batches.last_keys and len(batch.sequence_keys) <= batch["x"].shape[0]
        assert int(batch["lengths"]["x"].astype(bool).sum()) == len(batch.sequence_keys)
        assert not any(isinstance(leaf, (list, str)) for leaf in jax.tree_util.tree_leaves(batch))  # keys stay out
        total(batch)
        keys += [key for _, key in batch.sequence_keys]
    assert sorted(keys) == list(range(SEQUENCES))


@pytest.mark.parametrize("rule", ["carry", "pad"])
def test_jax_processes_share_the_rule(data: str, rule: str) -> None:
    pytest.importorskip("jax")
    from cntkio.jax import JaxIterator

    ranks, epochs = 3, 2
    natural = natural_streams(data, ranks, epochs)
    streams = []
    for rank in range(ranks):
        batches = JaxIterator(functools.partial(data_helpers.make_source, data), MINIBATCH,
                              partition=(ranks, rank), equal_steps=rule)  # fmt: skip
        per_epoch = []
        for _ in range(epochs):
            per_epoch.append([[key for _, key in batch.sequence_keys] for batch in batches])
        streams.append(per_epoch)
    for epoch in range(epochs):
        assert len({len(stream[epoch]) for stream in streams}) == 1  # the same steps on every process
    for stream, own in zip(streams, natural, strict=True):
        if rule == "pad":  # each epoch's own minibatches, then empty steps
            assert all(s[: len(o)] == o and not any(s[len(o) :]) for s, o in zip(stream, own, strict=True))
        else:  # the rank's stream runs on across epochs
            delivered = [mb for epoch in stream for mb in epoch if mb]  # (padding past max_carry: no rows)
            assert delivered == [mb for epoch in own for mb in epoch][: len(delivered)]


@pytest.mark.parametrize("stop", [4, 0])
def test_jax_and_the_plain_reader_resume_exactly_under_equal_steps(data: str, stop: int) -> None:
    """A state taken mid-epoch (or at an epoch's end) resumes the rank's steps exactly, the carried ones too."""
    pytest.importorskip("jax")
    from cntkio.jax import JaxIterator

    def make(kind: str) -> Any:
        if kind == "jax":
            return JaxIterator(functools.partial(data_helpers.make_source, data), MINIBATCH, partition=(3, 1),
                               equal_steps="carry")  # fmt: skip
        return EqualStepsReader(data_helpers.make_source(data), MINIBATCH, 3, 1, rule="carry")

    def keys(batch: Any) -> list[Any]:
        return [key for _, key in batch.sequence_keys]

    for kind in ("jax", "reader"):
        reference = make(kind)
        whole = [keys(b) for _ in range(3) for b in reference]  # epochs 0, 1, 2
        reader = make(kind)
        head = [keys(b) for b in reader]  # epoch 0
        iterator = iter(reader)
        head += [keys(next(iterator)) for _ in range(stop)]  # and the first steps of epoch 1
        resumed = make(kind)
        resumed.set_state(json.loads(json.dumps(reader.get_state())))
        rest = [keys(b) for _ in range(2) for b in resumed]  # the rest of epoch 1, then epoch 2
        assert head + rest == whole, kind


def test_an_elastic_resume_under_carry_keeps_exactly_once_across_epochs(data: str) -> None:
    """3 ranks stop mid-epoch 1 (some still in what epoch 0 carried over); 2 ranks resume from the merged state: the
    resumed epoch is completed by padding, the next carries again, and no sequence of a sweep is read twice."""
    from cntkio.torch import merge_states

    def dataset(ranks: int, rank: int) -> MinibatchDataset:
        return MinibatchDataset(functools.partial(data_helpers.make_source, data), MINIBATCH,
                                num_partitions=ranks, partition_index=rank, equal_steps="carry")  # fmt: skip

    read: Counter[Any] = Counter()
    states = []
    for rank in range(3):
        old = dataset(3, rank)
        read.update(key for batch in old for _, key in batch.keys)  # epoch 0
        iterator = iter(old)
        for _ in range(20):  # into epoch 1
            batch = next(iterator)
            read.update(key for _, key in batch.keys)
        states.append(batch.state)
    merged = json.loads(json.dumps(merge_states(states)))
    steps, carried = [], []
    for rank in range(2):
        new = dataset(2, rank)
        new.load_state_dict(merged)
        epochs = [[batch for batch in new] for _ in range(2)]  # the rest of epoch 1, then epoch 2
        steps.append([len(epoch) for epoch in epochs])
        read.update(key for epoch in epochs for batch in epoch for _, key in batch.keys)
        carried.append(epochs[1][-1].state["equal_steps"])
    assert steps[0] == steps[1]
    plan = carried[0]
    assert plan["start"] is None and plan["carried_in"] == [0, 0]  # the resumed epoch carried nothing out
    assert max(read.values()) <= 3 and min(read.values()) >= 2  # (epoch 2's carried rest is not read)
    missing = 3 * SEQUENCES - sum(read.values())
    with data_helpers.make_source(data) as source:
        sizes = source.partition_minibatches(MINIBATCH, 2, epoch=2)
    left = [len(s) - steps[0][1] for s in sizes]
    assert missing == sum(len(k) for rank, count in enumerate(left)
                          for k in natural_streams(data, 2, 3)[rank][2][len(sizes[rank]) - count:])  # fmt: skip


def test_explain_shows_what_each_rule_does(data: str) -> None:
    from cntkio._src.cli.explain import explain

    with data_helpers.make_source(data) as source:
        plan = explain(source, ranks=3, minibatch_size=MINIBATCH)
    counts = [s["minibatches"] for s in plan["shares"] if s["sweep"] == 0 and s["worker"] is None]
    carry, pad = plan["equal_steps"]["carry"], plan["equal_steps"]["pad"]
    assert carry["own"] == pad["own"] == counts  # the same count as explain's own walk
    assert carry["steps"] == max(min(counts), max(counts) - carry["max_carry"]) and pad["steps"] == max(counts)


def test_spawned_loader_workers_carry_across_passes(data: str) -> None:
    """A loader worker started by spawn (new each pass) learns what the previous pass carried from the shared record
    and yields the rank's stream as one process reads it."""
    from torch.utils.data import DataLoader

    dataset = MinibatchDataset(functools.partial(data_helpers.make_source, data), MINIBATCH,
                               num_partitions=3, partition_index=2, equal_steps="carry")  # fmt: skip
    loader = DataLoader(dataset, batch_size=None, num_workers=1, multiprocessing_context="spawn")
    passes = [[[key for _, key in batch.keys] for batch in loader] for _ in range(2)]
    assert passes == run_ranks(data, 3, "carry", 2)[2]
    assert dataset._carry.get(EqualSteps("carry", MINIBATCH, 3)) is not None  # (the record the workers shared)


@pytest.mark.parametrize("kind", ["jax", "reader"])
def test_jax_and_the_reader_resume_a_merged_state_without_rereading(data: str, kind: str) -> None:
    """2 ranks read 5 steps each; their merged state resumes 3 ranks: the epoch is read exactly once (the restored
    position used to be thrown away by the next iteration's plan, which started the epoch over: 80 keys read twice).
    A rank's own state without a plan (taken with equal steps off) is refused."""
    if kind == "jax":
        pytest.importorskip("jax")
    from cntkio.jax import JaxIterator

    def make(ranks: int, rank: int, rule: str | None = "pad") -> Any:
        if kind == "jax":
            return JaxIterator(functools.partial(data_helpers.make_source, data), MINIBATCH,
                               partition=(ranks, rank), equal_steps=rule)  # fmt: skip
        return EqualStepsReader(data_helpers.make_source(data), MINIBATCH, ranks, rank, rule=rule or "pad")

    read: Counter[Any] = Counter()
    states = []
    for rank in range(2):
        old = make(2, rank)
        iterator = iter(old)
        for _ in range(5):
            read.update(key for _, key in next(iterator).sequence_keys)
        states.append(old.get_state()["source"])
    merged = json.loads(json.dumps(MinibatchSource.merge_checkpoints(states)))
    steps = set()
    for rank in range(3):
        new = make(3, rank)
        new.set_state({"source": merged} if kind == "jax" else {"source": merged, "epoch": 0})
        batches = [[key for _, key in batch.sequence_keys] for batch in new]
        steps.add(len(batches))
        read.update(key for keys in batches for key in keys)
    assert len(steps) == 1
    assert sorted(read.items()) == [(key, 1) for key in range(SEQUENCES)]
    if kind == "jax":  # (the reader has no "off")
        own = make(2, 0, None)
        next(iter(own))
        with pytest.raises(ConfigError, match="without an equal-steps plan"):
            make(2, 0).set_state(own.get_state())


@settings(max_examples=40, deadline=None)
@given(
    counts=st.integers(1, 6).flatmap(
        lambda ranks: st.lists(st.lists(st.integers(0, 40), min_size=ranks, max_size=ranks), min_size=1, max_size=30)
    ),
    max_carry=st.integers(0, 10),
)
def test_carry_keeps_every_backlog_within_max_carry(counts: list[list[int]], max_carry: int) -> None:
    """Over random per-rank counts for many epochs: equal steps, no rank more than max_carry minibatches behind
    (the backlog used to grow by the count difference every epoch), and each rank's stream read once, in order."""
    ranks = len(counts[0])
    backlog: list[list[tuple[int, int]]] = [[] for _ in range(ranks)]  # per rank, (epoch, minibatch) not yet read
    delivered: list[list[tuple[int, int]]] = [[] for _ in range(ranks)]
    carried_in = (0,) * ranks
    for epoch, own in enumerate(counts):
        plan = EpochSteps("carry", epoch, carried_in, tuple(own), max_carry=max_carry)
        for rank in range(ranks):
            backlog[rank] += [(epoch, i) for i in range(own[rank])]
            data_steps = plan.data_steps(rank)
            assert data_steps + plan.padded[rank] == plan.steps
            delivered[rank] += backlog[rank][:data_steps]
            del backlog[rank][:data_steps]
            assert len(backlog[rank]) == plan.carried_out[rank] <= max_carry
        assert max_carry or not any(plan.carried_out)  # max_carry=0 is "pad"
        carried_in = plan.carried_out
    for rank in range(ranks):
        assert delivered[rank] + backlog[rank] == [(e, i) for e, own in enumerate(counts) for i in range(own[rank])]


def test_carry_bounds_the_backlog_of_a_rank_that_always_gets_more(tmp_path: Path) -> None:
    """The reviewer's case: in order (randomize=False) 3 ranks get (31, 32, 32) minibatches every epoch; the
    backlog stays within max_carry over 40 epochs (it grew by one per epoch), the short rank padding instead; the
    reader yields each rank's stream in order, padding steps empty."""
    path = tmp_path / "even.ctf"
    path.write_text("".join(f"{k} |x {k} {k}\n" for k in range(2000)))

    def make() -> MinibatchSource:
        streams = StreamDefs(x=StreamDef(field="x", shape=2))
        return MinibatchSource(CTFDeserializer(str(path), streams, chunk_size_in_bytes=3000), randomize=False,
                               max_samples=2000)  # fmt: skip

    with make() as source:
        planner = EqualSteps("carry", 64, 3, max_carry=2)
        plans = [planner.plan(source, epoch) for epoch in range(40)]
    assert len({p.own for p in plans}) == 1 and len(set(plans[0].own)) > 1  # the same uneven counts every epoch
    assert max(max(p.carried_out) for p in plans) <= 2 and any(any(p.padded) for p in plans)
    with make() as source:
        sizes = source.partition_minibatches(64, 3, epoch=0)
    for rank in range(3):
        reader = EqualStepsReader(make(), 64, 3, rank, rule="carry", max_carry=2)
        epochs = [[batch.sequence_keys for batch in reader] for _ in range(6)]
        assert [len(e) for e in epochs] == [p.steps for p in plans[:6]]
        data = [keys for epoch in epochs for keys in epoch if keys]
        with make() as source:  # the rank's own stream, epoch after epoch
            natural = []
            for epoch in range(6):
                source.start_epoch(epoch)
                natural += [mb.sequence_keys for mb in source.iter_minibatches(64, num_data_partitions=3,
                                                                               partition_index=rank)]  # fmt: skip
        assert data == natural[: len(data)] and len(natural) - len(data) == plans[5].carried_out[rank]
        assert reader.source.stats().equal_steps == reader.last_plan.report()  # type: ignore[union-attr]
    assert len(sizes) == 3


def test_a_shared_carry_record_of_another_planning_is_not_used(data: str) -> None:
    """The record loader workers share names the planning it was made under: a planner of another minibatch size
    (or max_carry) plans its own carry instead of starting from the old one's vector."""
    shared = SharedCarry()
    with data_helpers.make_source(data) as source:
        EqualSteps("carry", MINIBATCH, 3, shared, max_carry=3).plan(source, 0)
        for size, max_carry in ((MINIBATCH + 8, 3), (MINIBATCH, 1)):
            fresh = EqualSteps("carry", size, 3, max_carry=max_carry).plan(source, 1)
            assert EqualSteps("carry", size, 3, shared, max_carry=max_carry).plan(source, 1) == fresh
        again = EqualSteps("carry", MINIBATCH, 3, shared, max_carry=3)
        assert shared.get(again) is None or shared.get(again) == (2, again.plan(source, 1).carried_out)


def test_the_readmes_padding_loss_keeps_gradients_finite(data: str) -> None:
    """A padding batch (no rows, weight 0): the mean of an empty loss is NaN, and NaN * 0 is NaN — here in the
    gradient of a learned loss scale, which DDP's all-reduce would spread to every rank; the README's recipe gives a
    zero loss still connected to the parameters, so backward runs (DDP's collectives match) and every gradient is
    finite and zero."""
    with data_helpers.make_source(data) as source:
        counts = [len(sizes) for sizes in source.partition_minibatches(MINIBATCH, 3, epoch=0)]
    rank = int(np.argmin(counts))
    dataset = MinibatchDataset(functools.partial(data_helpers.make_source, data), MINIBATCH, num_partitions=3,
                               partition_index=rank, equal_steps="pad", layout={"x": "padded"})  # fmt: skip
    batches = list(dataset)
    padding, real = batches[-1], batches[0]
    assert padding.weight == 0.0 and real.weight == 1.0
    torch.manual_seed(0)
    model = torch.nn.Linear(data_helpers.DENSE_DIM, 1)
    log_scale = torch.nn.Parameter(torch.zeros(()))  # a learned loss weighting (uncertainty weighting)
    parameters = [*model.parameters(), log_scale]

    def gradients(batch: Any, recipe: bool) -> list[torch.Tensor]:
        for parameter in parameters:
            parameter.grad = None
        x, mask = batch["x"], batch.masks["x"].bool()  # [B, T, 3], [B, T]
        per_sample = model(x).squeeze(-1).pow(2) * mask  # [B, T]
        # the README's recipe, or the mean of the rows
        data_loss = per_sample.sum() / max(int(mask.sum()), 1) if recipe else per_sample[mask].mean()
        loss = (data_loss * torch.exp(-log_scale) + log_scale) * batch.weight
        loss.backward()
        return [p.grad.detach().clone() for p in parameters if p.grad is not None]

    naive = gradients(padding, recipe=False)
    assert any(not torch.isfinite(g).all() for g in naive)  # the hazard
    grads = gradients(padding, recipe=True)
    assert len(grads) == 3 and all(torch.isfinite(g).all() and not g.any() for g in grads)
    assert any(g.any() for g in gradients(real, recipe=True))  # a data batch does move the model
