"""cntkio.ray on a local Ray instance (2 CPUs): a CTF corpus read one task per chunk gives every sequence of a direct
read, and its CBF shards hold the same data and are the same bytes whatever the parallelism."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("ray.data")

from cntkio import CBFDeserializer, CTFDeserializer, MinibatchSource, StreamDef, StreamDefs  # noqa: E402
from cntkio.ray import CBFDatasink, CBFDatasource, CTFDatasource  # noqa: E402

STREAMS = StreamDefs(x=StreamDef(field="x", shape=3), s=StreamDef(field="s", shape=50, is_sparse=True))


@pytest.fixture(scope="module")
def local_ray() -> Any:
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    ray.data.DataContext.get_current().enable_progress_bars = False
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """Three shards of sequences of 1-5 samples (a dense and a sparse stream), text keys in the last one."""
    directory = tmp_path_factory.mktemp("ray")
    rng = np.random.default_rng(4)
    for shard in range(3):
        lines = []
        for s in range(120):
            key = f"u{shard}_{s}" if shard == 2 else str(1000 * shard + s)
            for t in range(int(rng.integers(1, 6))):
                entries = " ".join(f"{i}:{v}" for i, v in zip(sorted(rng.choice(50, 2, replace=False)), (1, 2)))
                lines.append(f"{key} |x {s} {t} {shard} |s {entries}")
        (directory / f"part-{shard}.ctf").write_text("\n".join(lines) + "\n")
    return str(directory / "part-*.ctf"), directory


def direct(pattern: str) -> dict[Any, tuple[np.ndarray, np.ndarray]]:
    """Per key: the dense samples and the densified sparse samples, read without Ray."""
    source = MinibatchSource(CTFDeserializer(pattern, STREAMS), randomize=False, max_sweeps=1)
    out = {}
    while minibatch := source.next_minibatch(10_000):
        xs = minibatch["x"].as_sequences()
        ss = [m.toarray() for m in minibatch["s"].as_sequences()]
        for (_, key), x, s in zip(minibatch.sequence_keys, xs, ss, strict=True):
            out[key] = (x, s)
    return out


def test_the_blocks_hold_every_sequence_of_a_direct_read(local_ray: Any, corpus: tuple[str, Path], tmp_path) -> None:
    pattern, _ = corpus
    expected = direct(pattern)
    datasource = CTFDatasource(pattern, STREAMS, chunk_size_in_bytes=2000, index_cache_dir=tmp_path)
    assert len(datasource.get_read_tasks(1)) > 3  # one task per chunk of each file
    rows = ray.data.read_datasource(datasource).take_all()
    assert len(rows) == len(expected)
    expected = {str(key): value for key, value in expected.items()}  # ids as text in the blocks
    for row in rows:
        x, s = expected[row["key"]]
        np.testing.assert_array_equal(np.asarray(row["x"]).reshape(-1, 3), x)
        assert row["x.samples"] == len(x)
        entries = np.asarray(row["s.entries"])
        dense = np.zeros((len(entries), 50), dtype=np.float32)
        sample = np.repeat(np.arange(len(entries)), entries)
        dense[sample, np.asarray(row["s.indices"])] = np.asarray(row["s.values"])
        np.testing.assert_array_equal(dense, s)


def test_cbf_shards_are_the_same_whatever_the_parallelism(local_ray: Any, corpus: tuple[str, Path], tmp_path) -> None:
    pattern, _ = corpus
    datasource = CTFDatasource(pattern, STREAMS, chunk_size_in_bytes=2000, index_cache_dir=tmp_path / "index")
    digests = []
    for run, concurrency in enumerate((1, 2)):
        out = tmp_path / f"cbf{run}"
        ray.data.read_datasource(datasource, concurrency=concurrency).write_datasink(CBFDatasink(out, datasource))
        digests.append({p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.glob("*.cbf"))})
    assert digests[0] == digests[1] and len(digests[0]) == len(datasource.get_read_tasks(1))
    converted = MinibatchSource(CBFDeserializer(str(tmp_path / "cbf0" / "part-*.cbf")), randomize=False, max_sweeps=1)
    expected = list(direct(pattern).values())  # in file order, as the shards' names sort
    read = []
    while minibatch := converted.next_minibatch(10_000):
        read += zip(minibatch["x"].as_sequences(), minibatch["s"].as_sequences(), strict=True)
    assert len(read) == len(expected)
    for (x, s), (want_x, want_s) in zip(read, expected, strict=True):
        np.testing.assert_array_equal(x, want_x)
        np.testing.assert_array_equal(s.toarray(), want_s)


def test_no_row_is_lost_when_a_chunk_comes_in_several_blocks(local_ray: Any, corpus: tuple[str, Path], tmp_path):
    """Found by review: the sink named a file by (file, chunk) only, so when Ray split a chunk's rows into several
    blocks (a repartition, or a read larger than the target block size) each block overwrote the last."""
    pattern, _ = corpus
    datasource = CTFDatasource(pattern, STREAMS, index_cache_dir=tmp_path / "index")  # one chunk per file
    ray.data.read_datasource(datasource).repartition(7).write_datasink(CBFDatasink(tmp_path / "cbf", datasource))
    assert len(list((tmp_path / "cbf").glob("*.cbf"))) > 3
    converted = MinibatchSource(CBFDeserializer(str(tmp_path / "cbf" / "part-*.cbf")), randomize=False, max_sweeps=1)
    sequences = 0
    while minibatch := converted.next_minibatch(10_000):
        sequences += len(minibatch.sequence_keys)
    assert sequences == len(direct(pattern))


def test_the_row_count_is_what_the_read_gives(local_ray: Any, tmp_path: Path) -> None:
    """Found by review: count() came from the plan (every sequence of a chunk) while the read leaves out the sequences
    a counted error damaged."""
    path = tmp_path / "errors.ctf"
    path.write_text("".join(f"{k} |x 1 2 3 |s {77 if k % 7 == 3 else 5}:1\n" for k in range(40)))  # 77 >= dim 50
    datasource = CTFDatasource(str(path), STREAMS, max_errors=100, index_cache_dir=tmp_path / "index")
    data = ray.data.read_datasource(datasource)
    assert data.count() == len(data.take_all()) == 40 - 6


def test_cbf_shards_read_back_through_ray(local_ray: Any, corpus: tuple[str, Path], tmp_path: Path) -> None:
    """CBF files as a Ray dataset (one task per CBF chunk): the shards a conversion wrote hold, row for row, the
    samples of the CTF corpus."""
    pattern, _ = corpus
    ctf = CTFDatasource(pattern, STREAMS, chunk_size_in_bytes=2000, index_cache_dir=tmp_path / "index")
    ray.data.read_datasource(ctf).write_datasink(CBFDatasink(tmp_path / "cbf", ctf))
    cbf = CBFDatasource(str(tmp_path / "cbf" / "part-*.cbf"))
    assert len(cbf.get_read_tasks(1)) == len(list((tmp_path / "cbf").glob("*.cbf")))

    def ordered(datasource: Any) -> list[dict[str, Any]]:
        return sorted(ray.data.read_datasource(datasource).take_all(), key=lambda r: (r["file"], r["chunk"], r["row"]))

    original, converted = ordered(ctf), ordered(cbf)  # (the CBF's files are the CTF's chunks, in order)
    assert len(original) == len(converted)
    for a, b in zip(original, converted, strict=True):
        for column in ("x", "x.samples", "s.indices", "s.values", "s.entries"):
            np.testing.assert_array_equal(np.asarray(a[column]), np.asarray(b[column]))
