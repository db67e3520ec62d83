"""Code written against every generation of ``cntk.io`` (2.0 beta to 2.7) runs on ``cntkio.io``: the shapes of CNTK's
own ``cntk/io/tests/io_tests.py`` (values, masks, shapes through ``MinibatchData.data``), CNTK 2.0's renamed keywords
and helpers with their ``DeprecationWarning``, streams mapped after construction, and scripts using only
``cntkio.io`` names."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse

import cntkio
import cntkio.io as C
import cntkio.io.transforms as xforms
from cntkio import ConfigError, MinibatchData
from cntkio._src.compat.legacy import CTFStreamMapping

MBDATA_DENSE_1 = """0  |S0 0   |S1 0
0   |S0 1   |S1 1
0   |S0 2
0   |S0 3   |S1 3
1   |S0 4
1   |S0 5   |S1 1
1   |S0 6   |S1 2
"""

MBDATA_DENSE_2 = """0  |S0 0   |S1 0
0   |S0 1   |S1 1
0   |S0 2
0   |S0 3   |S1 3
0   |S0 4
0   |S0 5   |S1 1
0   |S0 6   |S1 2
"""

MBDATA_SPARSE = """0\t|x 560:1\t|y 1 0 0 0 0
0\t|x 0:1
0\t|x 0:1
1\t|x 560:1\t|y 0 1 0 0 0
1\t|x 0:1
1\t|x 0:1
1\t|x 424:1
"""

FOUR = "|S0 1\n|S0 2\n|S0 3\n|S0 4"  # four sequences of one sample (line mode, no final newline)


def write(tmp_path: Path, text: str, name: str = "mbdata.txt") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def four_samples(tmp_path: Path) -> C.CTFDeserializer:
    """A reader of FOUR (written once: a file rewritten under a reader is an error)."""
    path = tmp_path / "four.ctf"
    if not path.exists():
        path.write_text(FOUR)
    return C.CTFDeserializer(str(path), C.StreamDefs(features=C.StreamDef(field="S0", shape=1)))


def features_of(minibatch: Any) -> list[float]:
    return minibatch["features"].asarray().ravel().tolist()


class Node:
    """Stands for a CNTK input variable: only its ``name`` is used."""

    def __init__(self, name: str):
        self.name = name


class BetaNode:
    """CNTK 2.0 beta's variables had ``name()`` as a method."""

    def __init__(self, name: str):
        self._name = name

    def name(self) -> str:
        return self._name


# --- io_tests.py of CNTK 2.7, through cntkio.io ----------------------------------------------------------------------


def test_text_format_sparse_and_dense_shapes_and_values(tmp_path: Path) -> None:
    source = C.MinibatchSource(
        C.CTFDeserializer(
            write(tmp_path, MBDATA_SPARSE),
            C.StreamDefs(
                features=C.StreamDef(field="x", shape=1000, is_sparse=True),
                labels=C.StreamDef(field="y", shape=5, is_sparse=False),
            ),
        ),
        randomize=False,
    )
    assert isinstance(source, C.MinibatchSource)
    features_si, labels_si = source.stream_info("features"), source.stream_info("labels")
    mb = source.next_minibatch(7)
    features = mb[features_si]
    assert features.shape == features.data.shape == (2, 4, 1000)
    assert features.end_of_sweep and features.num_sequences == 2 and features.num_samples == 7
    assert features.is_sparse and features.data.is_sparse
    sequences = features.data.as_sequences()  # one CSR matrix per sequence (what 2.0 RC1's asarray() gave)
    assert isinstance(features.data.asarray(), np.ndarray)  # CNTK 2.1-2.7: a sparse value of rank > 2 is dense
    assert (features.data.asarray() == np.asarray(features.data)).all()
    assert [type(s) for s in sequences] == [scipy.sparse.csr_matrix] * 2
    assert [s.shape for s in sequences] == [(3, 1000), (4, 1000)]
    assert [s.indices.tolist() for s in sequences] == [[560, 0, 0], [560, 0, 0, 424]]
    dense = np.asarray(features.data)
    assert dense.shape == (2, 4, 1000) and dense.sum() == 7 and dense[0, 0, 560] == dense[1, 3, 424] == 1
    assert not dense[0, 3].any()  # padding
    labels = mb[labels_si]
    assert labels.shape == labels.data.shape == (2, 1, 5)
    assert labels.end_of_sweep and labels.num_sequences == 2 and labels.num_samples == 2
    assert not labels.is_sparse and not labels.data.is_sparse
    expected = [[[1, 0, 0, 0, 0]], [[0, 1, 0, 0, 0]]]
    assert labels.asarray().tolist() == labels.data.asarray().tolist() == expected
    mb = source.next_minibatch(1)
    assert not mb[features_si].end_of_sweep and not mb[labels_si].end_of_sweep
    assert mb[features_si].num_samples == 3 and mb[labels_si].num_samples == 1


def test_full_sweep_minibatch_sequences_and_masks(tmp_path: Path) -> None:
    source = C.MinibatchSource(
        C.CTFDeserializer(
            write(tmp_path, MBDATA_DENSE_1),
            C.StreamDefs(features=C.StreamDef(field="S0", shape=1), labels=C.StreamDef(field="S1", shape=1)),
        ),
        randomization_window_in_chunks=0,
        max_sweeps=1,
    )
    mb = source.next_minibatch(1000)
    features, labels = mb[source.stream_info("features")], mb[source.stream_info("labels")]
    assert features.num_sequences == labels.num_sequences == 2
    assert features.end_of_sweep and labels.end_of_sweep
    assert [s.ravel().tolist() for s in features.as_sequences()] == [[0, 1, 2, 3], [4, 5, 6]]
    assert [s.ravel().tolist() for s in features.data.as_sequences()] == [[0, 1, 2, 3], [4, 5, 6]]
    assert features.data.mask.tolist() == [[2, 1, 1, 1], [2, 1, 1, 0]]
    assert [s.ravel().tolist() for s in labels.as_sequences()] == [[0, 1, 3], [1, 2]]
    assert labels.data.mask.tolist() == [[2, 1, 1], [2, 1, 0]]
    assert np.asarray(labels.data)[:, :, 0].tolist() == [[0, 1, 3], [1, 2, 0]]
    assert source.next_minibatch(1000) == {}


def test_max_samples_with_an_input_map(tmp_path: Path) -> None:
    source = C.MinibatchSource(four_samples(tmp_path), max_samples=1)
    input_map = {"features": source["features"]}
    mb = source.next_minibatch(10, input_map)
    assert "features" in mb and mb["features"].num_samples == 1 and not mb["features"].end_of_sweep
    assert not source.next_minibatch(10, input_map)


def test_max_sweeps(tmp_path: Path) -> None:
    source = C.MinibatchSource(four_samples(tmp_path), max_sweeps=3)
    input_map = {"features": source["features"]}
    for _ in range(2):
        mb = source.next_minibatch(5, input_map)
        assert mb["features"].num_samples == 5 and mb["features"].end_of_sweep
    mb = source.next_minibatch(5, input_map)
    assert mb["features"].num_samples == 2 and mb["features"].end_of_sweep
    assert not source.next_minibatch(1, input_map)


def test_max_samples_over_several_sweeps(tmp_path: Path) -> None:
    source = C.MinibatchSource(four_samples(tmp_path), max_samples=11)
    input_map = {"features": source["features"]}
    for _ in range(2):
        mb = source.next_minibatch(5, input_map)
        assert mb["features"].num_samples == 5 and mb["features"].end_of_sweep
    mb = source.next_minibatch(5, input_map)
    assert mb["features"].num_samples == 1 and not mb["features"].end_of_sweep
    assert not source.next_minibatch(1, input_map)


@pytest.mark.parametrize(
    "limits",
    [
        {"max_sweeps": 1},
        {"max_samples": C.FULL_DATA_SWEEP},
        {"max_sweeps": 1, "max_samples": C.INFINITELY_REPEAT},
        {"max_samples": C.FULL_DATA_SWEEP, "max_sweeps": C.INFINITELY_REPEAT},
    ],
)
def test_one_sweep(tmp_path: Path, limits: dict[str, int]) -> None:
    source = C.MinibatchSource(four_samples(tmp_path), **limits)
    input_map = {"features": source["features"]}
    mb = source.next_minibatch(100, input_map)
    assert mb["features"].num_samples == 4 and mb["features"].end_of_sweep
    assert sorted(mb["features"].data.asarray().ravel().tolist()) == [1, 2, 3, 4]
    assert not source.next_minibatch(100, input_map)


def test_large_minibatch_spans_sweeps(tmp_path: Path) -> None:
    source = C.MinibatchSource(
        C.CTFDeserializer(
            write(tmp_path, MBDATA_DENSE_2),
            C.StreamDefs(features=C.StreamDef(field="S0", shape=1), labels=C.StreamDef(field="S1", shape=1)),
        ),
        randomization_window_in_chunks=0,
    )
    mb = source.next_minibatch(1000)
    features, labels = mb[source.stream_info("features")], mb[source.stream_info("labels")]
    assert features.end_of_sweep and labels.end_of_sweep
    assert features.num_samples == 1000 - 1000 % 7 and labels.num_samples == 5 * (1000 // 7)
    assert features.num_sequences == labels.num_sequences == 1000 // 7
    assert features.data.shape == (142, 7, 1) and labels.data.shape == (142, 5, 1)
    assert (features.data.mask.sum(axis=1) == 8).all()  # 2 + 6 * 1 per sequence


@pytest.mark.parametrize(
    ("alias_tensor_map", "expected"),
    [
        ({"W": np.asarray([])}, ""),
        ({"W": np.asarray([[[1, 0, 0, 0], [1, 0, 0, 0]]])}, "0\t|W 1 0 0 0 1 0 0 0"),
        (
            {"W": np.asarray([[[1, 0], [1, 0]], [[5, 6], [7, 8]]]), "L": np.asarray([[[2]]])},
            "0\t|L 2 |W 1 0 1 0\n0\t|W 5 6 7 8",
        ),
    ],
)
def test_sequence_to_cntk_text_format(alias_tensor_map: dict[str, Any], expected: str) -> None:
    assert C.sequence_to_cntk_text_format(0, alias_tensor_map) == expected


def test_transforms_module_has_cntks_helpers() -> None:
    crop = xforms.crop(crop_type="randomside", side_ratio=0.5, jitter_type="uniratio")
    scale = xforms.scale(width=100, height=200, channels=3, interpolations="linear")
    assert (crop.crop_type, crop.side_ratio, crop.aspect_ratio, crop.jitter_type) == (
        "randomside", (0.5, 0.5), (1.0, 1.0), "uniratio",
    )  # fmt: skip
    assert (scale.width, scale.height, scale.channels, scale.interpolations) == (100, 200, 3, "linear")
    assert xforms.mean("").filename == "" and xforms.color(0.1).brightness_radius == 0.1
    assert C.transforms is xforms and xforms.crop is cntkio.transforms.crop


def test_user_minibatch_source_and_minibatch_source_from_data(tmp_path: Path) -> None:
    X = np.arange(15, dtype=np.float32).reshape(5, 3)
    source = C.MinibatchSourceFromData(dict(x=X), max_samples=len(X))
    d = source.next_minibatch(3)[source.streams["x"]]
    assert d.data.asarray().tolist() == X[:3].tolist()  # items without a sequence axis, as CNTK's Value
    assert d.data.shape == (3, 3) and np.asarray(d.data).tolist() == X[:3].tolist()
    d = source.next_minibatch(3)[source.streams["x"]]
    assert d.data.asarray().tolist() == X[3:].tolist()
    assert source.next_minibatch(3) == {}
    labels = np.array([i % 3 == 0 for i in range(5)], np.float32)
    Y = scipy.sparse.csr_matrix((np.ones(5, np.float32), (range(5), labels)), shape=(5, 2))
    source = C.MinibatchSourceFromData(dict(x=X, y=Y))
    d = source.next_minibatch(3)[source.streams["y"]]
    assert d.data.asarray().todense().tolist() == [[0, 1], [1, 0], [1, 0]]
    sequences = [np.array([1, 3, 2], np.float32), np.array([4, 1], np.float32)]
    ys = [
        scipy.sparse.csr_matrix(np.array([[0, 1], [1, 0], [1, 0]], np.float32)),
        scipy.sparse.csr_matrix(np.eye(2, dtype=np.float32)),
    ]
    source = C.MinibatchSourceFromData(dict(xx=sequences, yy=ys))
    mb = source.next_minibatch(3)
    assert mb[source.streams["xx"]].data.asarray().tolist() == [[1, 3, 2]]
    assert mb[source.streams["yy"]].data.shape == (1, 3, 2)


# --- MinibatchData.data: CNTK's Value --------------------------------------------------------------------------------


def test_value_is_a_view_made_without_copying(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = C.MinibatchSource(four_samples(tmp_path), randomize=False)
    data = source.next_minibatch(4)["features"]

    def no_copy(self: MinibatchData) -> np.ndarray:
        raise AssertionError("the padded array was built")

    monkeypatch.setattr(MinibatchData, "asarray", no_copy)
    value = data.data
    assert isinstance(value, C.Value) and isinstance(value, cntkio.Value)
    assert value.shape == (4, 1, 1) and len(value) == 4 and value.num_sequences == 4 and value.num_samples == 4
    assert value.dtype == np.float32 and not value.is_sparse
    assert value.mask.tolist() == [[2]] * 4
    assert [s.tolist() for s in value.as_sequences()] == [[[1.0]], [[2.0]], [[3.0]], [[4.0]]]
    assert repr(value) == "Value('features', dense, shape=(4, 1, 1))"
    monkeypatch.undo()
    assert np.asarray(value, dtype=np.float64).dtype == np.float64
    assert np.array_equal(value, [[[1.0]], [[2.0]], [[3.0]], [[4.0]]])


def test_minibatch_data_value_of_cntk_2_0_is_as_sequences(tmp_path: Path) -> None:
    source = C.MinibatchSource(four_samples(tmp_path), randomize=False)
    data = source.next_minibatch(2)["features"]
    with pytest.warns(DeprecationWarning, match="as_sequences"):
        sequences = data.value
    assert [s.tolist() for s in sequences] == [[[1.0]], [[2.0]]]


# --- CNTK 2.0's MinibatchSource keywords -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("epoch_size", "delivered"),
    [(3, [3]), (0, [4]), (C.FULL_DATA_SWEEP, [4]), (6, [4, 2]), (C.MAX_UI64, None), (C.INFINITELY_REPEAT, None)],
)
def test_epoch_size_is_max_samples(tmp_path: Path, epoch_size: int, delivered: list[int] | None) -> None:
    with pytest.warns(DeprecationWarning, match="max_samples"):
        source = C.MinibatchSource(four_samples(tmp_path), randomize=False, epoch_size=epoch_size)
    if delivered is None:
        assert source.is_infinite() and source.next_minibatch(4)["features"].num_samples == 4
        return
    assert [source.next_minibatch(4)["features"].num_samples for _ in delivered] == delivered
    assert source.next_minibatch(4) == {}


def test_epoch_size_and_max_samples_together_are_an_error(tmp_path: Path) -> None:
    with pytest.warns(DeprecationWarning), pytest.raises(ConfigError, match="old name of max_samples"):
        C.MinibatchSource(four_samples(tmp_path), max_samples=2, epoch_size=3)


@pytest.mark.parametrize(("sample_based", "window"), [(False, (7, False)), (True, (7, True))])
def test_randomization_window_counts_chunks_or_samples(tmp_path: Path, sample_based: bool, window: Any) -> None:
    new = "randomization_window_in_samples" if sample_based else "randomization_window_in_chunks"
    with pytest.warns(DeprecationWarning, match=new):
        source = C.MinibatchSource(
            four_samples(tmp_path), randomization_window=7, sample_based_randomization_window=sample_based
        )
    assert source.randomization.enabled and (source.randomization.window, source.randomization.sample_window) == window
    with pytest.warns(DeprecationWarning):
        off = C.MinibatchSource(four_samples(tmp_path), randomize=False, randomization_window=7)
    assert not off.randomization.enabled


def test_distributed_after_is_ignored_with_a_warning(tmp_path: Path) -> None:
    reference = C.MinibatchSource(four_samples(tmp_path), randomization_seed=3, max_sweeps=2)
    with pytest.warns(DeprecationWarning, match="num_data_partitions"):
        source = C.MinibatchSource(four_samples(tmp_path), randomization_seed=3, max_sweeps=2, distributed_after=0)
    assert features_of(source.next_minibatch(8)) == features_of(reference.next_minibatch(8))


def test_multithreaded_deserializer_is_ignored_with_a_warning(tmp_path: Path) -> None:
    with pytest.warns(DeprecationWarning, match="num_parse_threads"):
        source = C.MinibatchSource(four_samples(tmp_path), randomize=False, multithreaded_deserializer=True)
    assert features_of(source.next_minibatch(4)) == [1, 2, 3, 4]


def test_an_unknown_keyword_is_a_type_error(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="randomise"):
        C.MinibatchSource(four_samples(tmp_path), randomise=False)


def test_minibatch_size_in_sequences(tmp_path: Path) -> None:
    source = C.MinibatchSource(
        C.CTFDeserializer(
            write(tmp_path, MBDATA_DENSE_1),
            C.StreamDefs(features=C.StreamDef(field="S0", shape=1), labels=C.StreamDef(field="S1", shape=1)),
        ),
        randomize=False,
    )
    with pytest.warns(DeprecationWarning, match="minibatch_size_in_samples"):
        mb = source.next_minibatch(minibatch_size_in_sequences=1)
    assert mb["features"].num_sequences == 1 and mb["features"].num_samples == 4
    with pytest.warns(DeprecationWarning):
        mb = source.next_minibatch(100, 1)  # CNTK 2.0 beta's positional form: (samples, sequences)
    assert mb["features"].num_sequences == 1 and features_of(mb) == [4, 5, 6]
    with pytest.warns(DeprecationWarning):
        mb = source.next_minibatch(5, minibatch_size_in_sequences=3)  # the sample budget is smaller
    assert mb["features"].num_sequences == 1
    with pytest.warns(DeprecationWarning):
        mb = source.next_minibatch(0, minibatch_size_in_sequences=3)  # 0: no sample limit
    assert mb["features"].num_sequences == 3 and mb["features"].num_samples == 10  # 3 + 4 + 3
    with pytest.raises(TypeError, match="minibatch_size_in_samples"):
        source.next_minibatch()
    with pytest.raises(ValueError, match="> 0"):
        source.next_minibatch(0, minibatch_size_in_sequences=0)


def test_minibatch_size_in_sequences_is_refused_with_truncated_bptt(tmp_path: Path) -> None:
    source = C.MinibatchSource(four_samples(tmp_path), randomize=False, truncation_length=2)
    with pytest.warns(DeprecationWarning), pytest.raises(ConfigError, match="truncated BPTT"):
        source.next_minibatch(4, minibatch_size_in_sequences=1)


def test_get_next_minibatch_and_an_ignored_device(tmp_path: Path) -> None:
    source = C.MinibatchSource(four_samples(tmp_path), randomize=False)
    with pytest.warns(DeprecationWarning, match="next_minibatch"):
        assert features_of(source.get_next_minibatch(2)) == [1, 2]
    key = Node("x")  # any key: CNTK passed its input variables
    mb = source.next_minibatch(2, input_map={key: source.streams.features}, device="gpu:0")
    assert list(mb) == [key] and mb[key].asarray().ravel().tolist() == [3, 4]


# --- streams mapped after construction (CNTK 2.0) ---------------------------------------------------------------------


def test_map_input_builds_the_deserializer_on_first_use(tmp_path: Path) -> None:
    path = write(tmp_path, MBDATA_SPARSE)
    reader = C.CTFDeserializer(path, max_errors=2)
    assert isinstance(reader, CTFStreamMapping)
    with pytest.warns(DeprecationWarning, match="StreamDefs"):
        same = reader.map_input(Node("features"), 1000, format="sparse", alias="x").map_input(
            "labels", dim=5, alias="y"
        )
    assert same is reader
    source = C.MinibatchSource(reader, randomize=False, max_sweeps=1)
    mb = source.next_minibatch(7)
    assert mb["features"].is_sparse and mb["features"].shape == (2, 4, 1000)
    assert mb["labels"].data.asarray()[:, 0].tolist() == [[1, 0, 0, 0, 0], [0, 1, 0, 0, 0]]
    built = reader.build()
    assert isinstance(built, cntkio.CTFDeserializer) and built.errors.max_errors == 2
    assert C.MinibatchSource(reader).stream_infos() == source.stream_infos()  # the same deserializer, built once
    with pytest.raises(ConfigError, match="after a MinibatchSource used"):
        reader.map_input("more", 3)


def test_map_input_defaults_the_alias_to_the_name(tmp_path: Path) -> None:
    path = write(tmp_path, "|features 1 2\n|features 3 4\n")
    with pytest.warns(DeprecationWarning):
        reader = C.CTFDeserializer(path).map_input(BetaNode("features"), 2)
    mb = C.MinibatchSource(reader, randomize=False).next_minibatch(2)
    assert mb["features"].asarray().reshape(2, 2).tolist() == [[1, 2], [3, 4]]


def test_nothing_is_read_before_the_streams_are_final(tmp_path: Path) -> None:
    missing = str(tmp_path / "not-yet.ctf")
    with pytest.warns(DeprecationWarning):
        reader = C.CTFDeserializer(missing).map_input("features", 1, alias="S0")
    with pytest.raises(OSError):
        C.MinibatchSource(reader)
    Path(missing).write_text(FOUR)
    assert features_of(C.MinibatchSource(reader, randomize=False).next_minibatch(4)) == [1, 2, 3, 4]


def test_map_input_errors(tmp_path: Path) -> None:
    path = write(tmp_path, FOUR)
    with pytest.raises(ConfigError, match="no stream was mapped; call map_input"):
        C.MinibatchSource(C.CTFDeserializer(path))
    with pytest.raises(ConfigError, match="'dense' or 'sparse'"), pytest.warns(DeprecationWarning):
        C.CTFDeserializer(path).map_input("features", 1, format="csr")
    with pytest.raises(ConfigError, match="needs a name"), pytest.warns(DeprecationWarning):
        C.CTFDeserializer(path).map_input(Node(""), 1)


def test_the_fluent_form_joins_other_deserializers_by_key(tmp_path: Path) -> None:
    with pytest.warns(DeprecationWarning):
        features = C.CTFDeserializer(write(tmp_path, MBDATA_DENSE_1, "f.ctf")).map_input("f", 1, alias="S0")
        labels = C.CTFDeserializer(write(tmp_path, "0 |L 7\n1 |L 8\n", "l.ctf")).map_input("label", 1, alias="L")
    mb = C.MinibatchSource([features, labels], randomize=False, max_sweeps=1).next_minibatch(100)
    assert mb["label"].asarray().ravel().tolist() == [7, 8] and mb["f"].num_samples == 7


# --- CNTK 2.0's ways to make a source --------------------------------------------------------------------------------


def test_text_format_minibatch_source(tmp_path: Path) -> None:
    configs = [C.StreamConfiguration("features", 1, stream_alias="S0")]
    with pytest.warns(DeprecationWarning, match="text_format_minibatch_source"):
        source = C.text_format_minibatch_source(write(tmp_path, FOUR), configs, epoch_size=0, randomize=False)
    assert features_of(source.next_minibatch(10)) == [1, 2, 3, 4] and source.next_minibatch(10) == {}
    with pytest.warns(DeprecationWarning):
        endless = C.text_format_minibatch_source(write(tmp_path, FOUR), configs)
    assert endless.is_infinite() and endless.randomization.enabled


def test_cntk_text_format_minibatch_source(tmp_path: Path) -> None:
    streams = C.StreamDefs(features=C.StreamDef(field="S0", shape=1))
    with pytest.warns(DeprecationWarning):
        source = C.CNTKTextFormatMinibatchSource(write(tmp_path, FOUR), streams, epoch_size=2)
    assert source.next_minibatch(10)["features"].num_samples == 2 and source.next_minibatch(10) == {}


def test_reader_config(tmp_path: Path) -> None:
    with pytest.warns(DeprecationWarning):
        reader = C.CTFDeserializer(write(tmp_path, FOUR)).map_input("features", 1, alias="S0")
    with pytest.warns(DeprecationWarning, match="ReaderConfig"):
        config = C.ReaderConfig(reader, randomize=False, epoch_size=0, distributed_after=C.INFINITE_SAMPLES)
    source = config.minibatch_source()
    assert features_of(source.next_minibatch(10)) == [1, 2, 3, 4] and source.next_minibatch(10) == {}
    assert C.minibatch_source(config).next_minibatch(3)["features"].num_samples == 3
    with pytest.warns(DeprecationWarning):
        windowed = C.ReaderConfig([reader], randomization_window=50, sample_based_randomization_window=True)
    assert windowed.minibatch_source().randomization.window == 50
    with pytest.raises(NotImplementedError, match="raw reader configuration"):
        C.minibatch_source({"deserializers": []})


def test_minibatch_source_config_of_cntk_2_0_rc(tmp_path: Path) -> None:
    with pytest.warns(DeprecationWarning, match="MinibatchSourceConfig"):
        config = C.MinibatchSourceConfig(False)
    source = (
        config.add_deserializer(four_samples(tmp_path)).set_max_sweeps(1).set_multithreaded().create_minibatch_source()
    )
    assert not source.randomization.enabled
    assert features_of(source.next_minibatch(10)) == [1, 2, 3, 4] and source.next_minibatch(10) == {}
    config.set_randomization_window_in_chunks(3).set_randomization_window_in_samples(100)
    assert (config.randomization_window_in_chunks, config.randomization_window_in_samples) == (0, 100)
    randomized = config.create_minibatch_source().randomization
    assert randomized.enabled and randomized.window == 100 and randomized.sample_window


def test_minibatch_source_config_of_cntk_2_1(tmp_path: Path) -> None:
    with pytest.warns(DeprecationWarning):
        config = C.MinibatchSourceConfig([four_samples(tmp_path)])
    assert config.max_samples == config.max_sweeps == C.INFINITELY_REPEAT
    assert config.randomization_window_in_chunks == C.DEFAULT_RANDOMIZATION_WINDOW_IN_CHUNKS
    config.max_samples, config.max_sweeps = 100, 3
    with pytest.raises(ConfigError, match="cannot both be set"):
        config.create_minibatch_source()
    config.max_samples = C.INFINITELY_REPEAT
    config.randomization_window_in_samples = 100
    with pytest.raises(ConfigError, match="cannot both be set"):
        config.create_minibatch_source()
    config.randomization_window_in_chunks = 0  # max_sweeps is still 3
    config.is_frame_mode_enabled, config.trace_level = True, C.TraceLevel.Info
    source = config.create_minibatch_source()
    assert source.frame_mode and source.trace_level == 2 and source.randomization.sample_window
    assert source.next_minibatch(12)["features"].num_samples == 12 and source.next_minibatch(12) == {}


def test_htk_mlf_deserializer_phone_boundaries_of_cntk_2_7(tmp_path: Path) -> None:
    mlf = write(tmp_path, '#!MLF!#\n"u1.lab"\n0 2 x 3\n2 3 y 0\n.\n', "ids.mlf")
    streams = C.StreamDefs(labels=C.StreamDef(shape=4, mlf=mlf))
    with pytest.warns(DeprecationWarning, match="phone_boundaries"):
        labels = C.HTKMLFDeserializer(None, streams, phoneBoundaries=True)
    mb = C.MinibatchSource(labels, randomize=False, max_sweeps=1).next_minibatch(10)
    assert np.asarray(mb["labels"].data)[0].tolist() == [[0, 0, 0, 2], [0, 0, 0, 1], [2, 0, 0, 0]]


# --- the cntkio.io namespace -----------------------------------------------------------------------------------------


def test_every_name_of_cntkio_io_exists_and_old_imports_still_work() -> None:
    for name in C.__all__:
        assert hasattr(C, name), name
    # cntk.io's face takes CNTK 2.0's spellings too (translated there); today's names are cntkio's own
    assert issubclass(C.MinibatchSource, cntkio.MinibatchSource) and C.CTFDeserializer is cntkio.CTFDeserializer
    assert C.INFINITE_SAMPLES == C.MAX_UI64 == C.INFINITELY_REPEAT == 2**64 - 1
    assert C.DEFAULT_RANDOMIZATION_WINDOW == C.DEFAULT_RANDOMIZATION_WINDOW_IN_CHUNKS == 128
    from cntkio import MinibatchSource, StreamDef, StreamDefs, Value  # noqa: F401 (the top-level names stay)


def test_lattice_deserializer_says_it_is_not_implemented() -> None:
    from cntkio.io import LatticeDeserializer

    with pytest.raises(NotImplementedError, match="LatticeDeserializer"):
        LatticeDeserializer("lattice.toc", C.StreamDefs(lattice=C.StreamDef()))


def run_script(tmp_path: Path, code: str, *options: str) -> str:
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(code))
    result = subprocess.run(
        [sys.executable, *options, str(script)], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_a_cntk_2_7_script_runs_after_changing_the_import(tmp_path: Path) -> None:
    write(tmp_path, MBDATA_SPARSE, "train.ctf")
    code = """
        import numpy as np
        import cntkio.io as C   # was: import cntk.io as C
        from cntkio.io import MinibatchSource, CTFDeserializer, StreamDefs, StreamDef, INFINITELY_REPEAT

        reader = CTFDeserializer("train.ctf", StreamDefs(
            features=StreamDef(field="x", shape=1000, is_sparse=True),
            labels=StreamDef(field="y", shape=5, is_sparse=False)))
        source = MinibatchSource(reader, randomize=False, max_samples=INFINITELY_REPEAT)
        input_map = {"f": source.streams.features, "l": source.streams.labels}
        mb = source.next_minibatch(7, input_map=input_map)
        print(mb["f"].shape, mb["f"].data.shape, mb["f"].data.mask.tolist(), mb["f"].is_sparse)
        print(mb["l"].data.asarray().reshape(2, 5).argmax(axis=1).tolist(), mb["l"].num_samples, mb["l"].end_of_sweep)
        state = source.get_checkpoint_state()
        print(len(source.next_minibatch(7, input_map)["f"].data))
        source.restore_from_checkpoint(state)
        print(np.asarray(source.next_minibatch(7)[source.streams.labels].data).shape)
        print(C.sequence_to_cntk_text_format(3, {"a": np.array([[1.0, 2.0]])}))
    """
    out = run_script(tmp_path, code, "-W", "error::DeprecationWarning")  # 2.7 code: no deprecated spelling
    assert out.splitlines() == [
        "(2, 4, 1000) (2, 4, 1000) [[2, 1, 1, 0], [2, 1, 1, 1]] True",
        "[0, 1] 2 True",
        "2",
        "(2, 1, 5)",
        "3\t|a 1 2",
    ]


def test_a_cntk_2_0_beta_script_runs_after_changing_the_import(tmp_path: Path) -> None:
    write(tmp_path, MBDATA_DENSE_1, "train.ctf")
    code = """
        import warnings
        warnings.simplefilter("ignore", DeprecationWarning)
        from cntkio.io import (MinibatchSource, CTFDeserializer, ReaderConfig, StreamConfiguration,
                               text_format_minibatch_source, MAX_UI64)

        class Variable:  # what CNTK's input variables gave: a name
            def __init__(self, name):
                self.name = name

        features, labels = Variable("features"), Variable("labels")
        reader = CTFDeserializer("train.ctf").map_input(features, 1, alias="S0").map_input(labels, 1, "dense", "S1")
        source = MinibatchSource(reader, randomize=False, epoch_size=0, distributed_after=MAX_UI64)
        mb = source.next_minibatch(4, input_map={features: source.streams.features, labels: source.streams.labels})
        print(mb[features].value[0].ravel().tolist(), mb[labels].mask.tolist())
        print(source.next_minibatch(100, 5)[source.streams.features].num_samples, source.next_minibatch(1))
        config = ReaderConfig([CTFDeserializer("train.ctf").map_input("x", 1, alias="S0")], randomize=False,
                              epoch_size=5)
        print(config.minibatch_source().next_minibatch(100)["x"].num_samples)
        text = text_format_minibatch_source("train.ctf", [StreamConfiguration("y", 1, False, "S1")], 0, False)
        print(text.next_minibatch(100)["y"].as_sequences()[1].ravel().tolist())
    """
    # epoch_size=5 ends after the sequence that starts before sample 5 (max_samples' overshoot): 4 + 3 samples
    assert run_script(tmp_path, code).splitlines() == ["[0.0, 1.0, 2.0, 3.0] [[2, 1, 1]]", "3 {}", "7", "[1.0, 2.0]"]


# --- CNTK 2.0's ImageDeserializer.crop/scale/mean/color --------------------------------------------------------------


def test_crop_of_cntk_2_0_beta() -> None:
    with pytest.warns(DeprecationWarning, match="cntkio.transforms.crop"):
        center = C.ImageDeserializer.crop()
    assert center == xforms.crop("center", side_ratio=1.0, jitter_type="uniratio")
    with pytest.warns(DeprecationWarning):
        random = C.ImageDeserializer.crop("random", 0.875)
    assert (random.crop_type, random.side_ratio, random.jitter_type, random.hflip) == (
        "randomside", (0.875, 0.875), "uniratio", True,
    )  # fmt: skip
    with pytest.warns(DeprecationWarning):
        jittered = C.ImageDeserializer.crop(crop_type="Random", ratio="0.875:0.466", jitter_type="UniRatio")
    assert jittered.side_ratio == (0.466, 0.875) and jittered.is_random
    with pytest.warns(DeprecationWarning):
        fixed = C.ImageDeserializer.crop(crop_type="center", ratio=0.5, jitter_type="None")
    assert fixed.jitter_type == "none" and not fixed.is_random


def test_crop_with_the_later_keywords_is_transforms_crop() -> None:
    with pytest.warns(DeprecationWarning):
        later = C.ImageDeserializer.crop(crop_type="randomside", side_ratio=0.5, jitter_type="uniratio")
    assert later == xforms.crop(crop_type="randomside", side_ratio=0.5, jitter_type="uniratio")
    with pytest.warns(DeprecationWarning):
        sized = C.ImageDeserializer.crop("center", crop_size=(24, 16), area_ratio="0.1:0.2")
    assert sized.fixed_size == (24, 16) and sized.area_ratio == (0.1, 0.2) and sized.jitter_type == "none"
    with pytest.warns(DeprecationWarning):
        assert C.ImageDeserializer.crop(crop_size="256:224").fixed_size == (256, 224)  # width:height, in order


@pytest.mark.parametrize(
    ("arguments", "error", "match"),
    [
        ({"jitter_type": "UniLength"}, ConfigError, "not supported"),
        ({"ratio": 0.5, "side_ratio": 0.5}, ConfigError, "not both"),
        ({"cropRatio": 0.5}, TypeError, "cropRatio"),
    ],
)
def test_crop_errors(arguments: dict[str, Any], error: type[Exception], match: str) -> None:
    with pytest.warns(DeprecationWarning), pytest.raises(error, match=match):
        C.ImageDeserializer.crop(**arguments)


def test_scale_mean_and_color_of_cntk_2_0() -> None:
    with pytest.warns(DeprecationWarning, match="cntkio.transforms.scale"):
        padded = C.ImageDeserializer.scale(width=8, height=6, channels=3, scaleMode="pad", padValue=114)
    assert padded == xforms.scale(8, 6, 3, scale_mode="pad", pad_value=114)
    with pytest.warns(DeprecationWarning):
        assert C.ImageDeserializer.scale(8, 6, 1, "nearest") == xforms.scale(8, 6, 1, "nearest")
    with pytest.warns(DeprecationWarning), pytest.raises(TypeError, match="interpolation"):
        C.ImageDeserializer.scale(8, 6, 3, interpolation="linear")
    with pytest.warns(DeprecationWarning, match="transforms.mean"):
        assert C.ImageDeserializer.mean("") == xforms.mean("")
    with pytest.warns(DeprecationWarning, match="transforms.color"):
        assert C.ImageDeserializer.color(0.1, 0.2, 0.3) == xforms.color(0.1, 0.2, 0.3)


def test_cntkio_minibatch_source_names_where_cntk_2_0_keywords_are_taken(tmp_path: Path) -> None:
    """Today's class takes today's keywords; a CNTK 2.0 one says that cntkio.io's class takes it (a bare TypeError
    before)."""
    with pytest.raises(TypeError, match=r"'epoch_size' \(a CNTK 2.0 spelling: cntkio.io.MinibatchSource takes it"):
        cntkio.MinibatchSource(four_samples(tmp_path), epoch_size=0)
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'epochs'$"):
        cntkio.MinibatchSource(four_samples(tmp_path), epochs=1)


def test_cntkio_minibatch_source_reads_a_mapping_the_public_ctf_deserializer_made(tmp_path: Path) -> None:
    """cntkio.CTFDeserializer(path) + map_input (CNTK 2.0's form) is read by cntkio.MinibatchSource too (the mapping
    builds its deserializer: TypeError 'not iterable' before); next_minibatch(samples, sequences) there names the
    class that takes it (an AttributeError before)."""
    reader = cntkio.CTFDeserializer(write(tmp_path, MBDATA_SPARSE))
    with pytest.warns(DeprecationWarning):
        reader.map_input("features", 1000, "sparse", alias="x").map_input("labels", 5, "dense", alias="y")
    source = cntkio.MinibatchSource(reader, randomize=False, max_sweeps=1)
    assert source.next_minibatch(7)["features"].num_samples == 7
    with pytest.raises(TypeError, match=r"cntkio\.io\.MinibatchSource takes it"):
        source.next_minibatch(4, 1)
