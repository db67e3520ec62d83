"""PyTorch integration with real components: DataLoader workers, resume, torch.distributed ranks, torchdata."""

from __future__ import annotations

import functools
import gc
import json
import socket
import subprocess
import sys
import weakref
from collections import Counter
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch.utils.data import DataLoader  # noqa: E402

import torch_dist_worker as worker  # noqa: E402
from cntkio import CTFDeserializer, MinibatchSource, StreamDef, StreamDefs  # noqa: E402
from cntkio.torch import MinibatchDataset, TorchMinibatch, loader, merge_states, to_tensor  # noqa: E402

WORKER_SCRIPT = Path(worker.__file__).resolve()
TIMEOUT = 120  # seconds per distributed launch: a hang fails the test instead of blocking CI

pytestmark = [
    pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning"),  # torchdata 0.11 on torch 2.13
]


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[int, Any]]:
    """200 sequences of 1..6 samples in ~50 chunks of ~500 bytes: its path and the expected arrays per key."""
    path = tmp_path_factory.mktemp("torch") / "varying.ctf"
    return str(path), worker.write_ctf(path)


@pytest.fixture(scope="module")
def single_sample_data(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[int, Any]]:
    """200 sequences of one sample each."""
    path = tmp_path_factory.mktemp("torch") / "single.ctf"
    return str(path), worker.write_ctf(path, max_length=1, seed=1)


def run_loader(dataset: MinibatchDataset, num_workers: int, stop_after: int = 0) -> list[TorchMinibatch]:
    batches = []
    for batch in DataLoader(dataset, batch_size=None, num_workers=num_workers):
        batches.append(batch)
        if len(batches) == stop_after:
            break
    return batches


def contents(batch: TorchMinibatch) -> tuple[list[Any], dict[str, np.ndarray], dict[str, list[int]]]:
    """Keys, every tensor as a dense array, and the lengths of a batch."""
    dense = {
        name: (tensor.to_dense() if tensor.layout == torch.sparse_csr else tensor).numpy()
        for name, tensor in batch.tensors.items()
    }
    return batch.keys, dense, {name: lengths.tolist() for name, lengths in batch.lengths.items()}


def assert_same_stream(actual: list[TorchMinibatch], expected: list[TorchMinibatch]) -> None:
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        keys_a, dense_a, lengths_a = contents(a)
        keys_e, dense_e, lengths_e = contents(e)
        assert keys_a == keys_e and lengths_a == lengths_e and a.index == e.index
        assert dense_a.keys() == dense_e.keys()
        for name in dense_a:
            np.testing.assert_array_equal(dense_a[name], dense_e[name])


def assert_matches_data(batch: TorchMinibatch, expected: dict[int, Any]) -> None:
    """The tensors hold what the file says for the batch's keys: padded dense ``x``, CSR ``s`` rows."""
    keys = [key for _, key in batch.keys]
    x, s = batch["x"], batch["s"]
    lengths = [len(expected[key][0]) for key in keys]
    assert batch.lengths["x"].tolist() == lengths
    assert s.layout == torch.sparse_csr and s.shape == (sum(lengths), worker.SPARSE_DIM)
    if max(lengths) == 1:
        assert x.shape == (len(keys), worker.DENSE_DIM)
        x = x[:, None, :]
    else:
        assert x.shape == (len(keys), max(lengths), worker.DENSE_DIM)
    for row, (key, length) in enumerate(zip(keys, lengths)):
        np.testing.assert_array_equal(x[row, :length].numpy(), expected[key][0])
        assert not x[row, length:].any()  # padding
    np.testing.assert_array_equal(s.to_dense().numpy(), np.concatenate([expected[key][1] for key in keys]))


def all_keys(batches: list[TorchMinibatch]) -> list[Any]:
    return [key for batch in batches for _, key in batch.keys]


# --- DataLoader workers --------------------------------------------------------------------------------


@pytest.mark.parametrize("randomize", [False, True])
def test_stream_is_the_same_for_any_num_workers(data: tuple[str, dict[int, Any]], randomize: bool) -> None:
    path, expected = data
    dataset = MinibatchDataset(functools.partial(worker.make_source, path, randomize), worker.MINIBATCH)
    streams = {}
    for workers in (0, 1, 2):
        dataset.set_epoch(0)  # (each iteration would read the next epoch)
        streams[workers] = run_loader(dataset, workers)
    assert_same_stream(streams[1], streams[0])
    assert_same_stream(streams[2], streams[0])
    batches = streams[0]
    assert sorted(all_keys(batches)) == sorted(expected)  # max_sweeps=1: every sequence once
    assert [batch.index for batch in batches] == list(range(len(batches)))
    assert batches[-1].end_of_sweep and not any(batch.end_of_sweep for batch in batches[:-1])
    assert (all_keys(batches) == sorted(expected)) == (not randomize)
    for batch in streams[2]:
        assert_matches_data(batch, expected)


def test_single_sample_sequences_are_flat_and_share_memory(single_sample_data: tuple[str, dict[int, Any]]) -> None:
    path, expected = single_sample_data
    source = worker.make_source(path)
    try:
        minibatch = source.next_minibatch(worker.MINIBATCH)
        dense = minibatch["x"]
        tensor = to_tensor(dense)
        assert tensor.shape == (worker.MINIBATCH, worker.DENSE_DIM)
        assert np.shares_memory(tensor.numpy(), dense.values)
        assert to_tensor(dense, "padded").shape == (worker.MINIBATCH, 1, worker.DENSE_DIM)
        assert to_tensor(minibatch["s"]).layout == torch.sparse_csr
    finally:
        source.close()
    dataset = MinibatchDataset(functools.partial(worker.make_source, path), worker.MINIBATCH)
    batches = run_loader(dataset, 2)
    assert sorted(all_keys(batches)) == sorted(expected)
    for batch in batches:
        assert_matches_data(batch, expected)


def test_padded_layout_when_sequences_have_several_samples(data: tuple[str, dict[int, Any]]) -> None:
    path, _ = data
    source = worker.make_source(path)
    try:
        minibatch = source.next_minibatch(worker.MINIBATCH)
        dense = minibatch["x"]
        assert dense.max_length > 1
        tensor = to_tensor(dense)
        assert tensor.shape == (dense.num_sequences, dense.max_length, worker.DENSE_DIM)
        np.testing.assert_array_equal(tensor.numpy(), dense.asarray())
        np.testing.assert_array_equal(to_tensor(dense, "flat").numpy(), dense.values)
    finally:
        source.close()


# --- resume ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("stop_after", [1, 4, 7])
def test_resume_from_batch_state_with_workers(data: tuple[str, dict[int, Any]], stop_after: int) -> None:
    path, _ = data
    make = functools.partial(worker.make_source, path)
    full = run_loader(MinibatchDataset(make, worker.MINIBATCH), 2)
    interrupted = run_loader(MinibatchDataset(make, worker.MINIBATCH), 2, stop_after=stop_after)
    assert_same_stream(interrupted, full[:stop_after])
    resumed_dataset = MinibatchDataset(make, worker.MINIBATCH)
    resumed_dataset.load_state_dict(json.loads(json.dumps(interrupted[-1].state)))  # as a checkpoint file would
    assert_same_stream(run_loader(resumed_dataset, 2), full[stop_after:])


def test_only_the_next_iteration_resumes(data: tuple[str, dict[int, Any]]) -> None:
    path, _ = data
    make = functools.partial(worker.make_source, path)
    full = run_loader(MinibatchDataset(make, worker.MINIBATCH), 0)
    dataset = MinibatchDataset(make, worker.MINIBATCH)
    dataset.load_state_dict(full[9].state)
    loader = DataLoader(dataset, batch_size=None)
    assert_same_stream(list(loader), full[10:])
    second = MinibatchDataset(make, worker.MINIBATCH)
    second.set_epoch(1)
    assert_same_stream(list(loader), run_loader(second, 0))  # the next iteration is the whole next epoch


@pytest.mark.parametrize("num_workers", [0, 2])
def test_stateful_dataloader_round_trip(data: tuple[str, dict[int, Any]], num_workers: int) -> None:
    stateful = pytest.importorskip("torchdata.stateful_dataloader")
    path, _ = data
    make = functools.partial(worker.make_source, path)
    full = run_loader(MinibatchDataset(make, worker.MINIBATCH), 2)

    def loader() -> Any:
        dataset = MinibatchDataset(make, worker.MINIBATCH)
        return stateful.StatefulDataLoader(dataset, batch_size=None, num_workers=num_workers)

    first = loader()
    iterator = iter(first)
    head = [next(iterator) for _ in range(5)]
    state = first.state_dict()
    del iterator
    assert_same_stream(head, full[:5])
    resumed = loader()
    resumed.load_state_dict(state)
    assert_same_stream(list(resumed), full[5:])


# --- torch.distributed -----------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def launch(
    directory: Path,
    data_path: str,
    world: int,
    *,
    num_workers: int,
    stop_after: list[int] | None = None,
    resume: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Runs a gloo job of ``world`` ranks on 127.0.0.1 (one process each); returns every rank's JSON output."""
    directory.mkdir()
    port = free_port()
    processes, outputs, logs = [], [], []
    for rank in range(world):
        out, log = directory / f"rank{rank}.json", directory / f"rank{rank}.log"
        command = [sys.executable, str(WORKER_SCRIPT), "--data", data_path, "--port", str(port), "--rank", str(rank)]
        command += ["--world", str(world), "--out", str(out), "--num-workers", str(num_workers)]
        if stop_after:
            command += ["--stop-after", str(stop_after[rank])]
        if resume:
            state_file = directory / f"resume{rank}.json"
            state_file.write_text(json.dumps(resume[rank]))
            command += ["--resume", str(state_file)]
        with log.open("wb") as stream:
            processes.append(subprocess.Popen(command, stdout=stream, stderr=subprocess.STDOUT))
        outputs.append(out)
        logs.append(log)
    try:
        codes = [process.wait(timeout=TIMEOUT) for process in processes]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    report = "\n".join(
        f"--- rank {rank}: exit {code}\n{log.read_text()}" for rank, (code, log) in enumerate(zip(codes, logs))
    )
    assert codes == [0] * world, report
    return [json.loads(out.read_text()) for out in outputs]


def exactly_once(keys: list[Any], expected: dict[int, Any]) -> None:
    counts = Counter(keys)
    assert sorted(counts) == sorted(expected), "missing or unknown sequences"
    assert {key: n for key, n in counts.items() if n > 1} == {}, "sequences read more than once"


def test_distributed_ranks_read_every_sequence_once(data: tuple[str, dict[int, Any]], tmp_path: Path) -> None:
    path, expected = data
    ranks = launch(tmp_path / "full", path, 3, num_workers=2)
    assert all(rank["keys"] for rank in ranks)
    exactly_once([key for rank in ranks for key in rank["keys"]], expected)


def test_distributed_kill_and_resume(data: tuple[str, dict[int, Any]], tmp_path: Path) -> None:
    path, expected = data
    killed = launch(tmp_path / "killed", path, 3, num_workers=2, stop_after=[2, 3, 4])
    assert [rank["batches"] for rank in killed] == [2, 3, 4]
    states = [rank["state"] for rank in killed]
    merged = merge_states(states)
    assert all(rank["gathered"] == merged for rank in killed)  # gather_state == merge_states of all ranks
    before = [key for rank in killed for key in rank["keys"]]

    same_world = launch(tmp_path / "resume3", path, 3, num_workers=0, resume=states)
    exactly_once(before + [key for rank in same_world for key in rank["keys"]], expected)

    elastic = launch(tmp_path / "resume2", path, 2, num_workers=2, resume=[merged, merged])
    assert all(rank["keys"] for rank in elastic)
    exactly_once(before + [key for rank in elastic for key in rank["keys"]], expected)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_set_epoch_reads_the_next_sweep(data: tuple[str, dict[int, Any]], num_workers: int) -> None:
    path, expected = data
    two_sweeps = run_loader(MinibatchDataset(functools.partial(worker.make_source, path, max_sweeps=2), 16), 0)
    stream = [key for batch in two_sweeps for _, key in batch.keys]
    dataset = MinibatchDataset(functools.partial(worker.make_source, path), 16)
    epochs = []
    for epoch in range(2):
        dataset.set_epoch(epoch)
        epochs.append([key for batch in run_loader(dataset, num_workers) for _, key in batch.keys])
    assert sorted(epochs[0]) == sorted(epochs[1]) == sorted(expected) and epochs[0] != epochs[1]
    assert epochs[0] + epochs[1] == stream


class RecordingSource(MinibatchSource):
    """A source that notes, at each read, how many of the minibatches it handed out before are still alive."""

    handed_out: ClassVar[list[weakref.ref[Any]]] = []
    alive_at_reads: ClassVar[list[int]] = []

    def next_minibatch(self, *args: Any, **kwargs: Any) -> Any:
        gc.collect()
        RecordingSource.alive_at_reads.append(sum(ref() is not None for ref in RecordingSource.handed_out))
        minibatch = super().next_minibatch(*args, **kwargs)
        if minibatch:
            RecordingSource.handed_out.append(weakref.ref(minibatch))
        return minibatch


def recording_source(path: str) -> MinibatchSource:
    streams = StreamDefs(x=StreamDef(field="x", shape=worker.DENSE_DIM))
    return RecordingSource(CTFDeserializer(path, streams), max_sweeps=1, randomize=False)


def test_the_dataset_holds_no_minibatch_the_caller_let_go(data: tuple[str, dict[int, Any]]) -> None:
    """While the next minibatch is read, the dataset holds none of the earlier ones: a caller that is done with a
    batch frees its memory (before the fix the dataset's generator kept the previous minibatch, so two were in
    memory at every read)."""
    path, _ = data
    RecordingSource.handed_out.clear()
    RecordingSource.alive_at_reads.clear()
    for batch in DataLoader(MinibatchDataset(functools.partial(recording_source, path), 16), batch_size=None):
        assert batch.tensors["x"].shape[0] > 0
        del batch
    assert len(RecordingSource.alive_at_reads) > 3
    assert RecordingSource.alive_at_reads == [0] * len(RecordingSource.alive_at_reads)


# --- epochs and the loader helper --------------------------------------------------------------------------


def epoch_keys(batches: list[TorchMinibatch]) -> list[Any]:
    return [key for batch in batches for _, key in batch.keys]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_each_iteration_reads_the_next_epoch(data: tuple[str, dict[int, Any]], num_workers: int) -> None:
    """Found by a new user on ATIS: iterating a DataLoader twice read the same epoch (same order) twice, unless
    set_epoch was called; now each iteration reads the next epoch, whatever the loader workers."""
    path, expected = data
    three_sweeps = run_loader(MinibatchDataset(functools.partial(worker.make_source, path, max_sweeps=3), 16), 0)
    train = loader(functools.partial(worker.make_source, path), 16, num_workers=num_workers)
    epochs = [epoch_keys(list(train)) for _ in range(3)]
    assert all(sorted(epoch) == sorted(expected) for epoch in epochs) and epochs[0] != epochs[1] != epochs[2]
    assert epochs[0] + epochs[1] + epochs[2] == epoch_keys(three_sweeps)
    train.dataset.set_epoch(1)  # pins the next iteration; the ones after it follow on
    assert epoch_keys(list(train)) == epochs[1] and epoch_keys(list(train)) == epochs[2]


def test_set_epoch_reaches_persistent_workers(data: tuple[str, dict[int, Any]]) -> None:
    """Found by a new user: with persistent_workers=True, set_epoch was silently ignored (the workers kept their
    copy of the dataset); the epoch now lives in shared memory."""
    path, _ = data
    make = functools.partial(worker.make_source, path)
    single = loader(make, 16)
    reference = [epoch_keys(list(single)) for _ in range(3)]
    train = loader(make, 16, num_workers=2, persistent_workers=True)
    assert [epoch_keys(list(train)) for _ in range(3)] == reference  # epochs 0, 1, 2 advance by themselves
    for epoch in (2, 0, 1):
        train.dataset.set_epoch(epoch)
        assert epoch_keys(list(train)) == reference[epoch]


def test_a_resumed_epoch_is_followed_by_the_next(data: tuple[str, dict[int, Any]]) -> None:
    path, _ = data
    make = functools.partial(worker.make_source, path)
    reference = loader(make, 16)
    epochs = [list(reference) for _ in range(3)]
    train = loader(make, 16)
    train.dataset.load_state_dict(json.loads(json.dumps(epochs[1][4].state)))  # a checkpoint taken in epoch 1
    assert epoch_keys(list(train)) == epoch_keys(epochs[1][5:])
    assert epoch_keys(list(train)) == epoch_keys(epochs[2])


def test_a_dataloader_with_a_batch_size_passes_minibatches_through_or_explains(data: tuple[str, dict[int, Any]]):
    """Found by a new user: DataLoader(dataset) (batch_size=1 by default) failed in default_collate with a TypeError
    about TorchMinibatch; batch_size=1 now passes each minibatch through, a larger one is refused with advice."""
    path, _ = data
    make = functools.partial(worker.make_source, path)
    expected = run_loader(MinibatchDataset(make, worker.MINIBATCH), 0)
    assert_same_stream(list(DataLoader(MinibatchDataset(make, worker.MINIBATCH))), expected)
    with pytest.raises(TypeError, match="batch_size=None"):
        next(iter(DataLoader(MinibatchDataset(make, worker.MINIBATCH), batch_size=4)))


def test_sparse_batches_from_workers_print_no_warning(data: tuple[str, dict[int, Any]]) -> None:
    """The main process rebuilds the workers' sparse CSR tensors without torch's two warnings (beta support,
    implicit invariant checks), in a fresh interpreter where they would be printed once."""
    path, _ = data
    script = (
        f"import functools, sys, warnings; sys.path.insert(0, {str(WORKER_SCRIPT.parent)!r})\n"
        "warnings.simplefilter('default')\n"
        "import torch, torch_dist_worker as w; from cntkio.torch import loader\n"
        f"batches = list(loader(functools.partial(w.make_source, {path!r}), 16, num_workers=2))\n"
        "assert any(b['s'].layout == torch.sparse_csr for b in batches)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 0, done.stderr
    assert "Sparse" not in done.stderr, done.stderr


def test_batches_from_workers_carry_a_file_table_and_ids(data: tuple[str, dict[int, Any]]) -> None:
    """A batch leaving a worker carries its provenance as a table of files and an id per sequence (integer arrays),
    not a (path, key) pair per sequence."""
    path, _ = data
    batches = list(loader(functools.partial(worker.make_source, path), 16, num_workers=2))
    for batch in batches:
        assert batch.provenance.files == (path,)
        assert batch.provenance.ids.dtype == np.int64 and batch.provenance.file_rows.dtype == np.uint8
        assert batch.keys == [(path, int(key)) for key in batch.provenance.ids]
    reference = [key for batch in run_loader(MinibatchDataset(functools.partial(worker.make_source, path), 16), 0)
                 for key in batch.keys]  # fmt: skip
    assert [key for batch in batches for key in batch.keys] == reference


def test_torch_distributed_checkpoint_saves_and_restores_the_dataset(data: tuple[str, dict[int, Any]], tmp_path):
    """The dataset follows torch.distributed.checkpoint's Stateful protocol: dcp.save/dcp.load of a state dict
    holding it resume exactly after the last batch read."""
    dcp = pytest.importorskip("torch.distributed.checkpoint")
    path, _ = data
    make = functools.partial(worker.make_source, path)
    full = run_loader(MinibatchDataset(make, worker.MINIBATCH), 0)
    dataset = MinibatchDataset(make, worker.MINIBATCH)
    for count, _ in enumerate(DataLoader(dataset, batch_size=None), start=1):
        if count == 5:
            break
    dcp.save({"data": dataset}, checkpoint_id=str(tmp_path / "ckpt"), no_dist=True)
    restored = MinibatchDataset(make, worker.MINIBATCH)
    dcp.load({"data": restored}, checkpoint_id=str(tmp_path / "ckpt"), no_dist=True)
    assert_same_stream(run_loader(restored, 0), full[5:])


def test_keys_beyond_int64_cross_from_workers(tmp_path: Path) -> None:
    """Found by review: a CTF id >= 2**63 made the compact provenance fail in the worker's pickling (an error only in
    a feeder thread: the loader ended with no batches); mixed signs came back as floats."""
    path = tmp_path / "big.ctf"
    path.write_text("18446744073709551615 |x 1 2 3 |s 1:1\n7 |x 4 5 6 |s 2:1\n")
    streams = StreamDefs(x=StreamDef(field="x", shape=3), s=StreamDef(field="s", shape=50, is_sparse=True))
    make = functools.partial(_big_key_source, str(path), streams)
    batches = list(loader(make, 16, num_workers=1))
    assert [key for batch in batches for _, key in batch.keys] == [18446744073709551615, 7]


def _big_key_source(path: str, streams: Any) -> MinibatchSource:
    return MinibatchSource(CTFDeserializer(path, streams), randomize=False, max_sweeps=1)
