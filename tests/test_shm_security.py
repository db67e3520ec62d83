"""The shared-memory exchange of loader workers against another local user (issue 22, part 5): whatever a second
user plants at a name it can see or predict in ``/dev/shm`` — a directory, a chunk file, a positions file it later
truncates, symlinks at the positions or claim files — the job reads its own data, does not die, and writes nowhere
the other user chose; the clean-up of dead jobs removes only this user's files and follows no symlink.

The other user is a forked process that drops root for ``nobody`` before acting, so these tests run as root (as in
CI) and are skipped otherwise."""

from __future__ import annotations

import functools
import multiprocessing
import os
import signal
import stat
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("torch")

from torch.utils.data import DataLoader

from cntkio import DenseStream
from cntkio._src.api.source import MinibatchSource
from cntkio._src.formats.protocol import ChunkIndex, Deserializer, ParsedChunk, StreamInformation
from cntkio._src.integrations import shm
from cntkio._src.integrations.shared_chunks import ChunkExchange, _publish
from cntkio.torch import MinibatchDataset

NOBODY = 65534

pytestmark = [
    pytest.mark.skipif(not shm.available(), reason="needs /dev/shm"),
    pytest.mark.skipif(os.geteuid() != 0, reason="acting as a second user (nobody) needs root"),
]

_fork = multiprocessing.get_context("fork")


def _run_as_nobody(send: Connection, action: Callable[..., Any], args: tuple[Any, ...]) -> None:
    try:
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)
        send.send((True, action(*args)))
    except BaseException:
        send.send((False, traceback.format_exc()))


def as_nobody(action: Callable[..., Any], *args: Any) -> Any:
    """What ``action(*args)`` returns when a process of user nobody runs it."""
    receive, send = _fork.Pipe(duplex=False)
    process = _fork.Process(target=_run_as_nobody, args=(send, action, args))
    process.start()
    send.close()
    ok, value = receive.recv()
    process.join()
    assert ok, value
    return value


def remove_all(prefix: str) -> None:
    """Removes every entry of /dev/shm whose name starts with ``prefix``, whoever made it."""
    subprocess.run(["rm", "-rf", *(str(path) for path in shm.SHM_DIR.glob(f"{prefix}*"))], check=True)


@pytest.fixture
def job() -> Iterator[str]:
    """A job name (its files, and what the other user planted, are removed after the test)."""
    name = shm.job_name(os.getpid(), os.urandom(6).hex())
    yield name
    remove_all(name)


def chunk_file(tmp_path: Path, chunk: dict[str, DenseStream]) -> bytes:
    """The bytes of a published chunk file holding ``chunk`` (what an attacker writes)."""
    path = str(tmp_path / "crafted")
    _publish(path, chunk)
    return Path(path).read_bytes()


def plant(paths: dict[str, bytes | str | None], mode: int = 0o777) -> list[str]:
    """(As the other user.) Directories (None), files (bytes) and symlinks (str: their target), each where it can:
    returns the paths it could not make."""
    refused = []
    for path, what in paths.items():
        try:
            if what is None:
                os.mkdir(path)
                os.chmod(path, mode)
            elif isinstance(what, bytes):
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
                os.write(fd, what)
                os.fchmod(fd, 0o666)
                os.close(fd)
            else:
                os.symlink(what, path)
        except OSError:
            refused.append(path)
    return refused


# --- directories and chunk files ---------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", [0o700, 0o777])
def test_a_directory_another_user_made_first_is_refused(job: str, mode: int) -> None:
    as_nobody(plant, {f"{shm.SHM_DIR}/{job}": None}, mode)
    with pytest.raises(shm.NotPrivate, match=rf"{job}.*uid {NOBODY}"):
        ChunkExchange(job, 0, 0, 2, "c")


@pytest.mark.parametrize("mode", [0o700, 0o755, 0o777])
def test_a_directory_of_this_user_open_to_others_is_refused(job: str, mode: int) -> None:
    directory = shm.SHM_DIR / job
    directory.mkdir()
    directory.chmod(mode)
    if mode == 0o700:
        ChunkExchange(job, 0, 0, 2, "c").close()
    else:
        with pytest.raises(shm.NotPrivate, match=f"mode {mode:04o}"):
            ChunkExchange(job, 0, 0, 2, "c")


def test_a_symlink_in_place_of_the_directory_is_refused(job: str, tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    os.symlink(target, shm.SHM_DIR / job)
    with pytest.raises(shm.NotPrivate, match="symlink"):
        ChunkExchange(job, 0, 0, 2, "c")
    assert list(target.iterdir()) == []


def test_chunks_planted_at_predictable_names_are_never_read(job: str, tmp_path: Path) -> None:
    chunk = {"x": DenseStream(np.arange(6, dtype=np.float32).reshape(3, 2), np.array([0, 1, 3]))}
    forged = chunk_file(tmp_path, {"x": DenseStream(np.full((3, 2), -7, np.float32), np.array([0, 1, 3]))})
    as_nobody(plant, {f"{shm.SHM_DIR}/{job}-chunks-e0": None, f"{shm.SHM_DIR}/{job}-chunks-e0/c-0-3-0": forged})
    first = ChunkExchange(job, 0, 0, 2, "c")  # (the job's directory exists now: the other user can't make it)
    inside = f"{shm.SHM_DIR}/{job}/chunks-e0/c-0-3-0"
    assert as_nobody(plant, {f"{shm.SHM_DIR}/{job}/chunks-e0": None, inside: forged}) == [
        f"{shm.SHM_DIR}/{job}/chunks-e0",
        inside,
    ]
    second = ChunkExchange(job, 0, 1, 2, "c")
    for exchange in (first, second):
        received = exchange.load((0, 3, 0), lambda: ParsedChunk(chunk))
        assert received is not None
        np.testing.assert_array_equal(received["x"].values, chunk["x"].values)
    first.close()
    second.close()


def test_nothing_inside_the_job_directory_is_open_to_another_user(job: str) -> None:
    exchange = ChunkExchange(job, 0, 0, 2, "c")
    exchange.load((0, 0, 0), lambda: {"x": DenseStream(np.zeros((1, 1), np.float32), np.array([0, 1]))})
    listed = [str(shm.SHM_DIR / job), *(str(path) for path in (shm.SHM_DIR / job).rglob("*"))]
    assert len(listed) > 3
    for path in listed:
        status = os.lstat(path)
        assert status.st_uid == os.geteuid() and stat.S_IMODE(status.st_mode) & 0o077 == 0, path
    assert sorted(as_nobody(_try_to_open, listed)) == sorted(listed)
    exchange.close()


def _try_to_open(paths: list[str]) -> list[str]:
    refused = []
    for path in paths:
        try:
            os.close(os.open(path, os.O_RDONLY))
        except PermissionError:
            refused.append(path)
    return refused


# --- positions and claims ----------------------------------------------------------------------------------------


def _truncate(paths: list[str]) -> list[str]:
    done = []
    for path in paths:
        try:
            os.truncate(path, 0)
            done.append(path)
        except OSError:
            pass
    return done


def _job_process(job: str, ready: Connection, go: Connection) -> None:
    exchange = ChunkExchange(job, 0, 0, 2, "c")
    ready.send(True)
    go.recv()
    for index in range(1, 5):
        exchange.at(index)
    exchange.close()


def test_a_positions_file_truncated_by_another_user_kills_no_worker(job: str) -> None:
    """Measured before: a planted positions file truncated once mapped killed the workers (SIGBUS)."""
    as_nobody(plant, {f"{shm.SHM_DIR}/{job}-positions": bytes(4096)})
    ready_receive, ready_send = _fork.Pipe(duplex=False)
    go_receive, go_send = _fork.Pipe(duplex=False)
    worker = _fork.Process(target=_job_process, args=(job, ready_send, go_receive))
    worker.start()
    assert ready_receive.recv()
    positions = [f"{shm.SHM_DIR}/{job}-positions", f"{shm.SHM_DIR}/{job}/positions"]
    truncated = as_nobody(_truncate, positions)
    go_send.send(True)
    worker.join()
    assert worker.exitcode == 0, f"the job's worker ended with {worker.exitcode} (SIGBUS is -{signal.SIGBUS})"
    assert f"{shm.SHM_DIR}/{job}/positions" not in truncated


def test_a_symlinked_positions_file_writes_nothing_elsewhere(job: str, tmp_path: Path) -> None:
    """Measured before: a symlink at the positions file's name made the job overwrite a root-only file."""
    secret = tmp_path / "root-only"
    secret.write_bytes(b"s" * 4096)
    secret.chmod(0o600)
    names = [f"{job}-positions", *(f"{job}-positions.{os.getpid() + n}" for n in range(4)), f"{job}/positions"]
    as_nobody(plant, {f"{shm.SHM_DIR}/{name}": str(secret) for name in names})
    exchange = ChunkExchange(job, 0, 0, 2, "c")
    exchange.at(7)
    exchange.close()
    assert secret.read_bytes() == b"s" * 4096


def test_symlinked_claims_create_no_file_elsewhere(job: str, tmp_path: Path) -> None:
    """Measured before: symlinks at the claim files' names made the job create files where another user chose."""
    chosen = tmp_path / "chosen"
    chosen.mkdir()
    planted: list[dict[str, bytes | str | None]] = []
    for directory in (f"{shm.SHM_DIR}/{job}-chunks-e0", f"{shm.SHM_DIR}/{job}/chunks-e0"):
        planted.append({directory: None, f"{directory}/c-0-1-0.claim": str(chosen / "claim"),
                        f"{directory}/c-0-1-0.local": str(chosen / "local")})  # fmt: skip
    as_nobody(plant, planted[0])
    exchange = ChunkExchange(job, 0, 0, 2, "c")
    assert as_nobody(plant, planted[1]) == list(planted[1])
    bad = ParsedChunk({"x": DenseStream(np.zeros((1, 1), np.float32), np.array([0, 1]))}, invalid=np.ones(1, np.uint8))
    exchange.load((0, 1, 0), lambda: bad)  # (its parse counted errors: a ".local" marker is left for the others)
    exchange.close()
    assert list(chosen.iterdir()) == []


# --- a whole DataLoader job ---------------------------------------------------------------------------------------

CHUNKS, PER_CHUNK = 8, 25


class Numbered(Deserializer):
    """Sequence ``k`` is one sample ``[k]``; every ``get_chunk`` appends the chunk number to ``log``."""

    def __init__(self, log: str):
        self.log = log
        self.info = StreamInformation("x", 0, "dense", np.dtype(np.float32), (1,))

    def stream_infos(self) -> list[StreamInformation]:
        return [self.info]

    def num_chunks(self) -> int:
        return CHUNKS

    def chunk_index(self, chunk: int) -> ChunkIndex:
        keys = np.arange(PER_CHUNK * chunk, PER_CHUNK * (chunk + 1))
        return ChunkIndex(chunk, keys, np.ones(PER_CHUNK, np.int64))

    def get_chunk(self, chunk: int) -> dict[str, DenseStream]:
        fd = os.open(self.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(fd, f"{chunk}\n".encode())
        finally:
            os.close(fd)
        keys = np.arange(PER_CHUNK * chunk, PER_CHUNK * (chunk + 1), dtype=np.float32)
        return {"x": DenseStream(keys.reshape(-1, 1), np.arange(PER_CHUNK + 1))}


def numbered(log: str) -> MinibatchSource:
    return MinibatchSource(Numbered(log), max_sweeps=1, randomization_window_in_chunks=3, randomization_seed=5)


def test_a_loader_job_reads_its_own_data_whatever_another_user_planted(tmp_path: Path) -> None:
    """Measured before: chunk files planted under the next epoch's predictable names replaced 14,438 of 40,000 rows.
    Here the other user knows the job's name (its PID and token) and the corpus's, and plants every chunk."""
    log = tmp_path / "parses.log"
    dataset = MinibatchDataset(functools.partial(numbered, str(log)), 20)
    job = shm.job_name(*dataset._job)
    probe = MinibatchDataset(functools.partial(numbered, str(tmp_path / "probe.log")), 20)
    exchange = probe._exchange(numbered(str(tmp_path / "probe.log")), 0, 0, 2)
    assert exchange is not None
    corpus = exchange.corpus
    exchange.close()
    del probe
    planted: dict[str, bytes | str | None] = {f"{shm.SHM_DIR}/{job}-chunks-e0": None}
    for chunk in range(CHUNKS):
        forged = chunk_file(tmp_path, {"x": DenseStream(np.full((PER_CHUNK, 1), -1, np.float32),
                                                        np.arange(PER_CHUNK + 1))})  # fmt: skip
        planted[f"{shm.SHM_DIR}/{job}-chunks-e0/{corpus}-0-{chunk}-0"] = forged
    try:
        as_nobody(plant, planted)
        rows = np.concatenate([batch["x"].numpy().reshape(-1)
                               for batch in DataLoader(dataset, batch_size=None, num_workers=2)])  # fmt: skip
        np.testing.assert_array_equal(np.sort(rows), np.arange(CHUNKS * PER_CHUNK))
        assert sorted(int(line) for line in log.read_text().split()) == list(range(CHUNKS))  # (still shared)
    finally:
        remove_all(job)


# --- clean-up of dead jobs ----------------------------------------------------------------------------------------


def _dead_pid() -> int:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(gone.stdout)


def _make_old(paths: list[str]) -> None:
    for path in paths:
        os.utime(path, (0, 1), follow_symlinks=False)


def test_dead_jobs_clean_up_removes_only_this_users_files_and_follows_no_symlink(tmp_path: Path) -> None:
    dead = _dead_pid()
    prefix = f"{shm.SHM_DIR}/cntkio-{dead}-"
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "data").write_bytes(b"keep")
    theirs = [f"{prefix}aaaaaaaaaaaa-w1-flags", f"{prefix}aaaaaaaaaaab"]
    try:
        as_nobody(plant, {theirs[0]: b"x", theirs[1]: None, f"{prefix}aaaaaaaaaaac": str(victim)}, 0o700)
        as_nobody(_make_old, [*theirs, f"{prefix}aaaaaaaaaaac"])
        mine = [f"{prefix}bbbbbbbbbbbb", f"{prefix}bbbbbbbbbbbc"]
        os.mkdir(mine[0], 0o700)
        Path(mine[0], "positions").write_bytes(b"x")
        os.symlink(victim, mine[1])
        _make_old([f"{mine[0]}/positions", *mine])
        shm.remove_stale()
        assert all(os.path.lexists(path) for path in theirs)  # (root could remove them: it must not)
        assert not any(os.path.lexists(path) for path in mine)  # (the symlink itself goes)
        assert (victim / "data").read_bytes() == b"keep"
    finally:
        remove_all(f"cntkio-{dead}-")


Entry = tuple[bool, str, bool, bool, bool]  # (this user's, kind, its job's process alive, old, what is in it old)


def _make(entries: list[tuple[str, str, bool, bool]], victim: str) -> None:
    """Makes entries (path, kind: "file", "directory" or "symlink" to ``victim``, old, what is inside old)."""
    for path, kind, old, inside_old in entries:
        if kind == "directory":
            os.mkdir(path, 0o700)
            Path(path, "positions").write_bytes(b"x")
            if inside_old:
                os.utime(Path(path, "positions"), (0, 1))
        elif kind == "file":
            Path(path).write_bytes(b"x")
        else:
            os.symlink(victim, path)
        if old:
            os.utime(path, (0, 1), follow_symlinks=False)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(entries=st.lists(st.tuples(st.booleans(), st.sampled_from(["file", "directory", "symlink"]), st.booleans(),
                                  st.booleans(), st.booleans()), max_size=8))  # fmt: skip
def test_dead_jobs_clean_up_removes_just_this_users_old_entries_of_dead_jobs(
    entries: list[Entry], tmp_path: Path
) -> None:
    dead = _dead_pid()
    victim = tempfile.mkdtemp(dir=tmp_path)
    Path(victim, "data").write_bytes(b"keep")
    os.chmod(victim, 0o755)
    paths = [f"{shm.SHM_DIR}/cntkio-{os.getpid() if alive else dead}-{number:012x}"
             for number, (_, _, alive, _, _) in enumerate(entries)]  # fmt: skip
    made = [(path, kind, old, inside_old) for path, (_, kind, _, old, inside_old) in zip(paths, entries)]
    try:
        as_nobody(_make, [what for what, entry in zip(made, entries) if not entry[0]], victim)
        _make([what for what, entry in zip(made, entries) if entry[0]], victim)
        shm.remove_stale()
        for path, (mine, kind, alive, old, inside_old) in zip(paths, entries):
            removed = mine and not alive and old and (inside_old or kind != "directory")
            assert os.path.lexists(path) != removed, (path, mine, kind, alive, old, inside_old)
        assert Path(victim, "data").read_bytes() == b"keep"
    finally:
        for path in paths:
            remove_all(Path(path).name)


def test_a_dead_job_still_in_use_somewhere_is_left_alone(tmp_path: Path) -> None:
    """A process of another PID namespace looks dead: its job's directory is kept while anything in it is young."""
    dead = _dead_pid()
    directory = shm.SHM_DIR / f"cntkio-{dead}-cccccccccccc"
    try:
        (directory / "chunks-e3").mkdir(mode=0o700, parents=True)
        os.utime(directory, (0, 1))  # (the job's directory itself changes only when an epoch begins)
        shm.remove_stale()
        assert directory.exists()
        _make_old([str(directory / "chunks-e3"), str(directory)])
        shm.remove_stale()
        assert not directory.exists()
    finally:
        remove_all(directory.name)


def test_removing_a_job_leaves_another_users_files(job: str) -> None:
    theirs = f"{shm.SHM_DIR}/{job}-w1-flags"
    as_nobody(plant, {theirs: b"x"})
    ChunkExchange(job, 0, 0, 2, "c").close()
    token = job.split("-", 2)[2]
    shm.remove_job(os.getpid(), token)
    assert os.path.exists(theirs)
    assert not (shm.SHM_DIR / job).exists()


def test_a_loader_job_whose_directory_another_user_made_reads_alone_and_says_so(tmp_path: Path) -> None:
    log = tmp_path / "parses.log"
    dataset = MinibatchDataset(functools.partial(numbered, str(log)), 20)
    job = shm.job_name(*dataset._job)
    try:
        as_nobody(plant, {f"{shm.SHM_DIR}/{job}": None})
        with pytest.warns(RuntimeWarning, match=f"parse their chunks each: {shm.SHM_DIR}/{job}: .* uid {NOBODY}"):
            assert dataset._exchange(numbered(str(tmp_path / "probe.log")), 0, 0, 2) is None
        rows = np.concatenate([batch["x"].numpy().reshape(-1)
                               for batch in DataLoader(dataset, batch_size=None, num_workers=2)])  # fmt: skip
        np.testing.assert_array_equal(np.sort(rows), np.arange(CHUNKS * PER_CHUNK))
        assert sorted(int(line) for line in log.read_text().split()) == sorted(list(range(CHUNKS)) * 2)
    finally:
        remove_all(job)
