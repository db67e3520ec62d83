"""Sharded corpora: a list of files or a glob pattern read as one corpus (cntkio._src.formats.shards) — the same data
as the concatenated file, a deterministic file order, orders, partitions and checkpoints spanning the corpus,
provenance naming the shard, and clear errors."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cntkio import (
    CBFDeserializer,
    ConfigError,
    CTFDeserializer,
    FormatError,
    MinibatchSource,
    StreamDef,
    StreamDefs,
    write_cbf,
)
from cntkio._src.formats.shards import ShardedDeserializer

STREAMS = StreamDefs(x=StreamDef(field="x", shape=2), y=StreamDef(field="y", shape=4, is_sparse=True))


def shard_lines(shard: int, sequences: int) -> list[str]:
    lines = []
    for s in range(sequences):
        key = shard * 1000 + s
        for t in range(1 + key % 3):
            lines.append(f"{key} |x {key} {t} |y {key % 4}:1")
    return lines


@pytest.fixture
def corpus(tmp_path: Path) -> tuple[Path, Path]:
    """Shards part-00..part-11 (written in a shuffled order) and the same data as one file."""
    folder = tmp_path / "shards"
    folder.mkdir()
    everything = []
    for shard in range(12):
        everything += shard_lines(shard, 20 + shard)
    for shard in np.random.default_rng(0).permutation(12):
        (folder / f"part-{shard:02d}.ctf").write_text("\n".join(shard_lines(int(shard), 20 + int(shard))) + "\n")
    whole = tmp_path / "whole.ctf"
    whole.write_text("\n".join(everything) + "\n")
    return folder, whole


def read_all(source: MinibatchSource, **partition: Any) -> tuple[list[Any], np.ndarray, np.ndarray]:
    keys, xs, ys = [], [], []
    while minibatch := source.next_minibatch(37, **partition):
        keys += [key for _, key in minibatch.sequence_keys]
        xs.append(minibatch["x"].values)
        ys.append(minibatch["y"].indices)
    return keys, np.concatenate(xs), np.concatenate(ys)


def test_a_pattern_reads_like_the_concatenated_file(corpus: tuple[Path, Path]) -> None:
    folder, whole = corpus
    shards = CTFDeserializer(str(folder / "part-*.ctf"), STREAMS, chunk_size_in_bytes=300)
    assert isinstance(shards, ShardedDeserializer) and len(shards.shards) == 12
    assert [Path(s.source_name).name for s in shards.shards] == [f"part-{i:02d}.ctf" for i in range(12)]
    single = CTFDeserializer(whole, STREAMS, chunk_size_in_bytes=300)
    got = read_all(MinibatchSource(shards, randomize=False, max_sweeps=1))
    expected = read_all(MinibatchSource(single, randomize=False, max_sweeps=1))
    assert got[0] == expected[0]
    np.testing.assert_array_equal(got[1], expected[1])
    np.testing.assert_array_equal(got[2], expected[2])
    assert shards.num_chunks() >= 12  # a chunk never spans files


def test_a_list_keeps_its_order_and_provenance_names_the_shard(corpus: tuple[Path, Path]) -> None:
    folder, _ = corpus
    files = [folder / "part-03.ctf", folder / "part-01.ctf"]
    source = MinibatchSource(CTFDeserializer(files, STREAMS), randomize=False, max_sweeps=1)
    minibatch = source.next_minibatch(10**6)
    provenance = minibatch.sequence_keys
    assert [key for _, key in provenance][:2] == [3000, 3001] and provenance[-1][1] == 1020
    assert {Path(source_name).name for source_name, _ in provenance} == {"part-03.ctf", "part-01.ctf"}
    assert all(Path(name).name == f"part-{key // 1000:02d}.ctf" for name, key in provenance)


def test_randomized_orders_partitions_and_checkpoints_span_the_corpus(corpus: tuple[Path, Path]) -> None:
    folder, _ = corpus

    def source(**options: Any) -> MinibatchSource:
        reader = CTFDeserializer(str(folder / "part-*.ctf"), STREAMS, chunk_size_in_bytes=300)
        return MinibatchSource(reader, max_sweeps=1, randomization_window_in_chunks=5, randomization_seed=9, **options)

    keys = read_all(source())[0]
    assert sorted(keys) == sorted(s * 1000 + i for s in range(12) for i in range(20 + s))
    assert keys == read_all(source())[0]  # deterministic
    assert keys != sorted(keys)
    halves = [read_all(source(), num_data_partitions=2, partition_index=i)[0] for i in range(2)]
    assert sorted(halves[0] + halves[1]) == sorted(keys) and not set(halves[0]) & set(halves[1])
    first = source()
    first.next_minibatch(100)
    state = first.get_checkpoint_state()
    resumed = source()
    resumed.restore_from_checkpoint(state)
    assert read_all(first)[0] == read_all(resumed)[0]
    copy = pickle.loads(pickle.dumps(CTFDeserializer(str(folder / "part-*.ctf"), STREAMS)))
    assert isinstance(copy, ShardedDeserializer) and copy.num_chunks() == 12


def test_every_shard_gets_its_own_index_cache(corpus: tuple[Path, Path]) -> None:
    folder, _ = corpus
    CTFDeserializer(str(folder / "part-*.ctf"), STREAMS, cache_index=True)
    assert len(list(folder.glob("*.cntkio-index"))) == 12
    cached = CTFDeserializer(str(folder / "part-*.ctf"), STREAMS, cache_index=True)
    assert cached.sequence_index().num_sequences == sum(20 + s for s in range(12))


def test_keys_repeated_across_shards_stay_separate_sequences(tmp_path: Path) -> None:
    for name in ("a.ctf", "b.ctf"):
        (tmp_path / name).write_text("1 |x 1 1\n2 |x 2 2\n")
    reader = CTFDeserializer([tmp_path / "a.ctf", tmp_path / "b.ctf"], StreamDefs(x=StreamDef(field="x", shape=2)))
    minibatch = MinibatchSource(reader, randomize=False).next_minibatch(4)
    assert [(Path(s).name, k) for s, k in minibatch.sequence_keys] == [("a.ctf", 1), ("a.ctf", 2), ("b.ctf", 1),
                                                                        ("b.ctf", 2)]  # fmt: skip


def test_shards_whose_streams_differ_are_refused(tmp_path: Path) -> None:
    narrow, wide = tmp_path / "narrow.ctf", tmp_path / "wide.ctf"
    narrow.write_text("0 |x 1 2\n")
    wide.write_text("0 |x 1 2 3\n")
    write_cbf(CTFDeserializer(narrow, StreamDefs(x=StreamDef(field="x", shape=2))), tmp_path / "a.cbf")
    write_cbf(CTFDeserializer(wide, StreamDefs(x=StreamDef(field="x", shape=3))), tmp_path / "b.cbf")
    with pytest.raises(FormatError, match="differ from those of the first shard"):
        CBFDeserializer(str(tmp_path / "*.cbf"))
    assert CBFDeserializer([tmp_path / "a.cbf", tmp_path / "a.cbf"]).num_chunks() == 2


def test_patterns_and_lists_that_name_nothing(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no file matches"):
        CTFDeserializer(str(tmp_path / "missing-*.ctf"), STREAMS)
    with pytest.raises(ConfigError, match="empty list"):
        CTFDeserializer([], STREAMS)
    literal = tmp_path / "odd[1].ctf"  # an existing file whose name looks like a pattern is that file
    literal.write_text("0 |x 1 2 |y 1:1\n")
    assert not isinstance(CTFDeserializer(str(literal), STREAMS), ShardedDeserializer)


def test_a_sharded_corpus_reports_its_index_time(tmp_path: Path) -> None:
    """Found by the scale bench: a sharded corpus's indexing (its shards built on every core) showed 0 s in
    source.stats()."""
    for k in range(4):
        (tmp_path / f"part-{k}.ctf").write_text("".join(f"|x {k} {i} |y 1:1\n" for i in range(50)))
    source = MinibatchSource(CTFDeserializer(str(tmp_path / "part-*.ctf"), STREAMS), max_sweeps=1)
    assert source.stats().seconds["index"] > 0 and source.stats().counts["index"] == 1


def test_more_shards_than_the_open_file_limit_is_named_as_such(tmp_path: Path) -> None:
    """Every OSError opening a data file used to become a FileNotFoundError ("cannot open CTF file ...: Too many
    open files"): a corpus past `ulimit -n` looked like missing files. The error keeps its kind and says why."""
    for i in range(40):
        (tmp_path / f"part-{i:02d}.ctf").write_text(f"{i} |x 1\n")
    script = f"""
import errno, resource
from cntkio import CTFDeserializer, StreamDef, StreamDefs
resource.setrlimit(resource.RLIMIT_NOFILE, (30, 30))
try:
    CTFDeserializer({str(tmp_path / "part-*.ctf")!r}, StreamDefs(x=StreamDef(field="x", shape=1)))
except OSError as error:
    print(type(error).__name__, errno.errorcode[error.errno], "ulimit -n" in str(error), str(error).split("'")[1])
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    kind, code, hint, filename = done.stdout.split()
    assert (kind, code, hint) == ("OSError", "EMFILE", "True") and filename.endswith(".ctf")
