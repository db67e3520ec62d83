"""cntkio.ray on a local Ray instance (2 CPUs): a CTF corpus read one task per chunk gives every sequence of a direct
read, and its CBF shards hold the same data and are the same bytes whatever the parallelism; the same for HTK
features joined with MLF labels and for images (augmentation seeded per key and sweep); the errors counted under
max_errors come back as a dataset of error records."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("ray.data")

from cntkio import (  # noqa: E402
    CBFDeserializer,
    CTFDeserializer,
    HTKFeatureDeserializer,
    HTKMLFDeserializer,
    ImageDeserializer,
    MinibatchSource,
    StreamDef,
    StreamDefs,
)
from cntkio import transforms as T  # noqa: E402
from cntkio.ray import (  # noqa: E402
    CBFDatasink,
    CBFDatasource,
    CTFDatasource,
    DeserializerDatasource,
    HTKMLFDatasource,
    ImageDatasource,
)

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "data"
SPEECH = EXAMPLES / "speech"
FEATURES = StreamDefs(features=StreamDef(shape=8, scp=str(SPEECH / "features.scp"), context=(1, 1)))
LABELS = StreamDefs(labels=StreamDef(shape=5, mlf=str(SPEECH / "labels.mlf")))

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


def sequences_of(source: MinibatchSource, names: tuple[str, ...]) -> dict[str, list[np.ndarray]]:
    """Per key (as text): each stream's samples (sparse ones densified), read by a MinibatchSource."""
    out: dict[str, list[np.ndarray]] = {}
    while minibatch := source.next_minibatch(10_000):
        columns = [minibatch[name].as_sequences() for name in names]
        for number, (_, key) in enumerate(minibatch.sequence_keys):
            values = [c[number] for c in columns]
            out[str(key)] = [v.toarray() if hasattr(v, "toarray") else np.asarray(v) for v in values]
    source.close()
    return out


def dense(row: dict[str, Any], name: str, dim: int) -> np.ndarray:
    """A sparse stream of a row, densified."""
    entries = np.asarray(row[f"{name}.entries"])
    out = np.zeros((len(entries), dim), dtype=np.float32)
    out[np.repeat(np.arange(len(entries)), entries), np.asarray(row[f"{name}.indices"], dtype=np.int64)] = np.asarray(
        row[f"{name}.values"]
    )
    return out


def speech(**options: Any) -> HTKMLFDatasource:
    return HTKMLFDatasource(FEATURES, LABELS, str(SPEECH / "states.list"), feature_options={"chunk_frames": 30},
                            **options)  # fmt: skip


def test_htk_features_joined_with_mlf_labels_as_minibatch_source_joins_them(local_ray: Any) -> None:
    datasource = speech()
    assert len(datasource.get_read_tasks(1)) > 1  # a task per chunk of utterances of the features
    assert datasource.join_reports[0] is not None and datasource.join_reports[0].clean
    expected = sequences_of(
        MinibatchSource(
            [HTKFeatureDeserializer(FEATURES), HTKMLFDeserializer(str(SPEECH / "states.list"), LABELS)],
            randomize=False,
            max_sweeps=1,
        ),
        ("features", "labels"),
    )
    rows = ray.data.read_datasource(datasource).take_all()
    assert sorted(r["key"] for r in rows) == sorted(expected) and len(rows) == 8
    for row in rows:
        features, labels = expected[row["key"]]
        np.testing.assert_array_equal(np.asarray(row["features"]).reshape(-1, 24), features)
        assert row["features.samples"] == len(features)
        np.testing.assert_array_equal(dense(row, "labels", 5), labels)


def test_an_utterance_without_labels_is_left_out_and_reported(local_ray: Any, tmp_path: Path) -> None:
    text = (SPEECH / "labels.mlf").read_text()
    start = text.index('"*/spk1_utt03.lab"')
    (tmp_path / "labels.mlf").write_text(text[:start] + text[text.index(".\n", start) + 2 :])
    labels = StreamDefs(labels=StreamDef(shape=5, mlf=str(tmp_path / "labels.mlf")))
    datasource = HTKMLFDatasource(FEATURES, labels, str(SPEECH / "states.list"), feature_options={"chunk_frames": 30})
    report = datasource.join_reports[0]
    assert report is not None and report.dropped == 1 and "spk1_utt03" in str(report)
    keys = sorted(r["key"] for r in ray.data.read_datasource(datasource).take_all())
    assert len(keys) == 7 and "spk1_utt03" not in keys


def conversion_digests(datasource: Any, out: Path) -> list[dict[str, str]]:
    """The CBF files a conversion writes with 1 and 2 concurrent read tasks, as name -> digest."""
    digests = []
    for concurrency in (1, 2):
        target = out / f"cbf{concurrency}"
        datasource.dataset(concurrency=concurrency).write_datasink(CBFDatasink(target, datasource))
        digests.append({p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(target.glob("*.cbf"))})
    return digests


def test_speech_converts_to_the_same_cbf_bytes_whatever_the_parallelism(local_ray: Any, tmp_path: Path) -> None:
    datasource = speech()
    digests = conversion_digests(datasource, tmp_path)
    assert digests[0] == digests[1] and len(digests[0]) == len(datasource.get_read_tasks(1))
    source = MinibatchSource(CBFDeserializer(str(tmp_path / "cbf1" / "part-*.cbf")), randomize=False, max_sweeps=1)
    converted = []  # (CBF keeps no keys: its sequences are numbered; compare in order)
    while minibatch := source.next_minibatch(10_000):
        converted += zip(minibatch["features"].as_sequences(), minibatch["labels"].as_sequences(), strict=True)
    source.close()
    rows = sorted(ray.data.read_datasource(datasource).take_all(), key=lambda r: (r["chunk"], r["row"]))
    assert len(converted) == len(rows) == 8
    for (features, labels), row in zip(converted, rows, strict=True):
        np.testing.assert_array_equal(features.reshape(-1), np.asarray(row["features"]))
        np.testing.assert_array_equal(labels.toarray(), dense(row, "labels", 5))


IMAGES = StreamDefs(
    features=StreamDef(
        field="image",
        transforms=[T.crop("randomside", side_ratio=(0.6, 1.0)), T.scale(12, 12, 3), T.color(0.2, 0.2, 0.2)],
    ),
    labels=StreamDef(field="label", shape=4),
)


def test_images_are_the_pixels_of_the_same_sweep_of_a_minibatch_source(local_ray: Any) -> None:
    """Augmentation is drawn from (seed, sweep, key, view): a task gives the pixels a MinibatchSource gives in that
    sweep, wherever it runs."""
    map_file = str(EXAMPLES / "images" / "map.txt")
    source = MinibatchSource(ImageDeserializer(map_file, IMAGES, seed=5, images_per_chunk=3), randomize=False,
                             max_sweeps=2)  # fmt: skip
    sweeps: list[dict[str, list[np.ndarray]]] = []
    for _ in range(2):  # 8 images of a sample each: a minibatch of 8 is a sweep
        minibatch = source.next_minibatch(8)
        images, labels = minibatch["features"].as_sequences(), minibatch["labels"].as_sequences()
        keys = [str(key) for _, key in minibatch.sequence_keys]
        sweeps.append({key: [images[n], labels[n].toarray()] for n, key in enumerate(keys)})
        assert len(sweeps[-1]) == 8
    source.close()
    for sweep in (0, 1):
        datasource = ImageDatasource(map_file, IMAGES, seed=5, images_per_chunk=3, sweep=sweep)
        assert len(datasource.get_read_tasks(1)) == 3
        rows = ray.data.read_datasource(datasource).take_all()
        assert sorted(r["key"] for r in rows) == sorted(sweeps[sweep])
        for row in rows:
            image, label = sweeps[sweep][row["key"]]
            np.testing.assert_array_equal(np.asarray(row["features"]).reshape(image.shape), image)
            np.testing.assert_array_equal(dense(row, "labels", 4), label)
    assert not np.array_equal(sweeps[0]["1"][0], sweeps[1]["1"][0])  # (each sweep its own augmentation)


def test_images_convert_to_the_same_cbf_bytes_whatever_the_parallelism(local_ray: Any, tmp_path: Path) -> None:
    datasource = ImageDatasource(str(EXAMPLES / "images" / "map.txt"), IMAGES, seed=5, images_per_chunk=3)
    digests = conversion_digests(datasource, tmp_path)
    assert digests[0] == digests[1] and len(digests[0]) == 3
    converted = MinibatchSource(CBFDeserializer(str(tmp_path / "cbf2" / "part-*.cbf")), randomize=False, max_sweeps=1)
    minibatch = converted.next_minibatch(100)
    converted.close()
    assert minibatch["features"].values.shape == (8, 3 * 12 * 12)  # (a CBF header keeps a stream's dimension only)
    rows = sorted(ray.data.read_datasource(datasource).take_all(), key=lambda r: (r["chunk"], r["row"]))
    np.testing.assert_array_equal(minibatch["features"].values, np.array([r["features"] for r in rows]))


def test_errors_come_back_as_a_dataset_of_error_records(local_ray: Any, tmp_path: Path) -> None:
    path = tmp_path / "errors.ctf"
    path.write_text("".join(f"{k} |x 1 2 3 |s {77 if k % 7 == 3 else 5}:1\n" for k in range(40)))  # 77 >= dim 50
    datasource = CTFDatasource(str(path), STREAMS, max_errors=100, chunk_size_in_bytes=200,
                               index_cache_dir=tmp_path / "index")  # fmt: skip
    errors = sorted(datasource.errors().take_all(), key=lambda e: e["line"])
    assert [e["line"] for e in errors] == [k + 1 for k in range(40) if k % 7 == 3]
    assert [e["key"] for e in errors] == [str(k) for k in range(40) if k % 7 == 3]
    assert all(e["source"] == str(path) and e["file"] == 0 and str(path) in e["message"] for e in errors)
    assert len({e["chunk"] for e in errors}) > 1  # each task gives its own chunk's
    assert datasource.dataset().count() == 40 - len(errors)


def test_an_undecodable_image_is_an_error_record_and_no_row(local_ray: Any, tmp_path: Path) -> None:
    (tmp_path / "broken.png").write_bytes(b"not an image")
    lines = (EXAMPLES / "images" / "map.txt").read_text().replace(".../", f"{EXAMPLES / 'images'}/").splitlines()
    lines[2] = f"2\t{tmp_path / 'broken.png'}\t2"
    (tmp_path / "map.txt").write_text("\n".join(lines) + "\n")
    datasource = ImageDatasource(str(tmp_path / "map.txt"), IMAGES, images_per_chunk=3, max_errors=5)
    keys = sorted(r["key"] for r in ray.data.read_datasource(datasource).take_all())
    assert keys == ["0", "1", "3", "4", "5", "6", "7"]
    errors = datasource.errors().take_all()
    assert len(errors) == 1 and errors[0]["chunk"] == 0 and "broken.png" in errors[0]["message"]


def test_any_deserializers_made_by_a_factory(local_ray: Any, corpus: tuple[str, Path], tmp_path: Path) -> None:
    """The generic datasource (the format-specific ones are factories over it): a sharded CTF corpus as one part."""
    import functools

    pattern, _ = corpus
    datasource = DeserializerDatasource(functools.partial(CTFDeserializer, pattern, STREAMS, chunk_size_in_bytes=4000))
    rows = ray.data.read_datasource(datasource).take_all()
    expected = {str(key): value for key, value in direct(pattern).items()}
    assert sorted(r["key"] for r in rows) == sorted(expected) and {r["file"] for r in rows} == {0}
    for row in rows:
        np.testing.assert_array_equal(np.asarray(row["x"]).reshape(-1, 3), expected[row["key"]][0])


def test_encoded_images_are_the_bytes_of_their_files(local_ray: Any, tmp_path: Path) -> None:
    """``encoded=True``: the image column holds each file's bytes, undecoded (the labels as with decoded images); a
    CBF sink refuses them; an unreadable file is counted and left out."""
    images = EXAMPLES / "images"
    datasource = ImageDatasource(str(images / "map.txt"), IMAGES, images_per_chunk=3, encoded=True)
    rows = ray.data.read_datasource(datasource).take_all()
    assert sorted(r["key"] for r in rows) == [str(k) for k in range(8)]
    for row in rows:
        assert row["features"] == (images / f"img{row['key']}.png").read_bytes()
        np.testing.assert_array_equal(dense(row, "labels", 4), np.eye(4, dtype=np.float32)[[int(row["key"]) % 4]])
    with pytest.raises(Exception, match="encoded bytes"):
        CBFDatasink(tmp_path / "cbf", datasource)
    lines = (images / "map.txt").read_text().replace(".../", f"{images}/").splitlines()
    lines[5] = f"5\t{tmp_path / 'missing.png'}\t1"
    (tmp_path / "map.txt").write_text("\n".join(lines) + "\n")
    datasource = ImageDatasource(str(tmp_path / "map.txt"), IMAGES, images_per_chunk=3, encoded=True, max_errors=2)
    keys = sorted(r["key"] for r in ray.data.read_datasource(datasource).take_all())
    assert keys == ["0", "1", "2", "3", "4", "6", "7"]
    errors = datasource.errors().take_all()
    assert len(errors) == 1 and errors[0]["key"] is not None and "missing.png" in errors[0]["message"]


def test_each_block_keeps_the_sequences_of_the_whole_join(local_ray: Any, tmp_path: Path) -> None:
    """length_mismatch='drop': a task's rows are its chunk's share of the join the driver made of the whole part
    (one length reference, as MinibatchSource), not a join of its chunk alone: s1 (one feature sample, two label
    samples) is dropped, and s2's chunk (all its sequences mismatched) gives no row instead of failing the task."""
    (tmp_path / "f.ctf").write_text("s0 |x 0\ns0 |x 0\ns0 |x 0\ns1 |x 1\ns2 |x 2\ns2 |x 2\ns3 |x 3\ns3 |x 3\n")
    (tmp_path / "l.ctf").write_text("".join(f"{k} |y 0\n" * n for k, n in [("s0", 3), ("s1", 2), ("s2", 5), ("s3", 2)]))

    def both() -> list[Any]:
        return [CTFDeserializer(str(tmp_path / "f.ctf"), StreamDefs(x=StreamDef(shape=1)), chunk_size_in_bytes=1),
                CTFDeserializer(str(tmp_path / "l.ctf"), StreamDefs(y=StreamDef(shape=1)))]  # fmt: skip

    source = MinibatchSource(both(), randomize=False, max_sweeps=1, length_mismatch="drop")
    minibatch = source.next_minibatch(10_000)
    source.close()
    expected = [str(key) for _, key in minibatch.sequence_keys]
    datasource = DeserializerDatasource(both(), length_mismatch="drop")
    assert len(datasource.chunk_plan.tasks) == 4 and datasource.join_reports[0].dropped == 2
    rows = datasource.dataset().take_all()
    assert sorted(r["key"] for r in rows) == expected == ["s0", "s3"]
    assert all(r["x.samples"] == r["y.samples"] for r in rows)


def test_invalid_base64_of_encoded_images_is_a_bad_record(local_ray: Any, tmp_path: Path) -> None:
    """``encoded=True`` on a base64 file: a line that is not base64 is raised under max_errors=0 (naming its line), as
    the decoding reader raises it; otherwise counted (an error record) and its row left out."""
    lines = (EXAMPLES / "images" / "images.b64").read_text().splitlines()
    key, label, _ = lines[4].split("\t")
    lines[4] = f"{key}\t{label}\t!!!not base64!!!"
    (tmp_path / "images.b64").write_text("\n".join(lines) + "\n")
    strict = ImageDatasource(str(tmp_path / "images.b64"), IMAGES, base64=True, encoded=True, images_per_chunk=3)
    with pytest.raises(Exception, match=r"images\.b64:5:.*invalid base64"):
        strict.dataset().take_all()
    lenient = ImageDatasource(str(tmp_path / "images.b64"), IMAGES, base64=True, encoded=True, images_per_chunk=3,
                              max_errors=2)  # fmt: skip
    keys = sorted(r["key"] for r in lenient.dataset().take_all())
    assert keys == sorted(line.split("\t")[0] for n, line in enumerate(lines) if n != 4)
    errors = lenient.errors().take_all()
    assert len(errors) == 1 and errors[0]["line"] == 5 and errors[0]["key"] == key
