"""cntkio.jax with real JAX: fixed shapes from buckets, the arrays against the minibatches they come from, exact
resume through a JSON state, and a multi-process JAX job (2 processes, jax.distributed on localhost, CPU) that
reads every sequence exactly once with global arrays, also across a kill and a resume."""

from __future__ import annotations

import functools
import json
import socket
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("jax")

import jax_dist_worker as worker
from cntkio.jax import JaxIterator, bucket

WORKER_SCRIPT = Path(worker.__file__).resolve()
TIMEOUT = 180


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("jax") / "seq.ctf"
    worker.write_ctf(path)
    return str(path)


def single(path: str, **options: Any) -> JaxIterator:
    options = {"layout": worker.LAYOUT, "partition": (1, 0), **options}
    return JaxIterator(functools.partial(worker.make_source, path), 64, **options)


def test_buckets() -> None:
    assert [bucket(n, None) for n in (1, 2, 3, 5, 8, 9)] == [1, 2, 4, 8, 8, 16]
    assert bucket(5, (4, 12, 8)) == 8
    with pytest.raises(ValueError, match="largest bucket 8"):
        bucket(9, (4, 8))


def test_batches_are_padded_to_a_few_shapes_and_hold_the_minibatches(data: str) -> None:
    reference = worker.make_source(data)
    batches = single(data)
    shapes_without_buckets = set()
    for batch in batches:
        minibatch = reference.next_minibatch(64)
        words, feats = minibatch["words"], minibatch["feats"]
        rows, steps = batch["words"].shape
        assert rows >= words.num_sequences and steps >= words.max_length
        assert rows & (rows - 1) == 0 and steps & (steps - 1) == 0  # powers of two
        shapes_without_buckets.add((words.num_sequences, words.max_length))
        valid = batch["mask"]["words"]
        np.testing.assert_array_equal(valid.sum(1)[: words.num_sequences], words.sequence_lengths)
        assert not valid[words.num_sequences :].any()
        n, t = words.num_sequences, words.max_length
        real = words.sequence_lengths[:, None] > np.arange(t)
        np.testing.assert_array_equal(batch["words"][:n, :t][valid[:n, :t]], words.asarray().argmax(-1)[real])
        assert (batch["words"][~valid] == 0).all()  # pad_id
        np.testing.assert_array_equal(batch["intent"][:n], minibatch["intent"].asarray()[:, 0].argmax(-1))
        np.testing.assert_array_equal(batch["feats"][: feats.num_sequences, : feats.max_length], feats.asarray())
        assert batches.last_keys == minibatch.sequence_keys
    assert not reference.next_minibatch(64)
    assert len(batches.shapes) <= 6 < len(shapes_without_buckets)


def test_the_state_is_json_and_resumes_exactly(data: str) -> None:
    full = _keys_per_batch(single(data), 10**6)
    first = single(data)
    head = _keys_per_batch(first, 4)
    state = json.loads(json.dumps(first.get_state()))
    assert state["steps"] == 4  # found by review: the count lagged one batch behind the position
    resumed = single(data)
    resumed.set_state(state)
    assert head + _keys_per_batch(resumed, 10**6) == full


def _keys_per_batch(batches: JaxIterator, limit: int) -> list[list[Any]]:
    out = []
    for count, _ in enumerate(batches, start=1):
        out.append(list(batches.last_keys))
        if count == limit:
            break
    return out


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def launch(tmp: Path, data: str, count: int, stop_after: int = 0, resume: list[Any] | None = None) -> list[dict]:
    tmp.mkdir(parents=True, exist_ok=True)
    port = free_port()
    processes, outs = [], []
    for index in range(count):
        out = tmp / f"process{index}.json"
        argv = [sys.executable, str(WORKER_SCRIPT), "--data", data, "--port", str(port), "--process", str(index),
                "--count", str(count), "--out", str(out)]  # fmt: skip
        if stop_after:
            argv += ["--stop-after", str(stop_after)]
        if resume is not None:
            state = tmp / f"resume{index}.json"
            state.write_text(json.dumps(resume[index]))
            argv += ["--resume", str(state)]
        processes.append(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        outs.append(out)
    for process in processes:
        try:
            _, err = process.communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            for other in processes:
                other.kill()
            raise
        assert process.returncode == 0, err[-3000:]
    return [json.loads(out.read_text()) for out in outs]


def test_two_jax_processes_read_every_sequence_once_and_resume(data: str, tmp_path: Path) -> None:
    expected = sorted({key for batch in _keys_per_batch(single(data), 10**6) for _, key in batch})
    run = launch(tmp_path / "full", data, 2)
    keys = [key for process in run for key in process["keys"]]
    assert sorted(keys) == expected and max(Counter(keys).values()) == 1  # exactly once across the processes
    assert run[0]["steps"] == run[1]["steps"]  # the processes step together (one shape per step)
    assert len({tuple(s) for process in run for s in process["shapes"]}) <= 8

    killed = launch(tmp_path / "killed", data, 2, stop_after=3)
    before = [key for process in killed for key in process["keys"]]
    resumed = launch(tmp_path / "resumed", data, 2, resume=[process["state"] for process in killed])
    after = [key for process in resumed for key in process["keys"]]
    assert sorted(before + after) == expected and max(Counter(before + after).values()) == 1


def _epoch_of(path: str, epoch: int, partition: tuple[int, int] = (1, 0)) -> list[list[Any]]:
    """The keys of each minibatch of ``epoch`` of this partition, read straight from a source."""
    source = worker.make_source(path)
    source.start_epoch(epoch)
    out = []
    while minibatch := source.next_minibatch(64, num_data_partitions=partition[0], partition_index=partition[1]):
        out.append(minibatch.sequence_keys)
    return out


def test_each_iteration_reads_the_next_epoch(data: str) -> None:
    """Issue 24 point 3.1: a second `for batch in it` over a finite source yielded nothing, silently; each iteration
    reads the next (reshuffled) epoch, as cntkio.torch's passes do, and set_epoch picks one."""
    batches = single(data)
    passes = [_keys_per_batch(batches, 10**6) for _ in range(3)]
    assert passes == [_epoch_of(data, epoch) for epoch in range(3)]
    assert all(sorted(k for b in p for k in b) == sorted(k for b in passes[0] for k in b) for p in passes)
    assert passes[0] != passes[1] != passes[2]  # later sweeps, reshuffled
    assert batches.epoch == 3 and batches.steps == sum(map(len, passes))

    chosen = single(data)
    chosen.set_epoch(2)
    assert _keys_per_batch(chosen, 10**6) == passes[2]
    assert _keys_per_batch(chosen, 10**6) == _epoch_of(data, 3)  # the ones after it follow on
    chosen.set_epoch(0)
    assert _keys_per_batch(chosen, 10**6) == passes[0]


def test_a_loop_left_early_is_continued_and_states_resume_into_the_next_epoch(data: str) -> None:
    """An iteration continues the epoch a loop left (what get_state() would resume); a state taken at an epoch's last
    batch, or after its iteration ended, resumes into the next epoch rather than into an empty iteration."""
    whole = [_epoch_of(data, epoch) for epoch in range(2)]
    batches = single(data)
    head = _keys_per_batch(batches, 4)
    assert head + _keys_per_batch(batches, 10**6) == whole[0]
    assert _keys_per_batch(batches, 10**6) == whole[1]

    at_last = single(data)
    _keys_per_batch(at_last, len(whole[0]))  # stops at the last batch of epoch 0 (the iteration is not over)
    after = single(data)
    _keys_per_batch(after, 10**6)
    for state in (at_last.get_state(), after.get_state()):
        resumed = single(data)
        resumed.set_state(json.loads(json.dumps(state)))
        assert _keys_per_batch(resumed, 10**6) == whole[1]
    left = single(data)
    _keys_per_batch(left, len(whole[0]))
    assert _keys_per_batch(left, 10**6) == whole[1]  # (a loop left right after the last batch: the next epoch)


def test_epochs_with_global_arrays_in_one_process(data: str) -> None:
    """The same with sharding= (the steps agreed through the processes' gather, here one)."""
    jax = pytest.importorskip("jax")
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    sharding = NamedSharding(jax.make_mesh((1,), ("batch",)), P("batch"))
    batches = single(data, sharding=sharding)
    passes = [_keys_per_batch(batches, 10**6) for _ in range(2)]
    assert passes == [_epoch_of(data, epoch) for epoch in range(2)]


@pytest.mark.parametrize("rule", [None, "pad"])
def test_every_stream_has_a_mask_of_its_own_shape(data: str, rule: str | None) -> None:
    """Issue 24 point 3.2: a per_sequence stream's values are [B] and its mask was [B, T]; each mask now has the
    leading axes of its stream's values, in data batches and in padding batches (equal steps)."""
    seen_padding = False
    for rank in range(2):
        batches = single(data, partition=(2, rank), equal_steps=rule)
        for batch in batches:
            rows = batch["intent"].shape[0]
            assert batch["mask"]["intent"].shape == (rows,) and batch["mask"]["intent"].dtype == bool
            assert batch["mask"]["words"].shape == batch["words"].shape
            assert batch["mask"]["feats"].shape == batch["feats"].shape[:2]
            real = len(batch.sequence_keys)
            assert batch["mask"]["intent"].tolist() == [True] * real + [False] * (rows - real)
            np.testing.assert_array_equal(batch["mask"]["words"].any(1), batch["mask"]["intent"])
            seen_padding |= real == 0
    assert seen_padding == (rule == "pad")


def test_set_epoch_under_equal_steps_and_on_an_endless_source(data: str) -> None:
    """set_epoch plans the chosen epoch under equal steps too; an endless source has no epochs to pick."""
    reference = single(data, partition=(2, 1), equal_steps="pad")
    passes = [_keys_per_batch(reference, 10**6) for _ in range(3)]
    chosen = single(data, partition=(2, 1), equal_steps="pad")
    chosen.set_epoch(2)
    assert _keys_per_batch(chosen, 10**6) == passes[2]
    endless = JaxIterator(functools.partial(worker.make_source, data, max_sweeps=None), 64, partition=(1, 0))
    with pytest.raises(ValueError, match="no epochs"):
        endless.set_epoch(1)
