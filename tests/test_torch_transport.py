"""Batches from loader workers to the main process: a worker with a reused PID is served its own batch, a slot is
trusted only when its header says it holds the batch sent, and a nearly full ``/dev/shm`` loses no batch (before:
the loader waited forever for a batch torch's queue feeder thread had dropped)."""

from __future__ import annotations

import errno
import functools
import multiprocessing
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch.utils.data import DataLoader  # noqa: E402

import torch_dist_worker as worker  # noqa: E402
from cntkio._src.integrations import shm, torch_transport  # noqa: E402
from cntkio.torch import MinibatchDataset, loader  # noqa: E402

pytestmark = pytest.mark.skipif(not shm.available(), reason="needs /dev/shm")

HANG = 120.0  # seconds without a batch: the loader waits for one that will never come (a lost batch)


def _send_batch(job: str, values: list[int], pid: int, connection: Any) -> None:
    """A loader worker's part: packs ``values`` into its pool and sends the wire; reports whether its slot is free
    once the main process let go of the batch. ``pid``: the PID it takes (a dead worker's), or 0."""
    if pid:
        os.getpid = lambda: pid  # type: ignore[assignment]  # (this process only: forked)
    pool = torch_transport.worker_pool(job)
    assert pool is not None
    connection.send(pool.pack({"x": np.array(values), "state": {}}))
    connection.recv()  # the main process let go of the batch
    connection.send(bytes(pool.flags[-torch_transport.MAX_SLOTS :]))
    os._exit(0)


def _through_a_worker(job: str, values: list[int], pid: int = 0) -> tuple[list[int], bytes, int]:
    """(what the main process unpacked, the worker's slot flags once it let go, the worker's PID)."""
    context = multiprocessing.get_context("fork")
    here, there = context.Pipe()
    process = context.Process(target=_send_batch, args=(job, values, pid, there))
    process.start()
    fields = torch_transport.unpack(here.recv())
    received = fields["x"].tolist()
    del fields
    here.send(None)
    flags = here.recv()
    process.join()
    assert process.pid is not None
    return received, flags, process.pid


def test_a_worker_with_a_dead_workers_pid_is_served_its_own_batch() -> None:
    job = shm.job_name(os.getpid(), "reusedpid")
    try:
        first, _, pid = _through_a_worker(job, [1, 2, 3])
        assert first == [1, 2, 3]
        second, flags, _ = _through_a_worker(job, [7, 8, 9], pid=pid)  # a later worker that got the same PID
        assert second == [7, 8, 9]  # (before: [1, 2, 3], the dead worker's batch)
        assert set(flags) == {0}  # its slot is free again (before: leased forever)
    finally:
        shm.remove_job(os.getpid(), "reusedpid")


REUSED_PID_SCRIPT = r"""
import os, pickle, secrets, sys
import numpy as np
from cntkio._src.integrations import shm, torch_transport

token = secrets.token_hex(6)  # (this script is PID 1 of its namespace, as another run of it may be)
job = shm.job_name(os.getpid(), token)

def through_a_worker(values, pid=None):
    if pid is not None:  # the next process made gets this PID (a private PID namespace: nothing else forks)
        with open("/proc/sys/kernel/ns_last_pid", "w") as last:
            last.write(str(pid - 1))
    read, write = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(read)
        pool = torch_transport.worker_pool(job)
        os.write(write, pickle.dumps(pool.pack({"x": np.array(values)})))
        os._exit(0)
    os.close(write)
    data = b""
    while chunk := os.read(read, 1 << 16):
        data += chunk
    os.waitpid(child, 0)
    return torch_transport.unpack(pickle.loads(data))["x"].tolist(), child

first, pid = through_a_worker([1, 2, 3])
second, again = through_a_worker([7, 8, 9], pid)
assert again == pid, (again, pid)
print(first, second)
shm.remove_job(os.getpid(), token)
"""


def test_a_really_reused_pid(tmp_path: Path) -> None:
    """The same, with the kernel handing the dead worker's PID to the next (a private PID namespace: root only)."""
    unshare = shutil.which("unshare")
    if unshare is None or os.geteuid() != 0:
        pytest.skip("needs root and unshare(1) for a private PID namespace")
    script = tmp_path / "reuse.py"
    script.write_text(REUSED_PID_SCRIPT)
    run = subprocess.run([unshare, "--pid", "--fork", "--mount-proc", sys.executable, str(script)],
                         capture_output=True, text=True)  # fmt: skip
    if run.returncode and "unshare failed" in run.stderr:
        pytest.skip(f"no private PID namespace here: {run.stderr.strip()}")
    assert run.returncode == 0, run.stderr
    assert run.stdout.split("\n")[0] == "[1, 2, 3] [7, 8, 9]"


def test_a_slot_that_does_not_hold_the_batch_sent_is_refused() -> None:
    job = shm.job_name(os.getpid(), "header")
    try:
        pool = torch_transport.worker_pool(job)
        assert pool is not None
        wire = pool.pack({"x": np.arange(5)})
        assert wire is not None
        torch_transport.unpack(wire)
        stale = type(wire)(**{**wire.__dict__, "serial": wire.serial - 1})  # what the slot held before
        with pytest.raises(RuntimeError, match=r"-s0-g0: DataLoader worker .* sent batch 0 in this slot, which holds"):
            torch_transport.unpack(stale)
    finally:
        shm.remove_job(os.getpid(), "header")


def test_a_fill_that_fails_gives_its_slot_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """A copy into a slot that raises leaves the slot free (a regular slot) or its file removed (a one-off slot):
    before, the slot stayed leased for good and the one-off file stayed in the job's directory."""
    job = shm.job_name(os.getpid(), "fill")
    try:
        pool = torch_transport.worker_pool(job)
        assert pool is not None
        directory = os.path.dirname(pool.name)

        def broken(*args: Any) -> None:
            raise MemoryError("injected")

        monkeypatch.setattr(torch_transport, "_fill", broken)
        with pytest.raises(MemoryError):
            pool.pack({"x": np.arange(5)})
        assert not any(pool.flags[8 : 8 + torch_transport.MAX_SLOTS])
        pool.flags[8 : 8 + torch_transport.MAX_SLOTS] = b"\x01" * torch_transport.MAX_SLOTS  # every slot leased
        before = set(os.listdir(directory))
        with pytest.raises(MemoryError):
            pool.pack({"x": np.arange(5)})
        assert set(os.listdir(directory)) == before
    finally:
        shm.remove_job(os.getpid(), "fill")


# --- /dev/shm full -------------------------------------------------------------------------------------------


def _slots_fail(create: Any, path: str, size: int) -> Any:
    if re.search(r"-s\d+-g\d+$", path):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
    return create(path, size)


def _torch_sharing_fails(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("unable to allocate shared memory(shm): No space left on device (injected)")


@pytest.mark.parametrize(
    "layout", [{"x": "padded", "s": "csr"}, {"x": "packed", "s": "flat"}, {"x": "nested", "s": "padded"}]
)
def test_no_batch_is_lost_when_dev_shm_is_full(
    data_file: tuple[str, Any], layout: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No slot can be made, and torch's own shared memory fails too (in its queue feeder thread, where nobody
    hears it): every batch still arrives, whole, in every layout."""
    path, _ = data_file
    make = functools.partial(worker.make_source, path)
    expected = [_contents(batch) for batch in loader(make, 16, layout=layout)]
    monkeypatch.setattr(shm, "create", functools.partial(_slots_fail, shm.create))  # (inherited by forked workers)
    for name in ("_share_fd_cpu_", "_share_filename_cpu_"):
        monkeypatch.setattr(torch.UntypedStorage, name, _torch_sharing_fails)
    data = DataLoader(MinibatchDataset(make, 16, layout=layout), batch_size=None, num_workers=2, timeout=HANG)
    actual = [_contents(batch) for batch in data]  # (before: DataLoader timed out)
    assert len(actual) == len(expected)
    for (keys_a, tensors_a), (keys_e, tensors_e) in zip(actual, expected):
        assert keys_a == keys_e and tensors_a.keys() == tensors_e.keys()
        for name in tensors_a:
            np.testing.assert_array_equal(tensors_a[name], tensors_e[name])


def _contents(batch: Any) -> tuple[list[Any], dict[str, np.ndarray]]:
    values = {}
    for name, value in batch.tensors.items():
        if isinstance(value, torch.nn.utils.rnn.PackedSequence):
            value = torch.nn.utils.rnn.pad_packed_sequence(value, batch_first=True)[0]
        elif value.is_nested:
            value = torch.nested.to_padded_tensor(value, 0.0)
        elif value.layout == torch.sparse_csr:
            value = value.to_dense()
        values[name] = value.numpy().copy()
    for name, mask in batch.masks.items():
        values[f"mask:{name}"] = mask.numpy().copy()
    return batch.keys, values


def _send_fails(*args: Any, **kwargs: Any) -> Any:
    raise ValueError("a bug while packing (injected)")


def test_a_batch_that_cannot_be_sent_raises_in_the_main_process(
    data_file: tuple[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, _ = data_file
    monkeypatch.setattr(torch_transport.SlotPool, "pack", _send_fails)
    dataset = MinibatchDataset(functools.partial(worker.make_source, path), 16)
    data = DataLoader(dataset, batch_size=None, num_workers=2, timeout=HANG)
    with pytest.raises(RuntimeError, match=r"could not send a batch(.|\n)*a bug while packing \(injected\)"):
        list(data)


SMALL_SHM_SCRIPT = r"""
import functools, os, sys
sys.path.insert(0, sys.argv[1])
import torch_dist_worker as worker
from torch.utils.data import DataLoader
from cntkio.torch import MinibatchDataset

free = int(sys.argv[3]) * 1024
status = os.statvfs("/dev/shm")
fd = os.open("/dev/shm/filler", os.O_CREAT | os.O_RDWR)
os.posix_fallocate(fd, 0, status.f_bavail * status.f_frsize - free)
os.close(fd)
dataset = MinibatchDataset(functools.partial(worker.make_source, sys.argv[2]), 64, layout="padded")
keys = [key for batch in DataLoader(dataset, batch_size=None, num_workers=2, timeout=float(sys.argv[4]))
        for _, key in batch.keys]
print(len(keys), len(set(keys)))
"""


@pytest.mark.parametrize("free_kib", [300])
def test_a_nearly_full_dev_shm(tmp_path: Path, data_file: tuple[str, dict[int, Any]], free_kib: int) -> None:
    """A real tmpfs with a few hundred KiB free (a private mount namespace: root only)."""
    unshare = shutil.which("unshare")
    if unshare is None or os.geteuid() != 0:
        pytest.skip("needs root and unshare(1) for a private mount namespace")
    path, expected = data_file
    script = tmp_path / "small_shm.py"
    script.write_text(SMALL_SHM_SCRIPT)
    command = (f"mount -t tmpfs -o size=16m tmpfs /dev/shm && exec {sys.executable} {script} "
               f"{Path(worker.__file__).parent} {path} {free_kib} {HANG}")  # fmt: skip
    run = subprocess.run([unshare, "--mount", "sh", "-c", command], capture_output=True, text=True)
    if run.returncode and ("unshare failed" in run.stderr or "mount:" in run.stderr):
        pytest.skip(f"no private tmpfs here: {run.stderr.strip()}")
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.split() == [str(len(expected))] * 2  # (before: DataLoader timed out)


@pytest.fixture(scope="module")
def data_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[int, Any]]:
    path = tmp_path_factory.mktemp("transport") / "varying.ctf"
    return str(path), worker.write_ctf(path, 600)


def test_keys_that_cannot_be_computed_in_a_worker_raise_in_the_main_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """The batch's keys are computed when it leaves a worker (in torch's queue feeder thread, where an exception drops
    the batch and the loader waits forever): a failure there becomes an error the main process raises."""
    import pickle

    from cntkio._src.integrations import torch as cntkio_torch

    class Broken:
        def columns(self) -> Any:
            raise OSError("injected: the provenance cannot be read")

    batch = cntkio_torch.TorchMinibatch(tensors={"x": torch.arange(3)}, lengths={}, provenance=Broken())
    monkeypatch.setattr(cntkio_torch, "get_worker_info", lambda: object())
    wire = pickle.dumps(batch)  # what torch's feeder thread does: it must not raise there
    monkeypatch.undo()
    with pytest.raises(RuntimeError, match=r"could not send a batch(.|\n)*injected: the provenance cannot be read"):
        pickle.loads(wire)


# --- what crosses: arrays, the tensors made in the main process ---------------------------------------------------


@pytest.mark.parametrize("layout", ["auto", {"x": "packed", "s": "csr"}, {"x": "nested", "s": "padded"}, "flat"])
def test_a_worker_sends_arrays_and_the_main_process_makes_the_same_tensors(
    data_file: tuple[str, Any], layout: Any
) -> None:
    """A loader worker makes no tensor: its batches cross as the arrays of their layouts (the message's pickle holds
    no tensor) and the main process makes tensors equal to those of a pass without workers."""
    path, _ = data_file
    make = functools.partial(worker.make_source, path)
    dataset = MinibatchDataset(make, 16, layout=layout)
    info = type("WorkerInfo", (), {"num_workers": 1, "id": 0, "seed": 0})()
    source = make()
    batch = next(dataset._minibatches(0, None, info, None))
    assert "tensors" not in batch.__dict__  # (not made in the worker)
    token = f"arrays{os.urandom(4).hex()}"  # (a pool per job and process is kept: a new job per test)
    job = shm.job_name(os.getpid(), token)
    try:
        pool = torch_transport.worker_pool(job)
        assert pool is not None
        wire = pool.pack(batch.__getstate__())
        assert wire is not None and wire.arrays
        assert b"_rebuild" not in wire.data and b"_load_from_bytes" not in wire.data  # (how torch pickles tensors)
    finally:
        shm.remove_job(os.getpid(), token)
        source.close()
        dataset.close()
    expected = [_contents(batch) for batch in DataLoader(MinibatchDataset(make, 16, layout=layout), batch_size=None)]
    data = DataLoader(MinibatchDataset(make, 16, layout=layout), batch_size=None, num_workers=2, timeout=HANG)
    actual = [_contents(batch) for batch in data]
    assert [keys for keys, _ in actual] == [keys for keys, _ in expected]
    for (_, tensors_a), (_, tensors_e) in zip(actual, expected, strict=True):
        assert tensors_a.keys() == tensors_e.keys()
        for name in tensors_a:
            np.testing.assert_array_equal(tensors_a[name], tensors_e[name])


def _doubled(batch: Any) -> Any:
    """A collate_fn that changes a batch's tensors in the worker."""
    batch.tensors["x"] = batch.tensors["x"] * 2
    return batch


def test_tensors_a_worker_changed_arrive_as_changed(data_file: tuple[str, Any]) -> None:
    """A batch whose tensors were made and changed in the worker (here by a collate_fn) crosses as those tensors,
    not as the arrays it was made of."""
    path, _ = data_file
    make = functools.partial(worker.make_source, path)
    expected = [_contents(batch)[1]["x"] * 2 for batch in DataLoader(MinibatchDataset(make, 16), batch_size=None)]
    data = DataLoader(MinibatchDataset(make, 16), batch_size=None, num_workers=2, collate_fn=_doubled, timeout=HANG)
    actual = [_contents(batch)[1]["x"] for batch in data]
    assert len(actual) == len(expected)
    for got, want in zip(actual, expected, strict=True):
        np.testing.assert_array_equal(got, want)
