"""The composite reader: several deserializers joined by sequence key into one MinibatchSource.

The main check is an equivalence: a CTF file read whole, and the same file read for ``x`` only joined with
a second file that holds ``y`` of every sequence in a shuffled order (and other chunks), give identical
minibatches in every packing mode, randomization and partitioning, also across checkpoints.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cntkio import (
    ChunkIndex,
    CNTKIOError,
    ConfigError,
    CTFDeserializer,
    DenseStream,
    Deserializer,
    LengthMismatch,
    MinibatchSource,
    SparseStream,
    StreamDef,
    StreamDefs,
    StreamInformation,
)
from cntkio._src.common.keys import HashedKeys, NumericKeys, TextKeys, comparable, join_keys
from order_helpers import STREAMS, Data, assert_exactly_once, keys_of, make_data, read, snapshot, unit_stream

X_ONLY = StreamDefs(x=StreamDef(field="x", shape=2))
Y_ONLY = StreamDefs(y=StreamDef(field="y", shape=7, is_sparse=True))


def write_y_file(data: Data, path: Path, *, seed: int = 0, skip: set[Any] = frozenset(), extra: str = "") -> Path:
    """``y`` of every sequence of ``data`` (as order_helpers writes it), sequences in a shuffled order."""
    order = np.random.default_rng(seed).permutation(len(data.keys)).tolist()
    lines = []
    for i in order:
        if data.keys[i] in skip:
            continue
        lines += [f"{data.keys[i]} |y {i % 7}:{t + 1} {(i + t + 3) % 7}:0.5" for t in range(data.lengths[i])]
    path.write_text("\n".join(lines) + "\n" + extra)
    return path


class Composite:
    """The two ways of reading the same data: the whole file, and x joined with a shuffled y file."""

    def __init__(self, data: Data, y_path: Path, *, chunk: int = 300, y_chunk: int = 150):
        self.data, self.y_path, self.chunk, self.y_chunk = data, y_path, chunk, y_chunk
        self.opened: list[MinibatchSource] = []

    def single(self, **options: Any) -> MinibatchSource:
        return self._open(CTFDeserializer(self.data.path, STREAMS, chunk_size_in_bytes=self.chunk), **options)

    def joined(self, **options: Any) -> MinibatchSource:
        primary = CTFDeserializer(self.data.path, X_ONLY, chunk_size_in_bytes=self.chunk)
        secondary = CTFDeserializer(self.y_path, Y_ONLY, chunk_size_in_bytes=self.y_chunk)
        return self._open([primary, secondary], **options)

    def _open(self, deserializers: Any, **options: Any) -> MinibatchSource:
        source = MinibatchSource(deserializers, **options)
        self.opened.append(source)
        return source

    def close(self) -> None:
        for source in self.opened:
            source.close()


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Data:
    return make_data(tmp_path_factory.mktemp("composite"), 60, max_length=5, seed=11)


@pytest.fixture
def both(data: Data, tmp_path: Path) -> Any:
    pair = Composite(data, write_y_file(data, tmp_path / "y.ctf", seed=5))
    yield pair
    pair.close()


MODES: dict[str, dict[str, Any]] = {"sequence": {}, "frame": {"frame_mode": True}, "bptt": {"truncation_length": 3}}
SIZES = {"sequence": [7, 13, 4, 20], "frame": [5, 9, 2], "bptt": [9, 12, 15, 9]}
ORDERS: dict[str, dict[str, Any]] = {
    "randomized": {"randomization_window_in_chunks": 3, "randomization_seed": 17},
    "samples-window": {"randomization_window_in_chunks": 0, "randomization_window_in_samples": 20},
    "compat": {"randomization_window_in_chunks": 3, "compat": True},
    "file-order": {"randomize": False},
}
PARTITIONS: dict[str, dict[str, int]] = {"whole": {}, "part-1-of-3": {"num_data_partitions": 3, "partition_index": 1}}


@pytest.mark.parametrize("partition", PARTITIONS)
@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("mode", MODES)
def test_joined_files_read_like_the_single_file(both: Composite, mode: str, order: str, partition: str) -> None:
    options = {**MODES[mode], **ORDERS[order], "max_sweeps": 2}
    expected = [snapshot(m) for m in read(both.single(**options), SIZES[mode], **PARTITIONS[partition])]
    actual = [snapshot(m) for m in read(both.joined(**options), SIZES[mode], **PARTITIONS[partition])]
    assert len(expected) > 3
    assert actual == expected


@pytest.mark.parametrize("prefetch", [True, False])
def test_max_samples_and_slices_on_a_composite(both: Composite, prefetch: bool) -> None:
    for options in ({"max_samples": 77}, {"data_slice": "[10:40]", "max_sweeps": 1}):
        options = {**options, "randomization_window_in_chunks": 2, "prefetch": prefetch}
        expected = [snapshot(m) for m in read(both.single(**options), 11)]
        assert [snapshot(m) for m in read(both.joined(**options), 11)] == expected


@pytest.mark.parametrize("mode", MODES)
def test_a_composite_checkpoint_restores_exactly(both: Composite, mode: str) -> None:
    options = {**MODES[mode], "randomization_window_in_chunks": 2, "randomization_seed": 3, "max_sweeps": 2}
    sizes = SIZES[mode]
    reference = [snapshot(m) for m in read(both.joined(**options), sizes)]
    source = both.joined(**options)
    first = read(source, sizes, limit=5)
    state = source.get_checkpoint_state()
    restored = both.joined(**options)
    restored.restore_from_checkpoint(state)
    rest = read(restored, sizes[5 % len(sizes) :] + sizes[: 5 % len(sizes)])
    assert [snapshot(m) for m in first + rest] == reference


def test_a_composite_resumes_with_another_partition_count(both: Composite, data: Data) -> None:
    options = {"randomization_window_in_chunks": 2, "randomization_seed": 8, "max_sweeps": 1}
    sources = [both.joined(**options) for _ in range(2)]
    seen = [k for i, s in enumerate(sources) for m in read(s, 6, limit=3, num_data_partitions=2, partition_index=i)
            for k in keys_of(m)]  # fmt: skip
    merged = MinibatchSource.merge_checkpoints([s.get_checkpoint_state() for s in sources])
    for index in range(3):
        resumed = both.joined(**options)
        resumed.restore_from_checkpoint(merged)
        seen += unit_stream(resumed, 6, num_data_partitions=3, partition_index=index)
    assert_exactly_once(seen, data.keys)


def test_a_composite_state_does_not_restore_onto_the_single_file(both: Composite) -> None:
    joined = both.joined(randomization_window_in_chunks=2)
    read(joined, 10, limit=2)
    with pytest.raises(ValueError, match=r"fingerprint|other data|configuration"):
        both.single(randomization_window_in_chunks=2).restore_from_checkpoint(joined.get_checkpoint_state())


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lengths=st.lists(st.integers(1, 6), min_size=1, max_size=40),
    shuffle=st.integers(0, 2**16),
    chunk=st.integers(40, 400),
    y_chunk=st.integers(20, 400),
    window=st.integers(1, 4),
    size=st.integers(1, 25),
    compat=st.booleans(),
)
def test_property_a_join_reads_like_one_file(
    tmp_path: Path, lengths: list[int], shuffle: int, chunk: int, y_chunk: int, window: int, size: int, compat: bool
) -> None:
    from order_helpers import write_ctf

    data = write_ctf(tmp_path / "p.ctf", lengths)
    pair = Composite(data, write_y_file(data, tmp_path / "py.ctf", seed=shuffle), chunk=chunk, y_chunk=y_chunk)
    try:
        options = {"randomization_window_in_chunks": window, "randomization_seed": shuffle, "max_sweeps": 2}
        options["compat"] = compat
        assert [snapshot(m) for m in read(pair.joined(**options), size)] == [
            snapshot(m) for m in read(pair.single(**options), size)
        ]
    finally:
        pair.close()


# ----------------------------------------------------------------------------------------- provenance
def test_provenance_names_each_deserializer_and_its_key(both: Composite) -> None:
    minibatch = both.joined(randomize=False).next_minibatch(6)
    x_keys, y_keys = minibatch["x"].keys, minibatch["y"].keys
    assert [k for _, k in x_keys] == [k for _, k in y_keys] == [k for _, k in minibatch.sequence_keys]
    assert {s for s, _ in x_keys} == {str(both.data.path)} and {s for s, _ in y_keys} == {str(both.y_path)}
    assert minibatch.provenance.sources == [str(both.data.path), str(both.y_path)]


# ------------------------------------------------------------------------------------------ key problems
def test_missing_keys_drop_sequences_counted_once(data: Data, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    missing = {data.keys[3], data.keys[17], data.keys[40]}
    pair = Composite(data, write_y_file(data, tmp_path / "y.ctf", skip=missing))
    with caplog.at_level(logging.WARNING, logger="cntkio"):
        source = pair.joined(max_sweeps=3, randomization_window_in_chunks=2)
        stream = unit_stream(source, 9)
    warnings = [r for r in caplog.records if "dropped" in r.getMessage()]
    assert len(warnings) == 1 and "3 of" not in warnings[0].getMessage()
    assert "missing" in warnings[0].getMessage() and str(pair.y_path) in warnings[0].getMessage()
    report = source.join_report
    assert report is not None and report.dropped == 3 and report.sequences == len(data.keys)
    assert report.deserializers[1].missing.count == 3
    assert set(report.deserializers[1].missing.keys) == missing
    assert_exactly_once(stream, [k for k in data.keys if k not in missing], times=3)
    pair.close()


def test_a_chunk_whose_keys_are_all_missing_disappears(tmp_path: Path) -> None:
    data = make_data(tmp_path, 30, max_length=2, seed=1)
    first_chunk = set(
        np.asarray(CTFDeserializer(data.path, X_ONLY, chunk_size_in_bytes=100).chunk_index(0).keys).tolist()
    )
    pair = Composite(data, write_y_file(data, tmp_path / "y.ctf", skip=first_chunk), chunk=100)
    for options in ({"randomize": False}, {"randomization_window_in_chunks": 2}, {"compat": True}):
        stream = unit_stream(pair.joined(max_sweeps=1, **options), 5)
        assert_exactly_once(stream, [k for k in data.keys if k not in first_chunk])
    pair.close()


def test_no_common_key_is_an_error(data: Data, tmp_path: Path) -> None:
    other = tmp_path / "other.ctf"
    other.write_text("1000 |y 0:1\n1001 |y 1:1\n")
    with pytest.raises(ConfigError, match="Could not reconcile"):
        MinibatchSource([CTFDeserializer(data.path, X_ONLY), CTFDeserializer(other, Y_ONLY)])


def test_strict_mode_names_the_missing_key_and_the_file(data: Data, tmp_path: Path) -> None:
    y = write_y_file(data, tmp_path / "y.ctf", skip={data.keys[7]})
    with pytest.raises(ConfigError, match=rf"key {data.keys[7]} of .*missing in .*y\.ctf"):
        MinibatchSource([CTFDeserializer(data.path, X_ONLY), CTFDeserializer(y, Y_ONLY)], strict=True)


def test_duplicate_secondary_keys_warn_or_fail_in_strict_mode(
    data: Data, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    y = write_y_file(data, tmp_path / "y.ctf", extra=f"{data.keys[2]} |y 6:9\n")
    deserializers = [CTFDeserializer(data.path, X_ONLY), CTFDeserializer(y, Y_ONLY)]
    with pytest.raises(ConfigError, match=rf"key {data.keys[2]} occurs more than once in .*y\.ctf"):
        MinibatchSource(deserializers, strict=True)
    with caplog.at_level(logging.WARNING, logger="cntkio"):
        source = MinibatchSource(deserializers, randomize=False)
    assert any("duplicate keys" in r.getMessage() for r in caplog.records)
    assert source.join_report is not None and source.join_report.deserializers[1].duplicates.count == 1
    minibatch = source.next_minibatch(1000)
    row = [k for _, k in minibatch.sequence_keys].index(data.keys[2])
    first = minibatch["y"].as_sequences()[row]
    assert first.shape[0] == data.lengths[2] and first[0, 6] != 9  # the first copy is used


def test_stream_names_must_be_unique_across_deserializers(data: Data, tmp_path: Path) -> None:
    y = write_y_file(data, tmp_path / "y.ctf")
    clash = StreamDefs(x=StreamDef(field="y", shape=7, is_sparse=True))
    with pytest.raises(ConfigError, match=r"two streams have the same name 'x'.*y\.ctf"):
        MinibatchSource([CTFDeserializer(data.path, X_ONLY), CTFDeserializer(y, clash)])


# ------------------------------------------------------------------------------------------- key kinds
class Labels(Deserializer):
    """A plug-in with one dense value per sequence (``label``), any keys, ``chunks`` chunks."""

    def __init__(self, keys: list[Any], values: list[float], chunks: int = 3, lengths: list[int] | None = None):
        self.keys, self.values, self.chunks = keys, values, chunks
        self.lengths = np.array(lengths or [1] * len(keys), dtype=np.int64)
        self.bounds = np.linspace(0, len(keys), chunks + 1).astype(int)
        self.info = StreamInformation("label", 0, "dense", np.dtype(np.float32), (1,))

    def stream_infos(self) -> list[StreamInformation]:
        return [self.info]

    def num_chunks(self) -> int:
        return self.chunks

    def chunk_index(self, chunk_id: int) -> ChunkIndex:
        a, b = self.bounds[chunk_id], self.bounds[chunk_id + 1]
        return ChunkIndex(chunk_id, self.keys[a:b], self.lengths[a:b])

    def get_chunk(self, chunk_id: int) -> dict[str, DenseStream]:
        a, b = self.bounds[chunk_id], self.bounds[chunk_id + 1]
        lengths = self.lengths[a:b]
        values = np.repeat(np.array(self.values[a:b], dtype=np.float32), lengths).reshape(-1, 1)
        return {"label": DenseStream(values, np.concatenate([[0], np.cumsum(lengths)]))}


def test_numeric_ids_join_text_keys_by_their_decimal_text(data: Data) -> None:
    order = np.random.default_rng(2).permutation(len(data.keys)).tolist()
    labels = Labels([str(data.keys[i]) for i in order], [float(data.keys[i]) for i in order])
    source = MinibatchSource([CTFDeserializer(data.path, X_ONLY), labels], randomize=False, max_sweeps=1)
    minibatch = source.next_minibatch(10_000)
    keys = [k for _, k in minibatch.sequence_keys]
    assert keys == data.keys
    assert minibatch["label"].values[:, 0].tolist() == [float(k) for k in keys]
    assert [k for _, k in minibatch["label"].keys] == [str(k) for k in keys]
    assert source.join_report is not None and source.join_report.clean


def test_text_keys_join_text_keys() -> None:
    primary = Labels([f"utt{i:03d}" for i in range(20)], list(range(20)), chunks=4)
    primary.info = StreamInformation("p", 0, "dense", np.dtype(np.float32), (1,))
    renamed = Labels([f"utt{i:03d}" for i in reversed(range(0, 20, 2))], [100 + i for i in reversed(range(0, 20, 2))])

    class Renamed(Labels):
        def get_chunk(self, chunk_id: int) -> dict[str, DenseStream]:
            return {"p": super().get_chunk(chunk_id)["label"]}

    primary.__class__ = Renamed
    source = MinibatchSource([primary, renamed], randomize=False, max_sweeps=1)
    minibatch = source.next_minibatch(100)
    assert minibatch["p"].values[:, 0].tolist() == list(range(0, 20, 2))
    assert minibatch["label"].values[:, 0].tolist() == [100 + i for i in range(0, 20, 2)]
    assert source.join_report is not None and source.join_report.dropped == 10


def test_key_columns_compare_as_cntk_compared_them() -> None:
    numbers = NumericKeys(np.array([12, 3, 2**63 + 5], dtype=np.uint64))
    texts = TextKeys.from_strings(["3", str(2**63 + 5), "12", "x"])
    columns, by_text = comparable([numbers, texts])
    assert by_text and join_keys(columns[0], columns[1], by_text).match.tolist() == [2, 0, 1]
    signed = NumericKeys(np.array([-1, 7], dtype=np.int64))
    assert join_keys(signed, NumericKeys(np.array([2**64 - 1, 7], dtype=np.uint64)), False).match.tolist() == [-1, 1]
    hashed = HashedKeys(np.array([_cntk_hash(b"12"), _cntk_hash("é".encode())], dtype=np.uint64))
    columns, by_text = comparable([hashed, TextKeys.from_strings(["é", "12"])])
    assert not by_text and join_keys(columns[0], columns[1], by_text).match.tolist() == [1, 0]


def _cntk_hash(text: bytes) -> int:
    """The spec's sequence-key hash: h = 5381; h = (h * 33) ^ sign-extended byte, mod 2^64."""
    h = 5381
    for byte in text:
        h = ((h * 33) ^ (byte - 256 if byte > 127 else byte)) % 2**64
    return h


# ---------------------------------------------------------------------------------------------- lengths
def _lengths_pair(tmp_path: Path) -> tuple[Path, Path]:
    features = tmp_path / "features.ctf"
    features.write_text("".join(f"{i} |f {i}\n" * 4 for i in range(6)))
    labels = tmp_path / "labels.ctf"
    labels.write_text("".join(f"{i} |l {i}\n" * (3 if i in (1, 4) else 4) for i in range(6)))
    return features, labels


def _open_lengths_pair(tmp_path: Path, **options: Any) -> MinibatchSource:
    features, labels = _lengths_pair(tmp_path)
    return MinibatchSource(
        [
            CTFDeserializer(features, StreamDefs(f=StreamDef(field="f", shape=1))),
            CTFDeserializer(labels, StreamDefs(l=StreamDef(field="l", shape=1))),
        ],
        randomize=False,
        max_sweeps=1,
        **options,
    )


def test_length_mismatches_are_reported_and_padded_by_default(tmp_path: Path) -> None:
    source = _open_lengths_pair(tmp_path)
    report = source.join_report
    assert report is not None and report.length_mismatch is LengthMismatch.PAD
    assert report.deserializers[1].length_mismatches.count == 2
    assert report.deserializers[1].length_mismatches.keys == (1, 4)
    minibatch = source.next_minibatch(1000)
    assert minibatch["f"].sequence_lengths.tolist() == [4] * 6
    assert minibatch["l"].sequence_lengths.tolist() == [4, 3, 4, 4, 3, 4]
    assert minibatch["l"].mask[1].tolist() == [2, 1, 1, 0]


def test_length_mismatches_truncate_to_the_shorter(tmp_path: Path) -> None:
    source = _open_lengths_pair(tmp_path, length_mismatch="truncate")
    assert source.sweep_size == 22
    minibatch = source.next_minibatch(1000)
    assert minibatch["f"].sequence_lengths.tolist() == minibatch["l"].sequence_lengths.tolist() == [4, 3, 4, 4, 3, 4]
    frames = _open_lengths_pair(tmp_path, length_mismatch="truncate", frame_mode=True)
    assert sum(m["f"].num_samples for m in read(frames, 5)) == 22


def test_length_mismatches_can_be_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"(?s)lengths differ.*labels\.ctf.*\(1, 4\)"):
        _open_lengths_pair(tmp_path, length_mismatch="error")
    with pytest.raises(ConfigError, match=r"length_mismatch must be one of 'pad', 'truncate', 'drop', 'error'"):
        _open_lengths_pair(tmp_path, length_mismatch="cut")


def test_padded_length_mismatches_are_refused_in_frame_mode_and_bptt(tmp_path: Path) -> None:
    for options in ({"frame_mode": True}, {"truncation_length": 2}):
        with pytest.raises(ConfigError, match=r"(?s)same number of samples.*'truncate'.*labels\.ctf.*\(1, 4\)"):
            _open_lengths_pair(tmp_path, **options)


def test_per_sequence_data_is_no_length_mismatch(data: Data) -> None:
    labels = Labels([str(k) for k in data.keys], [0.0] * len(data.keys))
    source = MinibatchSource([CTFDeserializer(data.path, X_ONLY), labels], length_mismatch="error", max_sweeps=1)
    assert source.join_report is not None and source.join_report.clean
    assert source.sweep_size == data.total_samples


def test_a_secondary_stream_can_define_the_minibatch_size(tmp_path: Path) -> None:
    """As CNTK's io test: x and y in two files, y (one sample a sequence) defines the minibatch size; the
    minibatches are those of the single file with the same stream defining it."""
    single, xs, ys = tmp_path / "xy.ctf", tmp_path / "x.ctf", tmp_path / "y.ctf"
    lengths = [3, 1, 4, 2, 5, 2, 1, 3]
    single.write_text("".join(f"{i} |x {i} {t}" + (" |y 1" if t == 0 else "") + "\n" for i, n in enumerate(lengths)
                              for t in range(n)))  # fmt: skip
    xs.write_text("".join(f"{i} |x {i} {t}\n" for i, n in enumerate(lengths) for t in range(n)))
    ys.write_text("".join(f"{i} |y 1\n" for i in reversed(range(len(lengths)))))
    x, y = StreamDef(field="x", shape=2), StreamDef(field="y", shape=1, defines_mb_size=True)
    expected = read(MinibatchSource(CTFDeserializer(single, StreamDefs(x=x, y=y)), randomize=False, max_sweeps=1), 3)
    joined = MinibatchSource(
        [CTFDeserializer(xs, StreamDefs(x=x)), CTFDeserializer(ys, StreamDefs(y=y))], randomize=False, max_sweeps=1
    )
    actual = read(joined, 3)
    assert [keys_of(m) for m in actual] == [keys_of(m) for m in expected] == [[0, 1, 2], [3, 4, 5], [6, 7]]
    assert [m["x"].sequence_lengths.tolist() for m in actual] == [m["x"].sequence_lengths.tolist() for m in expected]
    assert joined.sweep_size == len(lengths)
    with pytest.raises(ConfigError, match="more than one deserializer"):
        MinibatchSource([CTFDeserializer(ys, StreamDefs(y=y)), CTFDeserializer(single, StreamDefs(x2=StreamDef(
            field="x", shape=2, defines_mb_size=True)))])  # fmt: skip


# ------------------------------------------------------------------------------------------------ memory
def test_secondary_chunks_are_loaded_on_demand_and_released(data: Data, tmp_path: Path) -> None:
    pair = Composite(data, write_y_file(data, tmp_path / "y.ctf", seed=1), chunk=100, y_chunk=60)
    y_chunks = CTFDeserializer(pair.y_path, Y_ONLY, chunk_size_in_bytes=60).num_chunks()
    x_chunks = CTFDeserializer(data.path, X_ONLY, chunk_size_in_bytes=100).num_chunks()
    source = pair.joined(randomization_window_in_chunks=1, prefetch=False, max_sweeps=1)
    peak = 0
    while minibatch := source.next_minibatch(3):
        assert minibatch["y"].num_samples == minibatch["x"].num_samples
        peak = max(peak, source.cached_chunks)
    assert 0 < peak < x_chunks + y_chunks
    pair.close()


# ------------------------------------------------------------------------------------------------ PyTorch
def make_joined_source(x_path: str, y_path: str) -> MinibatchSource:
    """A composite source for loader workers (a top-level function, so that it pickles)."""
    primary = CTFDeserializer(x_path, X_ONLY, chunk_size_in_bytes=300)
    secondary = CTFDeserializer(y_path, Y_ONLY, chunk_size_in_bytes=150)
    return MinibatchSource([primary, secondary], randomization_window_in_chunks=2, randomization_seed=4, max_sweeps=1)


def test_a_composite_feeds_a_dataloader_with_workers(both: Composite) -> None:
    torch = pytest.importorskip("torch")
    import functools

    from cntkio.torch import MinibatchDataset

    make = functools.partial(make_joined_source, str(both.data.path), str(both.y_path))
    expected = read(make(), 12)
    dataset = MinibatchDataset(make, 12)
    batches = list(torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2))
    assert [[k for _, k in b.keys] for b in batches] == [keys_of(m) for m in expected]
    for batch, minibatch in zip(batches, expected):
        assert np.array_equal(batch["y"].to_dense().numpy(), minibatch["y"].csr.toarray())
        assert batch.lengths["x"].tolist() == minibatch["x"].sequence_lengths.tolist()


def test_a_format_may_look_up_the_last_copy_of_a_duplicate_key(data: Data) -> None:
    class LastCopy(Labels):
        duplicate_key_copy = "last"

    keys = [str(k) for k in data.keys]
    for kind, expected in ((Labels, 1.0), (LastCopy, 2.0)):
        labels = kind([*keys, keys[5]], [1.0] * len(keys) + [2.0])
        source = MinibatchSource([CTFDeserializer(data.path, X_ONLY), labels], randomize=False, max_sweeps=1)
        assert source.next_minibatch(10_000)["label"].values[5, 0] == expected
        assert f"the {'last' if kind is LastCopy else 'first'} copy used" in str(source.join_report)


def test_duplicate_primary_keys_are_reported_and_each_copy_read(tmp_path: Path) -> None:
    primary, secondary = tmp_path / "p.ctf", tmp_path / "s.ctf"
    primary.write_text("1 |x 1 1\n2 |x 2 2\n1 |x 3 3\n")
    secondary.write_text("2 |y 0:1\n1 |y 1:1\n")
    deserializers = [CTFDeserializer(primary, X_ONLY), CTFDeserializer(secondary, Y_ONLY)]
    source = MinibatchSource(deserializers, randomize=False, max_sweeps=1)
    assert source.join_report is not None and source.join_report.deserializers[0].duplicates.count == 1
    assert "every copy read" in str(source.join_report)
    minibatch = source.next_minibatch(100)
    assert minibatch["x"].values[:, 0].tolist() == [1, 2, 3]
    assert minibatch["y"].indices.tolist() == [1, 0, 1]
    with pytest.raises(ConfigError, match=r"key 1 occurs more than once in .*p\.ctf"):
        MinibatchSource(deserializers, strict=True)


def test_a_secondary_truncated_after_indexing_is_an_error_naming_it(data: Data, tmp_path: Path) -> None:
    y = write_y_file(data, tmp_path / "y.ctf")
    source = MinibatchSource(
        [CTFDeserializer(data.path, X_ONLY), CTFDeserializer(y, Y_ONLY, chunk_size_in_bytes=100)], max_sweeps=1
    )
    with open(y, "r+b") as handle:
        handle.truncate(y.stat().st_size // 2)
    with pytest.raises(CNTKIOError, match=r"y\.ctf"):
        read(source, 50)
    source.close()


def test_length_mismatches_can_drop_the_sequences(tmp_path: Path) -> None:
    source = _open_lengths_pair(tmp_path, length_mismatch="drop")
    report = source.join_report
    assert report is not None and report.dropped == 2 and report.deserializers[1].length_mismatches.count == 2
    minibatch = source.next_minibatch(1000)
    assert [k for _, k in minibatch.sequence_keys] == [0, 2, 3, 5]
    assert minibatch["l"].sequence_lengths.tolist() == [4, 4, 4, 4]
    frames = _open_lengths_pair(tmp_path, length_mismatch="drop", frame_mode=True)
    assert sum(m["f"].num_samples for m in read(frames, 5)) == 16


class SparseClass(Deserializer):
    """A plug-in holding one sparse sample per sequence (a class, one-hot) that broadcasts over the primary."""

    broadcast = True

    def __init__(self, keys: list[Any], classes: list[int]):
        self.keys, self.classes = keys, classes
        self.info = StreamInformation("cls", 0, "sparse", np.dtype(np.float32), (5,))

    def stream_infos(self) -> list[StreamInformation]:
        return [self.info]

    def num_chunks(self) -> int:
        return 2

    def chunk_index(self, chunk_id: int) -> ChunkIndex:
        keys = self.keys[chunk_id::2]
        return ChunkIndex(chunk_id, keys, np.ones(len(keys), dtype=np.int64))

    def get_chunk(self, chunk_id: int) -> dict[str, SparseStream]:
        classes = np.array(self.classes[chunk_id::2], dtype=np.int32)
        n = len(classes)
        offsets = np.arange(n + 1, dtype=np.int64)
        return {"cls": SparseStream(np.full(n, 2.0, np.float32), classes, offsets.copy(), offsets, 5)}


@pytest.mark.parametrize("mode", [{}, {"frame_mode": True}, {"truncation_length": 2}])
def test_a_broadcast_sparse_secondary_repeats_over_every_sample(data: Data, mode: dict[str, Any]) -> None:
    classes = {key: int(key) % 5 for key in data.keys}
    source = MinibatchSource(
        [CTFDeserializer(data.path, X_ONLY), SparseClass(list(data.keys), list(classes.values()))],
        max_sweeps=1,
        randomization_window_in_chunks=2,
        **mode,
    )
    samples = 0
    for minibatch in read(source, 7):
        x, cls = minibatch["x"], minibatch["cls"]
        assert cls.sequence_lengths.tolist() == x.sequence_lengths.tolist()
        valid = x.mask.astype(bool)
        ids = x.asarray()[..., 0][valid].astype(int)  # column 0 of x is the sequence id
        dense = cls.asarray()[valid]
        expected = np.zeros((len(ids), 5), dtype=np.float32)
        expected[np.arange(len(ids)), [classes[i] for i in ids]] = 2.0
        np.testing.assert_array_equal(dense, expected)
        samples += len(ids)
    assert samples == data.total_samples
