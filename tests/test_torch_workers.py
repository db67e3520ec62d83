"""DataLoader workers without duplicated work: each chunk parsed once per epoch across the workers (parsed chunks
shared through /dev/shm), batches handed to the main process through reusable shared-memory slots — with the
stream identical to ``num_workers=0``, batches a training loop keeps intact, and nothing left behind."""

from __future__ import annotations

import functools
import gc
import multiprocessing
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch.utils.data import DataLoader  # noqa: E402

import torch_dist_worker as worker  # noqa: E402
from cntkio import (  # noqa: E402
    ChunkIndex,
    CTFDeserializer,
    DenseStream,
    Deserializer,
    MinibatchSource,
    StreamDef,
    StreamDefs,
    StreamInformation,
)
from cntkio._src.integrations import shm as shm  # noqa: E402
from cntkio.torch import MinibatchDataset, TorchMinibatch, loader  # noqa: E402

pytestmark = pytest.mark.skipif(not shm.available(), reason="needs /dev/shm")

CHUNKS, PER_CHUNK = 12, 40


class CountedChunks(Deserializer):
    """Sequence ``k`` (``PER_CHUNK`` per chunk) holds ``k % 4 + 1`` samples of ``[k, step]``; every ``get_chunk``
    appends the chunk number to ``log`` (one line, O_APPEND: whole lines from any process)."""

    def __init__(self, log: str):
        self.log = log
        self.info = StreamInformation("x", 0, "dense", np.dtype(np.float32), (2,))

    def stream_infos(self) -> list[StreamInformation]:
        return [self.info]

    def num_chunks(self) -> int:
        return CHUNKS

    def chunk_index(self, chunk: int) -> ChunkIndex:
        keys = np.arange(PER_CHUNK * chunk, PER_CHUNK * (chunk + 1))
        return ChunkIndex(chunk, keys, keys % 4 + 1)

    def get_chunk(self, chunk: int) -> dict[str, DenseStream]:
        fd = os.open(self.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(fd, f"{chunk}\n".encode())
        finally:
            os.close(fd)
        index = self.chunk_index(chunk)
        rows = [[k, t] for k, n in zip(index.keys, index.lengths) for t in range(n)]
        offsets = np.concatenate([[0], np.cumsum(index.lengths)])
        return {"x": DenseStream(np.array(rows, dtype=np.float32), offsets)}


def counted_source(log: str) -> MinibatchSource:
    return MinibatchSource(CountedChunks(log), max_sweeps=1, randomization_window_in_chunks=3,
                           randomization_seed=5)  # fmt: skip


def stream_of(batches: list[TorchMinibatch]) -> list[tuple[list[Any], np.ndarray]]:
    return [(batch.keys, batch["x"].numpy().copy()) for batch in batches]


def parses(log: Path) -> list[int]:
    return sorted(int(line) for line in log.read_text().split()) if log.exists() else []


def job_files() -> list[str]:
    return sorted(name for name in os.listdir(shm.SHM_DIR) if name.startswith(f"cntkio-{os.getpid()}-"))


@pytest.mark.parametrize("workers", [2, 3])
def test_each_chunk_is_parsed_once_per_epoch_across_workers(tmp_path: Path, workers: int) -> None:
    alone, shared = tmp_path / "alone.log", tmp_path / "shared.log"
    expected = stream_of(list(loader(functools.partial(counted_source, str(alone)), 64)))
    data = loader(functools.partial(counted_source, str(shared)), 64, num_workers=workers)
    assert_streams_equal(stream_of(list(data)), expected)
    # in one process the passes go on with one source: near the epoch's end it may have begun on the next epoch's
    # first chunks (a parse thread's worth each); workers that do not persist never do
    in_process = parses(alone)
    assert set(in_process) == set(range(CHUNKS)) and len(in_process) <= CHUNKS + (os.cpu_count() or 1)
    assert parses(shared) == list(range(CHUNKS))  # (before: once per worker)


def test_every_epoch_shares_and_persistent_workers_too(tmp_path: Path) -> None:
    log = tmp_path / "chunks.log"
    data = loader(functools.partial(counted_source, str(log)), 64, num_workers=2, persistent_workers=True)
    first, second = stream_of(list(data)), stream_of(list(data))
    counts = np.bincount(parses(log), minlength=CHUNKS)
    # once per epoch across the workers at most; chunks a worker's source still holds at an epoch's end (persistent
    # workers go on with their sources) serve the next epoch without a parse
    assert counts.min() >= 1 and counts.max() <= 2
    alone = tmp_path / "alone.log"
    dataset = MinibatchDataset(functools.partial(counted_source, str(alone)), 64)
    assert_streams_equal(first, stream_of(list(DataLoader(dataset, batch_size=None))))
    assert_streams_equal(second, stream_of(list(DataLoader(dataset, batch_size=None))))


Stream = list[tuple[list[Any], np.ndarray]]


def assert_streams_equal(actual: Stream, expected: Stream) -> None:
    assert len(actual) == len(expected)
    for (keys_a, x_a), (keys_e, x_e) in zip(actual, expected):
        assert keys_a == keys_e
        np.testing.assert_array_equal(x_a, x_e)


def test_batches_a_loop_keeps_stay_intact(data_file: tuple[str, dict[int, Any]]) -> None:
    """More batches than a worker has slots, all kept: the later ones travel torch's way, none is overwritten."""
    path, expected = data_file
    dataset = MinibatchDataset(functools.partial(worker.make_source, path), 4, layout={"x": "padded"})
    batches = list(DataLoader(dataset, batch_size=None, num_workers=2))
    assert len(batches) > 2 * 16
    for batch in batches:
        keys = [key for _, key in batch.keys]
        lengths = batch.lengths["x"].tolist()
        for row, (key, length) in enumerate(zip(keys, lengths)):
            np.testing.assert_array_equal(batch["x"][row, :length].numpy(), expected[key][0])
    assert sorted(key for batch in batches for _, key in batch.keys) == sorted(expected)


def test_a_view_keeps_its_batch_memory(data_file: tuple[str, dict[int, Any]]) -> None:
    """A slot is reused only once every tensor over it is gone — views of a batch's tensors included."""
    path, expected = data_file
    dataset = MinibatchDataset(functools.partial(worker.make_source, path), 4, layout={"x": "padded"})
    kept: list[tuple[int, int, Any]] = []
    for number, batch in enumerate(DataLoader(dataset, batch_size=None, num_workers=2)):
        if number % 7 == 0:
            key, length = batch.keys[0][1], int(batch.lengths["x"][0])
            kept.append((key, length, batch["x"][0]))  # a view of the first row; the batch itself is let go
        del batch
        gc.collect()
    assert len(kept) > 3
    for key, length, row in kept:
        np.testing.assert_array_equal(row[:length].numpy(), expected[key][0])


@pytest.mark.parametrize(
    "layout", [{"x": "padded", "s": "csr"}, {"x": "packed", "s": "flat"}, {"x": "nested", "s": "padded"}]
)
def test_every_layout_crosses_to_the_main_process(data_file: tuple[str, Any], layout: dict[str, str]) -> None:
    """Tensors, CSR parts and PackedSequence fields travel in the slots; nested tensors travel torch's way."""
    path, _ = data_file
    streams = {}
    for workers in (0, 2):
        data = loader(functools.partial(worker.make_source, path), 16, num_workers=workers, layout=layout)
        streams[workers] = [
            (b.keys, {name: _dense(value) for name, value in b.tensors.items()},
             {name: mask.tolist() for name, mask in b.masks.items()})
            for b in data
        ]  # fmt: skip
    assert len(streams[0]) == len(streams[2])
    for (keys_a, tensors_a, masks_a), (keys_e, tensors_e, masks_e) in zip(streams[2], streams[0]):
        assert keys_a == keys_e and masks_a == masks_e and tensors_a.keys() == tensors_e.keys()
        for name in tensors_a:
            np.testing.assert_array_equal(tensors_a[name], tensors_e[name])


def _dense(value: Any) -> np.ndarray:
    if isinstance(value, torch.nn.utils.rnn.PackedSequence):
        padded, _ = torch.nn.utils.rnn.pad_packed_sequence(value, batch_first=True)
        return padded.numpy()
    if value.is_nested:
        return torch.nested.to_padded_tensor(value, 0.0).numpy()
    return (value.to_dense() if value.layout == torch.sparse_csr else value).numpy()


def test_chunks_with_counted_errors_are_parsed_by_each_worker(tmp_path: Path) -> None:
    """A chunk whose parse counted errors is not shared: each worker parses it, and the stream is the same."""
    path = tmp_path / "bad.ctf"
    lines = [f"{k} |x {k} 1 2\n" if k % 9 else f"{k} |x {k} oops 2\n" for k in range(300)]
    path.write_text("".join(lines))
    make = functools.partial(_tolerant_source, str(path))
    streams = [[(b.keys, b["x"].numpy().copy()) for b in loader(make, 16, num_workers=w)] for w in (0, 2)]
    assert_streams_equal(streams[1], streams[0])


def _tolerant_source(path: str) -> MinibatchSource:
    streams = StreamDefs(x=StreamDef(field="x", shape=3))
    reader = CTFDeserializer(path, streams, chunk_size_in_bytes=400, max_errors=100, trace_level=0)
    return MinibatchSource(reader, max_sweeps=1, randomization_window_in_chunks=2, randomization_seed=3)


def test_nothing_is_left_in_shared_memory(data_file: tuple[str, dict[int, Any]]) -> None:
    path, _ = data_file
    dataset = MinibatchDataset(functools.partial(worker.make_source, path), 16)
    data = DataLoader(dataset, batch_size=None, num_workers=2)
    assert len(list(data)) > 0
    for number, _ in enumerate(data):  # an epoch left early
        if number == 3:
            break
    del data, dataset, _
    gc.collect()
    assert job_files() == []


def test_files_of_a_dead_job_are_removed(tmp_path: Path) -> None:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = shm.SHM_DIR / f"cntkio-{int(gone.stdout)}-0123456789ab-chunks-e0"
    stale.mkdir()
    (stale / "chunk").write_bytes(b"x")
    MinibatchDataset(functools.partial(counted_source, str(tmp_path / "log")), 16)
    assert stale.exists()  # young: perhaps a process of another PID namespace
    for path in (stale / "chunk", stale):  # (a directory is as young as the youngest entry in it)
        os.utime(path, (0, os.path.getmtime(path) - 2 * shm.STALE_SECONDS))
    MinibatchDataset(functools.partial(counted_source, str(tmp_path / "log")), 16)
    assert not stale.exists()


def test_workers_without_shared_memory_read_the_same(
    data_file: tuple[str, dict[int, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, _ = data_file
    expected = [(b.keys, b["x"].numpy().copy()) for b in loader(functools.partial(worker.make_source, path), 16)]
    monkeypatch.setattr(shm, "SHM_DIR", Path("/nonexistent-shm"))  # (inherited by the forked workers)
    actual = [(b.keys, b["x"].numpy().copy()) for b in loader(functools.partial(worker.make_source, path), 16,
                                                                num_workers=2)]  # fmt: skip
    assert_streams_equal(actual, expected)


def test_spawned_workers_share_too(tmp_path: Path) -> None:
    log, alone = tmp_path / "spawned.log", tmp_path / "alone.log"
    expected = stream_of(list(loader(functools.partial(counted_source, str(alone)), 64)))
    data = loader(functools.partial(counted_source, str(log)), 64, num_workers=2, multiprocessing_context="spawn")
    assert_streams_equal(stream_of(list(data)), expected)
    assert parses(log) == list(range(CHUNKS))


def _claim_and_die(job: str) -> None:
    from cntkio._src.integrations.shared_chunks import ChunkExchange

    exchange = ChunkExchange(job, 0, 1, 2, "corpus")
    exchange.load((0, 0, 0), lambda: os._exit(3))  # dies while parsing, holding the claim


def test_a_worker_dying_while_parsing_does_not_hang_the_others(tmp_path: Path) -> None:
    from cntkio._src.integrations.shared_chunks import ChunkExchange

    job = shm.job_name(os.getpid(), "deadclaimant")
    try:
        context = multiprocessing.get_context("fork")
        claimant = context.Process(target=_claim_and_die, args=(job,))
        claimant.start()
        claimant.join(60)
        assert claimant.exitcode == 3
        exchange = ChunkExchange(job, 0, 0, 2, "corpus")
        chunk = {"x": DenseStream(np.arange(6, dtype=np.float32).reshape(3, 2), np.array([0, 1, 3]))}
        loaded = exchange.load((0, 0, 0), lambda: chunk, wait=True)  # the claim died with its holder
        assert loaded is not None  # parsed here, published, and read back from the published file (one copy)
        np.testing.assert_array_equal(loaded["x"].values, chunk["x"].values)
        np.testing.assert_array_equal(loaded["x"].seq_offsets, chunk["x"].seq_offsets)
        assert not loaded["x"].values.flags.writeable
        exchange.close()
    finally:
        shm.remove_job(os.getpid(), "deadclaimant")


@pytest.fixture(scope="module")
def data_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[int, Any]]:
    path = tmp_path_factory.mktemp("workers") / "varying.ctf"
    return str(path), worker.write_ctf(path)
