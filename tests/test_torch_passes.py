"""DataLoader passes over one dataset: each pass reads one epoch — the same one in every loader worker — and every
sequence of it exactly once, whatever ran before it (a look in the main process, loaders with other numbers of
workers, persistent workers, ``set_epoch``, a pass left early, torch reseeded to the same seed)."""

from __future__ import annotations

import functools
import multiprocessing
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from torch.utils.data import DataLoader  # noqa: E402

import cntkio._src.integrations.torch as torch_integration  # noqa: E402
import torch_dist_worker as worker  # noqa: E402
from cntkio._src.integrations.torch import MinibatchDataset, TorchMinibatch, _begin_pass, _WorkerPass  # noqa: E402

SEQUENCES = 400


@pytest.fixture(scope="module")
def path(tmp_path_factory: pytest.TempPathFactory) -> str:
    file = tmp_path_factory.mktemp("passes") / "seq400.ctf"
    worker.write_ctf(file, SEQUENCES)
    return str(file)


@pytest.fixture(scope="module")
def epochs(path: str) -> dict[int, list[list[int]]]:
    """The keys of each minibatch of epochs 0..6, read in one process."""
    dataset = MinibatchDataset(functools.partial(worker.make_source, path), worker.MINIBATCH)
    streams = {}
    for epoch in range(7):
        dataset.set_epoch(epoch)
        streams[epoch] = keys_of(list(DataLoader(dataset, batch_size=None)))
    assert len({str(keys) for keys in streams.values()}) == 7  # each epoch in its own order
    return streams


def keys_of(batches: list[TorchMinibatch]) -> list[list[int]]:
    return [[key for _, key in batch.keys] for batch in batches]


def check_pass(batches: list[TorchMinibatch], epochs: dict[int, list[list[int]]]) -> int:
    """The epoch a whole pass read: every batch says the same one, every sequence came once, in that epoch's order."""
    read = {int(batch.state["epoch"]) for batch in batches}
    assert len(read) == 1, f"the workers of one pass read epochs {sorted(read)}"
    counts = Counter(key for keys in keys_of(batches) for key in keys)
    assert sorted(counts) == list(range(SEQUENCES)) and set(counts.values()) == {1}
    epoch = read.pop()
    assert keys_of(batches) == epochs[epoch]
    return epoch


def dataset_of(path: str) -> MinibatchDataset:
    return MinibatchDataset(functools.partial(worker.make_source, path), worker.MINIBATCH)


def test_a_look_in_the_main_process_then_a_loader_pass(path: str, epochs: dict[int, list[list[int]]]) -> None:
    dataset = dataset_of(path)
    assert int(next(iter(dataset)).state["epoch"]) == 0
    assert check_pass(list(DataLoader(dataset, batch_size=None, num_workers=2)), epochs) == 1  # (before: 299 of 400)


def test_loaders_with_other_worker_counts_take_turns(path: str, epochs: dict[int, list[list[int]]]) -> None:
    dataset = dataset_of(path)
    read = [check_pass(list(DataLoader(dataset, batch_size=None, num_workers=workers)), epochs)
            for workers in (2, 3, 0, 1, 2)]  # fmt: skip
    assert read == [0, 1, 2, 3, 4]


def test_persistent_workers_read_the_next_epoch_each_pass(path: str, epochs: dict[int, list[list[int]]]) -> None:
    dataset = dataset_of(path)
    data = DataLoader(dataset, batch_size=None, num_workers=2, persistent_workers=True)
    read = [check_pass(list(data), epochs)]
    assert int(next(iter(dataset)).state["epoch"]) == 1  # a look in the main process between two passes
    read += [check_pass(list(data), epochs) for _ in range(2)]
    assert int(next(iter(data)).state["epoch"]) == 4  # a pass left after one batch
    read.append(check_pass(list(data), epochs))
    assert read == [0, 2, 3, 5]


def test_set_epoch_before_each_pass(path: str, epochs: dict[int, list[list[int]]]) -> None:
    dataset = dataset_of(path)
    data = DataLoader(dataset, batch_size=None, num_workers=2, persistent_workers=True)
    for epoch in (4, 1, 5):
        dataset.set_epoch(epoch)
        assert check_pass(list(data), epochs) == epoch
    assert check_pass(list(DataLoader(dataset, batch_size=None, num_workers=3)), epochs) == 6  # (the one after)


def test_a_pass_left_early_and_passes_with_one_seed(path: str, epochs: dict[int, list[list[int]]]) -> None:
    """The same torch seed before each pass gives their workers the same base seed; a pass left after one batch
    still takes its epoch."""
    dataset = dataset_of(path)
    for _ in range(2):
        torch.manual_seed(0)
        next(iter(DataLoader(dataset, batch_size=None, num_workers=2)))
    torch.manual_seed(0)
    assert check_pass(list(DataLoader(dataset, batch_size=None, num_workers=2)), epochs) == 2


def _worker_1_late(worker_id: int) -> None:
    if worker_id == 1:
        time.sleep(2.0)  # (it begins its iteration after this)


def test_a_worker_that_begins_after_its_pass_was_left(path: str, epochs: dict[int, list[list[int]]]) -> None:
    """A pass left after one batch while its worker 1 had not begun yet: that worker begins after worker 0 is gone,
    reads its pass's epoch, and the next pass with the same seed the next epoch (before: worker 1 took a new epoch,
    so the next pass read epoch 2 — one skipped)."""
    dataset = dataset_of(path)
    torch.manual_seed(0)
    next(iter(DataLoader(dataset, batch_size=None, num_workers=2, worker_init_fn=_worker_1_late)))
    torch.manual_seed(0)
    assert check_pass(list(DataLoader(dataset, batch_size=None, num_workers=2)), epochs) == 1


def test_spawned_persistent_workers(path: str, epochs: dict[int, list[list[int]]]) -> None:
    dataset = dataset_of(path)
    data = DataLoader(dataset, batch_size=None, num_workers=2, persistent_workers=True,
                      multiprocessing_context="spawn")  # fmt: skip
    assert [check_pass(list(data), epochs) for _ in range(2)] == [0, 1]


def _each_worker_its_own_epoch(table: dict[str, Any], worker: _WorkerPass | None) -> int:
    return 0 if worker is None else worker.worker


def test_workers_that_read_different_epochs_raise(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """However the workers of a pass came to disagree, the main process raises on their batches."""
    monkeypatch.setattr(torch_integration, "_begin_pass", _each_worker_its_own_epoch)  # (inherited by forked workers)
    data = DataLoader(dataset_of(path), batch_size=None, num_workers=2)
    with pytest.raises(
        RuntimeError, match=r"the workers of one DataLoader pass .* read different epochs: [01] .* and [01]"
    ):
        list(data)


# --- the table of passes -------------------------------------------------------------------------------------


@dataclass
class _Pass:
    workers: int  # 0: an iteration in the main process
    seed: int
    group: int  # the persistent workers it runs on (>= 0), or new workers (-1)
    number: int  # passes of its persistent workers before it
    identity: int  # what multiprocessing numbered its first worker process (each group's, or the pass's own)
    left: list[int] = field(default_factory=list)  # its workers yet to begin

    @property
    def key(self) -> tuple[int, int, int, int]:
        return self.workers, self.seed, self.number, self.identity


@settings(max_examples=80, deadline=None)
@given(st.data())
def test_workers_of_each_pass_agree_in_any_arrival_order(data: st.DataObject) -> None:
    """Passes of 1..4 workers (new ones, or persistent ones over several passes; seeds repeated across passes)
    and iterations in the main process begin in any interleaving: every worker of a pass reads its epoch, and the
    passes read consecutive epochs in the order they began. (Passes that the workers can tell apart only by their
    order, with the same seed, number of workers and pass number, do not overlap: see test_ambiguous_passes_raise.)"""
    passes: list[_Pass] = []
    groups: dict[int, int] = {}  # persistent group -> its workers
    for _ in range(data.draw(st.integers(1, 7))):
        group = data.draw(st.integers(-1, 1))
        drawn = data.draw(st.integers(0, 4))  # (0: an iteration in the main process, or 1 for persistent workers)
        workers = groups.setdefault(group, max(drawn, 1)) if group >= 0 else drawn
        number = sum(1 for p in passes if p.group == group) if group >= 0 else 0
        seed = data.draw(st.sampled_from([3, 4]))
        identity = 1000 + group if group >= 0 else len(passes)
        passes.append(_Pass(workers, seed, group, number, identity, list(range(max(workers, 1)))))
    table: dict[str, Any] = {"next": 0, "open": []}
    read: dict[int, set[int]] = {}
    began: list[int] = []
    while any(p.left for p in passes):
        allowed = [(i, w) for i, p in enumerate(passes) for w in p.left if _may_begin(passes, i, w)]
        i, w = data.draw(st.sampled_from(allowed))
        this = passes[i]
        this.left.remove(w)
        worker = _WorkerPass(this.workers, w, this.seed, this.number, this.identity) if this.workers else None
        read.setdefault(i, set()).add(_begin_pass(table, worker))
        if i not in began:
            began.append(i)
    assert all(len(epochs) == 1 for epochs in read.values())
    assert [read[i].pop() for i in began] == list(range(len(passes)))
    assert table["open"] == []


def _may_begin(passes: list[_Pass], i: int, worker: int) -> bool:
    """Whether worker ``worker`` of pass ``i`` may begin now: a persistent worker begins its passes in order, and a
    pass does not overlap another that looks the same to its workers."""
    this = passes[i]
    if this.group >= 0 and any(worker in p.left for p in passes[:i] if p.group == this.group):
        return False
    started = len(this.left) < max(this.workers, 1)
    return started or not any(
        p.workers and p.key == this.key and p.left and len(p.left) < p.workers for p in passes if p is not this
    )


def test_ambiguous_passes_raise() -> None:
    """Two passes that run at once with the same seed and workers: a worker that could join either raises."""
    table: dict[str, Any] = {"next": 0, "open": []}
    assert _begin_pass(table, _WorkerPass(2, 0, 7, 0)) == 0  # pass A, worker 0 (no group)
    assert _begin_pass(table, _WorkerPass(2, 0, 7, 0)) == 1  # pass B, worker 0 (A's worker 0 has begun)
    with pytest.raises(RuntimeError, match="cannot tell which pass is theirs"):
        _begin_pass(table, _WorkerPass(2, 1, 7, 0))


def _pid_of_a_finished_process() -> int:
    process = multiprocessing.get_context("fork").Process(target=os._exit, args=(0,))
    process.start()
    process.join()
    assert process.pid is not None
    return process.pid


def test_a_worker_that_begins_after_the_others_of_its_pass_are_gone_joins_its_pass() -> None:
    """A pass abandoned early: its worker 0 began and is gone, its worker 1 begins late — it reads the pass's epoch,
    and the next pass (same seed, other worker processes) the next epoch (before: worker 1 dropped the record as
    abandoned and took epoch 3, so the next pass read 4 — an epoch skipped)."""
    gone = _pid_of_a_finished_process()
    table: dict[str, Any] = {"next": 3, "open": [{"key": [2, 7, 0, 5], "epoch": 2, "joined": {"0": gone}}]}
    assert _begin_pass(table, _WorkerPass(2, 1, 7, 0, 5)) == 2
    assert table["open"] == []
    assert _begin_pass(table, _WorkerPass(2, 0, 7, 0, 7)) == 3


def test_a_pass_whose_workers_are_gone_is_told_apart_from_a_new_one() -> None:
    """Workers without a group (no multiprocessing number): a record whose workers are all gone is not a new pass's
    with the same seed."""
    gone = _pid_of_a_finished_process()
    table: dict[str, Any] = {"next": 3, "open": [{"key": [2, 7, 0, -1], "epoch": 2, "joined": {"0": gone}}]}
    assert _begin_pass(table, _WorkerPass(2, 0, 7, 0)) == 3  # the new pass's worker 0
    assert _begin_pass(table, _WorkerPass(2, 1, 7, 0)) == 3  # its worker 1: not the abandoned pass's epoch 2


def test_the_table_keeps_the_latest_open_passes() -> None:
    table: dict[str, Any] = {"next": 0, "open": []}
    for seed in range(torch_integration.KEPT_PASSES + 10):  # passes abandoned after their worker 0 began
        _begin_pass(table, _WorkerPass(2, 0, seed, 0, seed))
    assert [record["epoch"] for record in table["open"]] == list(range(10, torch_integration.KEPT_PASSES + 10))


def test_a_pickled_copy_counts_its_own_passes(path: str) -> None:
    """An ordinary pickle (a copy of the dataset) takes the table along as it is; later passes of either are their
    own."""
    import pickle

    dataset = dataset_of(path)
    next(iter(dataset))
    copy = pickle.loads(pickle.dumps(dataset))
    assert [int(next(iter(d)).state["epoch"]) for d in (copy, copy, dataset)] == [1, 2, 1]
