"""cntkio.hf: any cntkio data as a Hugging Face ``datasets.IterableDataset`` whose shards are cntkio chunks — every
sequence once across ``split_dataset_by_node`` ranks and across DataLoader workers, the values a MinibatchSource
reads — and ``cntkio convert --to parquet`` (a table per chunk), which pyarrow and ``datasets`` read back."""

from __future__ import annotations

import functools
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

datasets = pytest.importorskip("datasets")
pq = pytest.importorskip("pyarrow.parquet")

from datasets.distributed import split_dataset_by_node  # noqa: E402

import cntkio  # noqa: E402
import cntkio.hf  # noqa: E402
from cntkio import (  # noqa: E402
    CTFDeserializer,
    HTKFeatureDeserializer,
    HTKMLFDeserializer,
    MinibatchSource,
    StreamDef,
    StreamDefs,
)
from cntkio._src.cli.main import main  # noqa: E402

STREAMS = StreamDefs(x=StreamDef(field="x", shape=3), s=StreamDef(field="s", shape=50, is_sparse=True))
SPEECH = Path(__file__).resolve().parents[1] / "examples" / "data" / "speech"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Three CTF files of 60 sequences of 1-5 samples (a dense and a sparse stream)."""
    directory = tmp_path_factory.mktemp("hf")
    rng = np.random.default_rng(7)
    paths = []
    for shard in range(3):
        lines = []
        for s in range(60):
            for t in range(int(rng.integers(1, 6))):
                entries = " ".join(f"{i}:{v}" for i, v in zip(sorted(rng.choice(50, 2, replace=False)), (1, 2)))
                lines.append(f"k{shard}_{s} |x {s} {t} {shard} |s {entries}")
        paths.append(directory / f"part-{shard}.ctf")
        paths[-1].write_text("\n".join(lines) + "\n")
    return paths


def parts(corpus: list[Path]) -> list[Any]:
    return [functools.partial(CTFDeserializer, str(p), STREAMS, chunk_size_in_bytes=1500) for p in corpus]


def direct(corpus: list[Path]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per key: the dense samples and the densified sparse samples, read by a MinibatchSource."""
    source = MinibatchSource(CTFDeserializer([str(p) for p in corpus], STREAMS), randomize=False, max_sweeps=1)
    out = {}
    while minibatch := source.next_minibatch(10_000):
        xs, ss = minibatch["x"].as_sequences(), minibatch["s"].as_sequences()
        for (_, key), x, s in zip(minibatch.sequence_keys, xs, ss, strict=True):
            out[str(key)] = (x, s.toarray())
    source.close()
    return out


def densified(row: dict[str, Any], name: str, dim: int) -> np.ndarray:
    entries = np.asarray(row[f"{name}.entries"])
    out = np.zeros((len(entries), dim), dtype=np.float32)
    out[np.repeat(np.arange(len(entries)), entries), np.asarray(row[f"{name}.indices"], dtype=np.int64)] = np.asarray(
        row[f"{name}.values"]
    )
    return out


def test_the_rows_are_the_sequences_of_a_minibatch_source(corpus: list[Path]) -> None:
    data = cntkio.hf.iterable_dataset(parts(corpus))
    assert isinstance(data, datasets.IterableDataset) and data.n_shards > 3  # a shard per chunk
    expected = direct(corpus)
    rows = list(data)
    assert len(rows) == len(expected) == 180
    for row in rows:
        x, s = expected[row["key"]]
        np.testing.assert_array_equal(np.asarray(row["x"], dtype=np.float32).reshape(-1, 3), x)
        assert row["x.samples"] == len(x)
        np.testing.assert_array_equal(densified(row, "s", 50), s)


@pytest.mark.parametrize("world_size", [2, 3])
def test_every_sequence_once_across_the_ranks_of_split_dataset_by_node(corpus: list[Path], world_size: int) -> None:
    data = cntkio.hf.iterable_dataset(parts(corpus))
    keys: Counter[str] = Counter()
    for rank in range(world_size):
        keys.update(row["key"] for row in split_dataset_by_node(data, rank=rank, world_size=world_size))
    assert set(keys) == set(direct(corpus)) and set(keys.values()) == {1}


def test_every_sequence_once_across_two_dataloader_workers(corpus: list[Path]) -> None:
    torch = pytest.importorskip("torch")
    data = cntkio.hf.iterable_dataset(parts(corpus))
    loader = torch.utils.data.DataLoader(data, batch_size=None, num_workers=2)
    keys = Counter(row["key"] for row in loader)
    assert set(keys) == set(direct(corpus)) and set(keys.values()) == {1}


def test_htk_features_with_mlf_labels_joined_by_key() -> None:
    features = StreamDefs(features=StreamDef(shape=8, scp=str(SPEECH / "features.scp"), context=(1, 1)))
    labels = StreamDefs(labels=StreamDef(shape=5, mlf=str(SPEECH / "labels.mlf")))

    def both() -> list[Any]:
        return [HTKFeatureDeserializer(features, chunk_frames=30),
                HTKMLFDeserializer(str(SPEECH / "states.list"), labels)]  # fmt: skip

    data = cntkio.hf.iterable_dataset(both())  # deserializers made beforehand: one part
    source = MinibatchSource(both(), randomize=False, max_sweeps=1)
    minibatch = source.next_minibatch(10_000)
    source.close()
    expected = {
        key: (f, lab.toarray())
        for (_, key), f, lab in zip(
            minibatch.sequence_keys,
            minibatch["features"].as_sequences(),
            minibatch["labels"].as_sequences(),
            strict=True,
        )
    }
    rows = list(data)
    assert data.n_shards > 1 and sorted(r["key"] for r in rows) == sorted(expected)
    for row in rows:
        f, lab = expected[row["key"]]
        np.testing.assert_array_equal(np.asarray(row["features"], dtype=np.float32).reshape(-1, 24), f)
        np.testing.assert_array_equal(densified(row, "labels", 5), lab)


def test_parquet_round_trip(corpus: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``cntkio convert IN --to parquet DIR``: a file per chunk named by the input and the chunk, the rows of the
    iterable dataset; pyarrow and ``datasets.load_dataset("parquet")`` read them back."""
    path = corpus[0]
    streams = ["--stream", "x:3:dense", "--stream", "s:50:sparse"]
    assert main(["convert", str(path), str(tmp_path / "out"), "--to", "parquet", "--chunk-size", "1500", *streams]) == 0
    files = sorted((tmp_path / "out").glob("*.parquet"))
    rows = list(cntkio.hf.iterable_dataset(parts(corpus[:1])))
    assert [f.name for f in files] == [f"part-0.ctf-{c:06d}.parquet" for c in range(len(files))] and len(files) > 1
    table = pq.read_table([str(f) for f in files])
    assert table.column_names == ["file", "chunk", "row", "key", "x", "x.samples", "s.indices", "s.values", "s.entries"]
    assert table.to_pylist() == rows
    # the same bytes again (the output depends only on the input)
    assert (
        main(["convert", str(path), str(tmp_path / "again"), "--to", "parquet", "--chunk-size", "1500", *streams]) == 0
    )
    assert [f.read_bytes() for f in files] == [(tmp_path / "again" / f.name).read_bytes() for f in files]
    loaded = datasets.load_dataset("parquet", data_files=[str(f) for f in files], split="train",
                                   cache_dir=str(tmp_path / "hf-cache"))  # fmt: skip
    assert loaded.num_rows == len(rows) and loaded[0]["key"] == rows[0]["key"]
    np.testing.assert_array_equal(np.asarray(loaded[5]["x"], dtype=np.float32), np.asarray(rows[5]["x"], np.float32))
    # one file: a row group per chunk
    assert main(["convert", str(path), str(tmp_path / "one.parquet"), "--to", "parquet", "--chunk-size", "1500",
                 *streams]) == 0  # fmt: skip
    assert pq.ParquetFile(str(tmp_path / "one.parquet")).num_row_groups == len(files)
    assert pq.read_table(str(tmp_path / "one.parquet")).to_pylist() == rows
    capsys.readouterr()


def test_a_cbf_file_converts_to_parquet(tmp_path: Path) -> None:
    cbf = Path(__file__).resolve().parents[1] / "examples" / "data" / "sequences.cbf"
    assert main(["convert", str(cbf), str(tmp_path / "out"), "--to", "parquet"]) == 0
    table = pq.read_table(str(tmp_path / "out"))
    source = MinibatchSource(cntkio.CBFDeserializer(str(cbf)), randomize=False, max_sweeps=1)
    minibatch = source.next_minibatch(10_000)
    source.close()
    assert table.num_rows == minibatch["features"].num_sequences


def test_without_datasets_the_error_names_the_extra() -> None:
    import subprocess
    import sys

    code = ("import sys; sys.modules['datasets'] = None\nimport cntkio.hf\n"
            "try:\n    cntkio.hf.iterable_dataset([])\nexcept ImportError as e:\n    print(e)")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert 'pip install "cntkio[hf]"' in out


def test_a_chunk_none_of_whose_keys_has_labels_gives_no_row(tmp_path: Path) -> None:
    """Only the first utterance labelled: the other chunks of the features join nothing and give no row (the whole
    corpus joins one sequence, so the plan is valid)."""
    text = (SPEECH / "labels.mlf").read_text()
    (tmp_path / "labels.mlf").write_text(text[: text.index(".\n") + 2])
    features = StreamDefs(features=StreamDef(shape=8, scp=str(SPEECH / "features.scp")))
    labels = StreamDefs(labels=StreamDef(shape=5, mlf=str(tmp_path / "labels.mlf")))
    data = cntkio.hf.iterable_dataset(
        [HTKFeatureDeserializer(features, chunk_frames=30), HTKMLFDeserializer(str(SPEECH / "states.list"), labels)]
    )
    assert data.n_shards > 1
    assert [row["key"] for row in data] == ["spk0_utt00"]


def write_mismatched(tmp_path: Path) -> tuple[Any, Any]:
    """Features with a chunk per sequence and labels whose lengths differ for s1 (whose features have one sample, so
    a join of its chunk alone takes the labels as the reference) and s2 (a chunk all of whose sequences mismatch)."""
    (tmp_path / "f.ctf").write_text("s0 |x 0\ns0 |x 0\ns0 |x 0\ns1 |x 1\ns2 |x 2\ns2 |x 2\ns3 |x 3\ns3 |x 3\n")
    (tmp_path / "l.ctf").write_text("".join(f"{k} |y 0\n" * n for k, n in [("s0", 3), ("s1", 2), ("s2", 5), ("s3", 2)]))
    features = functools.partial(CTFDeserializer, str(tmp_path / "f.ctf"), StreamDefs(x=StreamDef(shape=1)),
                                 chunk_size_in_bytes=1)  # fmt: skip
    labels = functools.partial(CTFDeserializer, str(tmp_path / "l.ctf"), StreamDefs(y=StreamDef(shape=1)))
    return features, labels


def minibatch_keys(deserializers: list[Any], **options: Any) -> list[str]:
    source = MinibatchSource(deserializers, randomize=False, max_sweeps=1, **options)
    keys = []
    while minibatch := source.next_minibatch(1):
        keys += [str(key) for _, key in minibatch.sequence_keys]
    source.close()
    return keys


def both_of(features: Any, labels: Any) -> list[Any]:
    return [features(), labels()]


def test_length_mismatch_drop_keeps_in_each_chunk_the_sequences_a_minibatch_source_keeps(tmp_path: Path) -> None:
    """Each chunk's rows are its share of the whole part's join (one length reference), not a join of the chunk
    alone: s1 is dropped as MinibatchSource drops it, and the chunk of s2 (dropped) gives no row and no error."""
    features, labels = write_mismatched(tmp_path)
    expected = minibatch_keys([features(), labels()], length_mismatch="drop")
    assert expected == ["s0", "s3"]
    data = cntkio.hf.iterable_dataset(functools.partial(both_of, features, labels), length_mismatch="drop")
    assert data.n_shards == 4 and [row["key"] for row in data] == expected
    padded = cntkio.hf.iterable_dataset(functools.partial(both_of, features, labels))
    assert [row["key"] for row in padded] == minibatch_keys([features(), labels()]) == ["s0", "s1", "s2", "s3"]


def test_parquet_max_errors_is_one_budget_for_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Four bad sequences, a chunk each: past --max-errors the conversion fails (exit 1) naming the record, as a
    MinibatchSource raises, though no single chunk has more errors than the budget; within it, the good rows."""
    path = tmp_path / "bad.ctf"
    path.write_text("".join(f"s{i} |x {i}\ns{i} |x zz\n" for i in range(4)))
    options = [str(path), "--to", "parquet", "--stream", "x:1:dense", "--chunk-size", "1"]
    assert main(["convert", options[0], str(tmp_path / "out"), *options[1:], "--max-errors", "2"]) == 1
    assert "bad.ctf:4:" in capsys.readouterr().err and list((tmp_path / "out").iterdir()) == []
    assert main(["convert", options[0], str(tmp_path / "one.parquet"), *options[1:], "--max-errors", "2"]) == 1
    assert not (tmp_path / "one.parquet").exists()
    assert main(["convert", options[0], str(tmp_path / "out"), *options[1:], "--max-errors", "8"]) == 0
    assert pq.read_table(str(tmp_path / "out")).column("key").to_pylist() == []  # every sequence damaged
    capsys.readouterr()


def test_parquet_folder_holds_only_the_latest_conversion(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Converting again with fewer chunks removes the earlier conversion's extra chunk files (not other files), so
    the folder read as a table is this conversion's rows."""
    path = tmp_path / "data.ctf"
    path.write_text("".join(f"s{i} |x {i}\n" for i in range(6)))
    out = tmp_path / "out"
    options = [str(path), str(out), "--to", "parquet", "--stream", "x:1:dense"]
    assert main(["convert", *options, "--chunk-size", "1"]) == 0
    assert len(list(out.glob("data.ctf-*.parquet"))) == 6
    (out / "other.ctf-000005.parquet").write_bytes((out / "data.ctf-000005.parquet").read_bytes())
    (out / "notes.txt").write_text("kept")
    assert main(["convert", *options]) == 0
    assert sorted(f.name for f in out.iterdir()) == ["data.ctf-000000.parquet", "notes.txt", "other.ctf-000005.parquet"]
    assert pq.read_table(str(out / "data.ctf-000000.parquet")).column("key").to_pylist() == [f"s{i}" for i in range(6)]
    capsys.readouterr()


@pytest.mark.parametrize("option", [["--max-errors", "3"], ["--chunk-size", "100"], ["--max-errors", "0"]])
def test_a_cbf_input_refuses_options_it_would_ignore(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: list[str]
) -> None:
    cbf = Path(__file__).resolve().parents[1] / "examples" / "data" / "sequences.cbf"
    assert main(["convert", str(cbf), str(tmp_path / "out"), "--to", "parquet", *option]) == 2
    assert option[0] in capsys.readouterr().err and not (tmp_path / "out").exists()


def test_max_errors_is_a_budget_per_chunk_and_the_errors_are_reported(tmp_path: Path) -> None:
    """Each chunk is read by a fresh reader: four bad sequences in four chunks with max_errors=2 iterate without
    error (a MinibatchSource raises), every damaged sequence left out; ``errors_dataset`` gives each chunk's counted
    errors, naming file, line and key."""
    from cntkio.hf import errors_dataset

    path = tmp_path / "bad.ctf"
    path.write_text("".join(f"s{i} |x {i}\ns{i} |x zz\n" for i in range(4)) + "s4 |x 4\n")
    factory = functools.partial(CTFDeserializer, str(path), StreamDefs(x=StreamDef(shape=1)), chunk_size_in_bytes=1,
                                max_errors=2)  # fmt: skip
    assert [row["key"] for row in cntkio.hf.iterable_dataset(factory)] == ["s4"]
    errors = list(errors_dataset(factory))
    assert sorted({(e["chunk"], e["key"]) for e in errors}) == [(c, f"s{c}") for c in range(4)]
    assert {e["line"] for e in errors} == {2, 4, 6, 8} and all(e["source"] == str(path) for e in errors)
    with pytest.raises(cntkio.MaxErrorsExceeded):
        minibatch_keys([factory()])
