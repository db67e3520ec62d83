"""Remote data (issue 27 point 1): every file-backed format read from real servers on loopback — an HTTP server with
Range support (tests/storage_servers.py) and moto's S3-compatible server — through fsspec, compared with the local
reading of the same files: ranged reads per chunk, retries, objects changing under the reader, the index cache,
checkpoints that move between a local copy and the bucket."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("fsspec")
pytest.importorskip("aiohttp")

import cntkio
from cntkio import (
    Base64ImageDeserializer,
    CBFDeserializer,
    CTFDeserializer,
    FormatError,
    HTKFeatureDeserializer,
    HTKMLFDeserializer,
    MinibatchSource,
    StreamDef,
    StreamDefs,
    remote,
    write_cbf,
)
from cntkio import transforms as T
from storage_servers import RangeServer, moto_s3

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "data"
STREAMS = StreamDefs(features=StreamDef(shape=3), label=StreamDef(shape=4, is_sparse=True))


def write_ctf(path: Path, sequences: int, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    with open(path, "w") as f:
        for i in range(sequences):
            for step in range(int(rng.integers(1, 6))):
                values = " ".join(f"{v:.3f}" for v in rng.random(3))
                label = f" |label {int(rng.integers(0, 4))}:1" if step == 0 else ""
                f.write(f"{i} |features {values}{label}\n")
    return path


def contents(source: MinibatchSource, minibatch: int = 64, limit: int | None = None) -> list[Any]:
    """Every minibatch's keys and each stream's values (dense as arrays, sparse as CSR triples), as lists."""
    out: list[Any] = []
    while limit is None or len(out) < limit:
        batch = source.next_minibatch(minibatch)
        if not batch:
            break
        entry: list[Any] = []
        for info in sorted(batch, key=lambda i: i.name):
            data = batch[info]
            if data.is_sparse:
                csr = data.csr
                entry.append([csr.data.tolist(), csr.indices.tolist(), csr.indptr.tolist()])
            else:
                entry.append(np.asarray(data.asarray()).tolist())
            entry.append([key for _, key in data.keys or []])  # (keys without the file's name)
        out.append(entry)
    return out


def sequences(deserializer: Any) -> list[tuple[Any, list[Any]]]:
    """Every sequence of a deserializer in file order: its key and each stream's values."""
    out = []
    index = deserializer.sequence_index()
    for chunk in range(len(index.chunk_starts) - 1):
        parsed = deserializer.get_chunk(chunk)
        for name in sorted(parsed):
            stream = parsed[name]
            out.append((chunk, name, [np.asarray(v).tolist() for v in _values(stream)]))
    return out


def _values(stream: Any) -> list[Any]:
    if hasattr(stream, "indptr"):
        return [stream.values, stream.indices, stream.indptr, stream.seq_offsets]
    return [stream.values, stream.seq_offsets]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RangeServer, Path]]:
    root = tmp_path_factory.mktemp("served")
    server = RangeServer(str(root))
    remote.configure(retries=3, backoff=0.01, cache_dir=str(root / ".cache"))
    yield server, root
    server.close()


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    pytest.importorskip("s3fs")
    pytest.importorskip("moto")
    with moto_s3() as options:
        remote.configure("s3", **options)
        import boto3
        import s3fs

        client = boto3.client("s3", endpoint_url=options["endpoint_url"], aws_access_key_id="testing",
                              aws_secret_access_key="testing", region_name="us-east-1")  # fmt: skip
        client.create_bucket(Bucket="corpus")
        fs = s3fs.S3FileSystem(**options)
        examples = EXAMPLES
        for name in ["sequences.ctf", "sequences.cbf", "shards/part-0.ctf", "shards/part-1.ctf", "shards/part-2.ctf",
                     "speech/features.ark", "speech/features.scp", "speech/labels.mlf", "speech/states.list",
                     "images/images.b64"]:  # fmt: skip
            fs.put_file(str(examples / name), f"corpus/{name}")
        yield "s3://corpus/"


def test_ctf_over_http_reads_what_the_local_file_holds_and_fetches_each_chunk_once(
    served: tuple[RangeServer, Path],
) -> None:
    server, root = served
    local = write_ctf(root / "a.ctf", 3000)
    url = server.url + "a.ctf"
    here = CTFDeserializer(str(local), STREAMS, chunk_size_in_bytes=16 << 10)
    there = CTFDeserializer(url, STREAMS, chunk_size_in_bytes=16 << 10)
    assert there.sequence_index().num_sequences == here.sequence_index().num_sequences
    assert sequences(there) == sequences(here)
    # a chunk read fetches the chunk's bytes (and no more): ranged, not the whole object
    index = there.sequence_index()
    before = remote.fetch_stats()
    there.get_chunk(3)
    fetched = remote.fetch_stats().bytes - before.bytes
    a, b = int(index.chunk_starts[3]), int(index.chunk_starts[4])
    chunk_bytes = int(there._offsets[b - 1]) + int(there._sizes[b - 1]) - int(there._offsets[a])
    assert 0 < fetched <= 1.1 * chunk_bytes
    assert fetched < local.stat().st_size / 4


def test_minibatch_source_over_http_equals_local_and_a_checkpoint_moves_between_them(
    served: tuple[RangeServer, Path],
) -> None:
    server, root = served
    local = write_ctf(root / "b.ctf", 2000, seed=1)
    url = server.url + "b.ctf"

    def source(path: str) -> MinibatchSource:
        reader = CTFDeserializer(path, STREAMS, chunk_size_in_bytes=8 << 10)
        return MinibatchSource(reader, randomization_window_in_chunks=4, max_sweeps=2, randomization_seed=7)

    assert contents(source(url)) == contents(source(str(local)))
    # a checkpoint taken on the local copy restores on the served object, and the other way round
    first = source(str(local))
    contents(first, limit=9)
    state = first.get_checkpoint_state()
    rest_local = contents(first)
    moved = source(url)
    moved.restore_from_checkpoint(state)
    assert contents(moved) == rest_local
    back = source(url)
    contents(back, limit=5)
    state = back.get_checkpoint_state()
    restored = source(str(local))
    restored.restore_from_checkpoint(state)
    assert contents(restored) == contents(back)


def test_transient_errors_are_retried_and_a_persistent_one_names_the_object_and_range(
    served: tuple[RangeServer, Path],
) -> None:
    server, root = served
    write_ctf(root / "c.ctf", 500, seed=2)
    url = server.url + "c.ctf"
    reader = CTFDeserializer(url, STREAMS, chunk_size_in_bytes=4 << 10)
    expected = sequences(reader)
    before = remote.fetch_stats()
    server.fail(2)  # two 503 responses
    assert sequences(reader) == expected
    assert remote.fetch_stats().retries - before.retries >= 1  # (a failed metadata request may be retried by fsspec)
    server.fail(2, drop=True)  # two connections closed unanswered (retried by us, or by the HTTP client itself)
    assert sequences(reader) == expected
    server.fail(1000)
    with pytest.raises(OSError, match=r"c\.ctf.*after 4 attempts"):
        reader.get_chunk(1)
    server.fail(0)
    assert sequences(reader) == expected  # and it reads again once the server is back


def test_an_object_rewritten_under_the_reader_is_an_error_never_other_data(served: tuple[RangeServer, Path]) -> None:
    server, root = served
    path = write_ctf(root / "d.ctf", 800, seed=3)
    url = server.url + "d.ctf"
    reader = CTFDeserializer(url, STREAMS, chunk_size_in_bytes=4 << 10)
    reader.get_chunk(0)
    original = path.read_bytes()
    changed = original.replace(b"0.", b"9.", 1)  # the same size, other values
    assert len(changed) == len(original)
    path.write_bytes(changed)
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    with pytest.raises(FormatError, match=r"d\.ctf.*changed since it was indexed.*another version"):
        reader.get_chunk(0)
    path.write_bytes(original[: len(original) // 2])  # and shorter
    with pytest.raises(FormatError, match=r"d\.ctf"):
        reader.get_chunk(reader.sequence_index().chunk_starts.shape[0] - 2)


def test_the_index_cache_of_remote_data_is_local_and_keyed_by_version(
    served: tuple[RangeServer, Path], tmp_path: Path
) -> None:
    server, root = served
    path = write_ctf(root / "e.ctf", 20000, seed=4)
    url = server.url + "e.ctf"
    cold = CTFDeserializer(url, STREAMS, cache_index=True, index_cache_dir=str(tmp_path))
    assert list(tmp_path.glob("e.ctf.*.cntkio-index"))
    before = remote.fetch_stats()
    warm = CTFDeserializer(url, STREAMS, cache_index=True, index_cache_dir=str(tmp_path))
    assert remote.fetch_stats().bytes - before.bytes < path.stat().st_size / 4  # not fetched whole again
    assert sequences(warm) == sequences(cold)
    before = remote.fetch_stats()
    default = CTFDeserializer(url, STREAMS)  # (remote data: the index cache is on, in the local cache directory)
    import pickle

    pickle.loads(pickle.dumps(default))  # (a pickled copy, as a spawned worker gets: loads the index too)
    CTFDeserializer(url, STREAMS)
    assert remote.fetch_stats().bytes - before.bytes < path.stat().st_size * 1.5  # (indexed once, not three times)
    path.write_bytes(path.read_bytes() + b"3000 |features 1 2 3 |label 1:1\n")  # a new version: indexed again
    again = CTFDeserializer(url, STREAMS, cache_index=True, index_cache_dir=str(tmp_path))
    assert again.sequence_index().num_sequences == cold.sequence_index().num_sequences + 1


def test_s3_glob_of_shards_cbf_and_base64_read_as_locally(s3: str) -> None:
    shards = CTFDeserializer(s3 + "shards/part-*.ctf", StreamDefs(features=StreamDef(shape=3)))
    local = CTFDeserializer(str(EXAMPLES / "shards" / "part-*.ctf"), StreamDefs(features=StreamDef(shape=3)))
    assert sequences(shards) == sequences(local)
    cbf = CBFDeserializer(s3 + "sequences.cbf")
    assert sequences(cbf) == sequences(CBFDeserializer(str(EXAMPLES / "sequences.cbf")))
    images = StreamDefs(features=StreamDef(field="image", transforms=[T.scale(16, 16, 3)]),
                        labels=StreamDef(field="label", shape=4))  # fmt: skip
    b64 = Base64ImageDeserializer(s3 + "images/images.b64", images)
    here = Base64ImageDeserializer(str(EXAMPLES / "images" / "images.b64"), images)
    assert sequences(b64) == sequences(here)


def test_s3_htk_features_and_mlf_labels_join_as_locally(s3: str) -> None:
    def speech(root: str) -> MinibatchSource:
        features = HTKFeatureDeserializer(StreamDefs(features=StreamDef(shape=8, scp=root + "speech/features.scp",
                                                                        context=(1, 1))))  # fmt: skip
        labels = HTKMLFDeserializer(
            root + "speech/states.list", StreamDefs(labels=StreamDef(shape=5, mlf=root + "speech/labels.mlf"))
        )
        return MinibatchSource([features, labels], randomize=False, max_sweeps=1)

    assert contents(speech(s3), 16) == contents(speech(str(EXAMPLES) + "/"), 16)


def test_a_cbf_written_locally_reads_from_the_bucket_with_ranged_chunk_reads(s3: str, tmp_path: Path) -> None:
    import s3fs

    local = write_cbf(CTFDeserializer(str(write_ctf(tmp_path / "f.ctf", 4000, seed=5)), STREAMS), tmp_path / "f.cbf",
                      chunk_size_in_bytes=16 << 10)  # fmt: skip
    s3fs.S3FileSystem(**remote.settings().storage_options["s3"]).put_file(str(local), "corpus/f.cbf")
    there, here = CBFDeserializer(s3 + "f.cbf"), CBFDeserializer(str(local))
    assert sequences(there) == sequences(here)
    before = remote.fetch_stats()
    there.get_chunk(2)
    fetched = remote.fetch_stats().bytes - before.bytes
    assert 0 < fetched <= 1.1 * int(there.chunk_file_bytes()[2])


def test_formats_without_remote_reading_say_so(served: tuple[RangeServer, Path]) -> None:
    server, _ = served
    with pytest.raises(cntkio.ConfigError, match="remote"):
        cntkio.KaldiDeserializer(StreamDefs(features=StreamDef(shape=3, scp=server.url + "feats.scp")))


def test_without_fsspec_the_error_says_what_to_install(tmp_path: Path) -> None:
    code = (
        "import sys; sys.modules['fsspec'] = None\n"
        "from cntkio import CTFDeserializer, StreamDef\n"
        "try:\n    CTFDeserializer('s3://bucket/x.ctf', {'x': StreamDef(shape=1)})\n"
        "except ImportError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "pip install 'cntkio[remote]'" in out


def test_a_forked_child_reads_through_its_own_staging_file(served: tuple[RangeServer, Path]) -> None:
    server, root = served
    write_ctf(root / "g.ctf", 1000, seed=6)
    reader = CTFDeserializer(server.url + "g.ctf", STREAMS, chunk_size_in_bytes=4 << 10)
    expected = sequences(reader)
    parent_file = os.fstat(reader.data_file.fd).st_ino  # (the child's staging file: another file, same number)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child reads every chunk while the parent does too: neither releases the other's ranges
        ok = False
        try:
            os.close(read)
            ok = sequences(reader) == expected and os.fstat(reader.data_file.fd).st_ino != parent_file
        finally:
            os.write(write, b"1" if ok else b"0")
            os._exit(0)
    os.close(write)
    assert sequences(reader) == expected
    assert os.read(read, 1) == b"1"
    os.waitpid(pid, 0)


FORK_THEN_READ = r"""
import gc, os, sys
sys.path.insert(0, sys.argv[2])
from storage_servers import RangeServer
from cntkio import CTFDeserializer, StreamDef, StreamDefs
server = RangeServer(sys.argv[1])
reader = CTFDeserializer(server.url + "f.ctf", StreamDefs(x=StreamDef(shape=3)), chunk_size_in_bytes=4096)
expected = [reader.get_chunk(c)["x"].values.sum() for c in range(reader.num_chunks())]  # (connections pooled)
for _ in range(3):
    pid = os.fork()
    if pid == 0:  # the child reads with a filesystem of its own; the parent's is dropped and collected here
        reader.get_chunk(0)
        gc.collect()
        os._exit(0)
    os.waitpid(pid, 0)
    assert [reader.get_chunk(c)["x"].values.sum() for c in range(reader.num_chunks())] == expected
print("ok")
"""


def test_a_forked_child_leaves_the_parents_connections_alone(tmp_path: Path) -> None:
    # A child's copy of the parent's event loop shares the parent's epoll instance: closing the parent's dropped
    # filesystem in the child took the parent's sockets out of it, and the parent's next read hung.
    with open(tmp_path / "f.ctf", "w") as f:
        f.writelines(f"{i} |x {i} 1 2\n" for i in range(3000))
    tests = str(Path(__file__).resolve().parent)
    out = subprocess.run([sys.executable, "-c", FORK_THEN_READ, str(tmp_path), tests], capture_output=True, text=True,
                         timeout=60)  # fmt: skip
    assert out.stdout.strip() == "ok", out.stderr[-2000:]


def test_an_image_map_over_http_reads_the_images_it_names_there(served: tuple[RangeServer, Path]) -> None:
    server, root = served
    shutil.copytree(EXAMPLES / "images", root / "images", dirs_exist_ok=True)
    streams = StreamDefs(features=StreamDef(field="image", transforms=[T.scale(16, 16, 3)]),
                         labels=StreamDef(field="label", shape=4))  # fmt: skip
    there = cntkio.ImageDeserializer(server.url + "images/map.txt", streams)  # `...` is the map's URL folder
    here = cntkio.ImageDeserializer(str(EXAMPLES / "images" / "map.txt"), streams)
    assert sequences(there) == sequences(here)
    (root / "images" / "img3.png").unlink()  # an image gone: an error naming it and where the map lists it
    with pytest.raises(FormatError, match=r"img3\.png.*map\.txt|map\.txt.*img3\.png"):
        sequences(there)


def test_a_cbf_reader_forked_into_a_worker_reads_its_own_staging_file(s3: str) -> None:
    reader = CBFDeserializer(s3 + "sequences.cbf")
    expected = sequences(reader)
    held = reader.data_file.staged([(0, reader.data_file.size // 2)])
    held.__enter__()  # the parent holds half the file staged while the child reads (it must not read the parent's)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # (the native CbfFile keeps the descriptor number it was opened with)
        answer = b"0"
        try:
            os.close(read)
            answer = b"1" if sequences(reader) == expected else b"0 other data"
        except BaseException as error:
            answer = f"0 {error!r}".encode()
        finally:
            os.write(write, answer)
            os._exit(0)
    os.close(write)
    answer = os.read(read, 1000)
    os.waitpid(pid, 0)
    held.__exit__(None, None, None)
    assert answer == b"1"
    assert sequences(reader) == expected


def test_a_pickled_reader_refuses_an_object_rewritten_with_the_same_size(served: tuple[RangeServer, Path]) -> None:
    import pickle

    server, root = served
    path = write_ctf(root / "h.ctf", 300, seed=7)
    reader = CTFDeserializer(server.url + "h.ctf", STREAMS)
    pickled = pickle.dumps(reader)
    assert sequences(pickle.loads(pickled)) == sequences(reader)
    original = path.read_bytes()
    path.write_bytes(original.replace(b"0.", b"9.", 1))
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    with pytest.raises(FormatError, match=r"changed since the deserializer was pickled.*another version"):
        pickle.loads(pickled)


def test_a_transient_failure_while_opening_is_retried_and_a_missing_object_is_not(
    served: tuple[RangeServer, Path],
) -> None:
    server, root = served
    write_ctf(root / "i.ctf", 100, seed=8)
    server.fail(2)
    assert CTFDeserializer(server.url + "i.ctf", STREAMS).sequence_index().num_sequences == 100
    before = remote.fetch_stats()
    with pytest.raises(FileNotFoundError):
        CTFDeserializer(server.url + "missing.ctf", STREAMS)
    assert remote.fetch_stats().retries == before.retries


def test_a_local_name_with_a_double_colon_is_a_local_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cntkio._src.formats.remote import is_remote

    assert not is_remote("exp::1.ctf") and not is_remote("a::b/c.ctf") and not is_remote("file:///tmp/x.ctf")
    assert is_remote("simplecache::s3://bucket/x.ctf") and is_remote("s3://bucket/x.ctf")
    monkeypatch.chdir(tmp_path)
    write_ctf(tmp_path / "exp::1.ctf", 20)
    assert CTFDeserializer("exp::1.ctf", STREAMS).sequence_index().num_sequences == 20


def test_fetches_are_bounded_by_the_concurrency_setting(served: tuple[RangeServer, Path]) -> None:
    server, root = served
    write_ctf(root / "j.ctf", 4000, seed=9)
    asked: list[int] = []
    settings = remote.settings()
    part, concurrency = settings.part_bytes, settings.concurrency
    remote.configure(part_bytes=1 << 16, concurrency=3)
    try:
        reader = CTFDeserializer(server.url + "j.ctf", STREAMS, chunk_size_in_bytes=1 << 20)
        fs = reader.data_file.object.fs
        original = fs.cat_ranges

        def counting(paths: list[str], starts: list[int], ends: list[int], **kwargs: Any) -> Any:
            asked.append(len(paths))
            return original(paths, starts, ends, **kwargs)

        fs.cat_ranges = counting
        reader.get_chunk(0)
    finally:
        remote.configure(part_bytes=part, concurrency=concurrency)
    assert asked and max(asked) <= 3 and sum(asked) >= 4  # a chunk of several parts, asked for 3 at a time


def test_a_pickled_reader_carries_its_storage_options_to_a_new_process(s3: str) -> None:
    import pickle

    pickled = pickle.dumps(CTFDeserializer(s3 + "sequences.ctf", StreamDefs(features=StreamDef(shape=3))))
    code = "import pickle, sys; print(pickle.loads(sys.stdin.buffer.read()).sequence_index().num_sequences)"
    out = subprocess.run([sys.executable, "-c", code], input=pickled, capture_output=True, check=True).stdout
    assert out.strip() == b"12"


def test_a_chained_url_gives_each_layer_its_options(s3: str) -> None:
    chained = CTFDeserializer("simplecache::" + s3 + "sequences.ctf", StreamDefs(features=StreamDef(shape=3)))
    local = CTFDeserializer(str(EXAMPLES / "sequences.ctf"), StreamDefs(features=StreamDef(shape=3)))
    assert sequences(chained) == sequences(local)


def test_the_commands_say_they_read_local_files(served: tuple[RangeServer, Path]) -> None:
    server, root = served
    write_ctf(root / "k.ctf", 10)
    for command in ("inspect", "validate", "stats", "explain"):
        out = subprocess.run([sys.executable, "-m", "cntkio", command, server.url + "k.ctf"], capture_output=True,
                             text=True)  # fmt: skip
        assert out.returncode != 0 and "is remote: cntkio's commands read local files" in out.stderr, command


def test_a_base64_chunk_of_several_images_is_fetched_in_one_round(served: tuple[RangeServer, Path]) -> None:
    server, root = served
    shutil.copy(EXAMPLES / "images" / "images.b64", root / "images.b64")
    streams = StreamDefs(features=StreamDef(field="image", transforms=[T.scale(16, 16, 3)]),
                         labels=StreamDef(field="label", shape=4))  # fmt: skip
    there = Base64ImageDeserializer(server.url + "images.b64", streams, images_per_chunk=4)
    here = Base64ImageDeserializer(str(EXAMPLES / "images" / "images.b64"), streams, images_per_chunk=4)
    before = remote.fetch_stats()
    assert sequences(there) == sequences(here)
    fetched = remote.fetch_stats()
    chunks = there.num_chunks()
    assert fetched.requests - before.requests == chunks and fetched.checks - before.checks == chunks


def test_htk_features_in_a_file_per_utterance_are_fetched_together(served: tuple[RangeServer, Path]) -> None:
    from cntkio.htk import write_features

    server, root = served
    folder = root / "utterances"
    folder.mkdir(exist_ok=True)
    rng = np.random.default_rng(11)
    lines = []
    for u in range(30):
        frames = rng.random((int(rng.integers(3, 9)), 5)).astype(np.float32)
        write_features(folder / f"u{u}.htk", frames, compressed=True)  # (A/B vectors read with each header)
        lines.append(f"u{u}=.../u{u}.htk\n")
    (folder / "list.scp").write_text("".join(lines))

    def read(prefix: str) -> Any:
        return HTKFeatureDeserializer(StreamDefs(f=StreamDef(shape=5, scp=prefix + "list.scp", context=(1, 1))))

    there, here = read(server.url + "utterances/"), read(str(folder) + "/")
    before = remote.fetch_stats()
    assert sequences(there) == sequences(here)
    assert remote.fetch_stats().requests - before.requests <= 30 + 15  # (a ranged read a file, and compressed headers)


def _wait_for_fetches_ahead() -> None:
    """Waits until this process's fetch threads have nothing queued or running."""
    from cntkio._src.formats import remote as implementation

    threads = remote.settings().concurrency
    barrier = threading.Barrier(threads + 1)  # (every fetch thread in it: none runs anything else)
    for _ in range(threads):
        implementation._fetcher().submit(barrier.wait)
    barrier.wait()


@pytest.mark.parametrize("ahead", [True, False])
def test_queued_chunks_are_fetched_ahead_once_and_read_as_locally(
    served: tuple[RangeServer, Path], ahead: bool
) -> None:
    server, root = served
    local = write_ctf(root / "ahead.ctf", 6000, seed=11)
    url = server.url + "ahead.ctf"

    def source(path: str) -> MinibatchSource:
        reader = CTFDeserializer(path, STREAMS, chunk_size_in_bytes=8 << 10, cache_index=True)
        return MinibatchSource(reader, randomization_window_in_chunks=3, max_sweeps=1, randomization_seed=5)

    expected = contents(source(str(local)))
    remote.configure(fetch_ahead=ahead)
    try:
        there = source(url)  # (indexed: the sweep below fetches chunks only)
        _wait_for_fetches_ahead()
        before = remote.fetch_stats()
        assert contents(there) == expected
        _wait_for_fetches_ahead()
        after = remote.fetch_stats()
    finally:
        remote.configure(fetch_ahead=True)
    assert (after.ahead - before.ahead > local.stat().st_size / 4) == ahead  # (most chunks arrive before their load)
    # every byte fetched once: a chunk fetched ahead is not fetched again by its read
    assert local.stat().st_size * 0.99 <= after.bytes - before.bytes <= local.stat().st_size * 1.01


def test_a_read_takes_over_a_fetch_ahead_not_started_and_one_that_fails_is_fetched_again(
    served: tuple[RangeServer, Path],
) -> None:
    from cntkio._src.formats import remote as implementation

    server, root = served
    data = bytes(range(256)) * 4096  # 1 MiB
    (root / "raw.bin").write_bytes(data)
    file = cntkio._src.formats.data_file.open_data_file(server.url + "raw.bin", "test data")
    gate = threading.Event()
    pool = implementation._fetcher()
    blockers = [pool.submit(gate.wait) for _ in range(remote.settings().concurrency)]  # every fetch thread busy
    try:
        before = remote.fetch_stats()
        file.prefetch([(1000, 300_000)])  # queued behind the blockers
        assert file.read_ranges([(1000, 300_000)]) == [data[1000:300_000]]  # taken over: fetched by the read
    finally:
        gate.set()
        for blocker in blockers:
            blocker.result()
    _wait_for_fetches_ahead()
    after = remote.fetch_stats()
    assert after.bytes - before.bytes == 299_000 and after.ahead == before.ahead  # (the queued parts never ran)
    server.fail(1)  # the fetch ahead fails (it is not retried): the read fetches the bytes, with its retries
    file.prefetch([(0, 4096)])
    _wait_for_fetches_ahead()
    assert file.read_ranges([(0, 4096), (8192, 9000)]) == [data[:4096], data[8192:9000]]
    file.prefetch([(50_000, 60_000)])  # fetched ahead, then read from the staging file: fetched once
    _wait_for_fetches_ahead()
    before = remote.fetch_stats()
    assert file.read_ranges([(50_000, 60_000)]) == [data[50_000:60_000]]
    assert remote.fetch_stats().bytes == before.bytes
    file.close()


def test_bytes_fetched_ahead_of_a_rewritten_object_are_an_error_at_the_read(served: tuple[RangeServer, Path]) -> None:
    server, root = served
    path = root / "rewritten.bin"
    path.write_bytes(b"a" * 100_000)
    file = cntkio._src.formats.data_file.open_data_file(server.url + "rewritten.bin", "test data")
    file.prefetch([(0, 50_000)])
    _wait_for_fetches_ahead()
    path.write_bytes(b"b" * 100_000)  # the same size, another version
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    with pytest.raises(FormatError, match=r"rewritten\.bin.*changed since it was indexed"):
        file.read_ranges([(0, 50_000)])
    file.close()


def test_closing_with_fetches_ahead_queued_or_running_writes_nothing_afterwards(
    served: tuple[RangeServer, Path], tmp_path: Path
) -> None:
    from cntkio._src.formats import remote as implementation

    server, root = served
    (root / "closing.bin").write_bytes(b"x" * 3_000_000)
    remote.configure(part_bytes=1 << 16)
    try:
        file = cntkio._src.formats.data_file.open_data_file(server.url + "closing.bin", "test data")
        staging_fd = file.fd
        gate = threading.Event()
        pool = implementation._fetcher()
        blocker = pool.submit(gate.wait)  # one thread held: the rest start parts, more are queued
        file.prefetch([(0, 3_000_000)])
        file.close()  # waits for the running parts; the queued ones never run
        other = os.open(tmp_path / "other", os.O_RDWR | os.O_CREAT)  # (may take the staging file's number)
        gate.set()
        blocker.result()
        _wait_for_fetches_ahead()
        assert os.fstat(other).st_size == 0
        os.close(other)
        assert staging_fd >= 0
    finally:
        remote.configure(part_bytes=8 << 20)


def _wait_until(condition: Any, seconds: float = 20.0) -> None:
    import time

    end = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.005)


@pytest.mark.parametrize("first_fails", [True, False])
def test_a_fetch_ahead_overlapping_another_that_fails_or_is_taken_over_never_reads_a_hole(
    served: tuple[RangeServer, Path], first_fails: bool
) -> None:
    # The second fetch ahead counted on the first for their shared bytes; the first failed (or a read took it over
    # before it started), and the second became ready over bytes never written: the read returned zeros.
    server, root = served
    k = 1 << 16
    data = (bytes(range(1, 256)) * 4200)[: 16 * k]  # (no zero byte: a hole reads as zeros)
    name = f"overlap-{first_fails}.bin"
    (root / name).write_bytes(data)
    remote.configure(part_bytes=k)
    gate = threading.Event()
    try:
        file = cntkio._src.formats.data_file.open_data_file(server.url + name, "test data")
        if first_fails:
            server.hold_range(k, gate)
            server.fail_range(k)
            mark = len(server.ranges)
            file.prefetch([(0, 2 * k)])  # its second part held, then answered 503
            _wait_until(lambda: k in server.ranges[mark:])
            file.prefetch([(k, 3 * k)])
            gate.set()
            _wait_for_fetches_ahead()
        else:
            from cntkio._src.formats import remote as implementation

            pool = implementation._fetcher()
            blockers = [pool.submit(gate.wait) for _ in range(remote.settings().concurrency)]
            file.prefetch([(0, 2 * k)])  # queued
            file.prefetch([(k, 3 * k)])  # queued
            assert file.read_ranges([(0, k)]) == [data[:k]]  # takes the first over before it starts
            gate.set()
            for blocker in blockers:
                blocker.result()
            _wait_for_fetches_ahead()
        assert file.read_ranges([(k, 3 * k)]) == [data[k : 3 * k]]
        file.close()
    finally:
        gate.set()
        server.clear_ranges()
        remote.configure(part_bytes=8 << 20)


def test_a_prefetch_during_a_read_of_the_same_bytes_fetches_nothing_and_holds_nothing_after(
    served: tuple[RangeServer, Path],
) -> None:
    server, root = served
    data = bytes(range(1, 256)) * 400
    (root / "during.bin").write_bytes(data)
    file = cntkio._src.formats.data_file.open_data_file(server.url + "during.bin", "test data")
    gate = threading.Event()
    server.hold_range(0, gate)
    mark = len(server.ranges)
    try:
        reader = threading.Thread(target=lambda: file.read_ranges([(0, 4096)]))
        reader.start()
        _wait_until(lambda: 0 in server.ranges[mark:])  # the read's GET is being answered
        file.prefetch([(0, 4096)])  # the read holds those bytes: nothing to fetch ahead
        gate.set()
        reader.join()
        _wait_for_fetches_ahead()
    finally:
        server.clear_ranges()
    assert server.ranges[mark:].count(0) == 1
    assert os.fstat(file.fd).st_blocks == 0  # every byte released once no read holds it
    file.close()


def test_chunks_fetched_ahead_and_never_read_are_released_when_the_source_closes(
    served: tuple[RangeServer, Path],
) -> None:
    server, root = served
    write_ctf(root / "unread.ctf", 6000, seed=12)
    reader = CTFDeserializer(server.url + "unread.ctf", STREAMS, chunk_size_in_bytes=8 << 10, cache_index=True)
    source = MinibatchSource(reader, randomization_window_in_chunks=3, max_sweeps=1)
    contents(source, limit=3)  # stopped early: chunks were fetched ahead for reads that will not come
    _wait_for_fetches_ahead()
    staging = reader.data_file.fd
    assert os.fstat(staging).st_blocks > 0
    source.close()
    _wait_for_fetches_ahead()
    assert os.fstat(staging).st_blocks == 0
    reader.close()
