"""``sequence_to_cntk_text_format``: its exact output, and bit-exact round trips through CTFDeserializer."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from cntkio import StreamDef, StreamDefs, sequence_to_cntk_text_format


def bits(values: np.ndarray) -> list[int]:
    """IEEE bit patterns (exact comparison; -0.0 differs from 0.0)."""
    array = np.ascontiguousarray(values)
    return array.view({4: np.uint32, 8: np.uint64}[array.itemsize]).ravel().tolist()


# ------------------------------------------------------------------------------------- format
def test_tab_after_id_sorted_aliases_and_shorter_tensors_drop_out():
    text = sequence_to_cntk_text_format(
        3, {"b": np.array([[1, 2], [3, 4], [5, 6]], dtype=np.float32), "a": [{2: 1.5, 0: 2.0}, {}]}
    )
    assert text == "3\t|a 0:2.0 2:1.5 |b 1 2\n3\t|a  |b 3 4\n3\t|b 5 6"


def test_empty_map_gives_an_empty_string():
    assert sequence_to_cntk_text_format(0, {}) == ""


def test_zero_length_tensor_gives_an_empty_string():
    assert sequence_to_cntk_text_format(0, {"x": np.zeros((0, 3))}) == ""


def test_no_trailing_newline():
    text = sequence_to_cntk_text_format(9, {"x": np.ones((2, 1), dtype=np.float32)})
    assert text == "9\t|x 1\n9\t|x 1"


def test_integral_dense_values_are_written_as_cntk_does():
    """Issue 6 part 4: ``1 0 0 0``, not ``1.0 0.0 0.0 0.0`` (and -0.0 keeps its sign)."""
    text = sequence_to_cntk_text_format(0, {"x": np.array([[1, 0, 0, 0], [2.5, -3, -0.0, 1e20]], dtype=np.float32)})
    assert text == "0\t|x 1 0 0 0\n0\t|x 2.5 -3 -0.0 1e+20"


@pytest.mark.parametrize("value", ["abc", None, {"a": 1}, b"xyz", np.array(["a", "b"]), 3.0])
def test_a_value_that_is_not_a_tensor_is_a_value_error(value):
    with pytest.raises(ValueError, match="alias 'x'"):
        sequence_to_cntk_text_format(0, {"x": value})


def test_dense_values_use_str_of_the_dtype():
    text = sequence_to_cntk_text_format(
        0, {"f": np.array([[0.1, 1e-45, -0.0]], dtype=np.float32), "d": np.array([[0.1, 1e300, 5e-324]])}
    )
    assert text == "0\t|d 0.1 1e+300 5e-324 |f 0.1 1e-45 -0.0"


def test_integer_arrays():
    assert sequence_to_cntk_text_format(1, {"i": np.array([[1, -2]], dtype=np.int64)}) == "1\t|i 1 -2"


def test_multi_dimensional_samples_are_written_in_c_order():
    text = sequence_to_cntk_text_format(0, {"x": np.arange(8, dtype=np.float32).reshape(2, 2, 2)})
    assert text == "0\t|x 0 1 2 3\n0\t|x 4 5 6 7"


def test_sparse_dicts_are_sorted_by_index():
    text = sequence_to_cntk_text_format(5, {"s": [{7: 1.0, 2: 0.5, 4: -3.0}]})
    assert text == "5\t|s 2:0.5 4:-3.0 7:1.0"


def test_scipy_sparse_rows():
    matrix = scipy.sparse.csr_matrix(np.array([[0, 1.5, 0, 2.0], [0, 0, 0, 0]]))
    assert sequence_to_cntk_text_format(0, {"s": matrix}) == "0\t|s 1:1.5 3:2.0\n0\t|s "


@pytest.mark.parametrize("kind", [scipy.sparse.csc_matrix, scipy.sparse.lil_matrix, scipy.sparse.csr_array])
def test_other_scipy_sparse_formats(kind):
    matrix = kind(np.array([[0, 1.5, 0], [2.0, 0, 0]]))
    assert sequence_to_cntk_text_format(0, {"s": matrix}) == "0\t|s 1:1.5\n0\t|s 0:2.0"


def test_scipy_coo_matrix():
    matrix = scipy.sparse.coo_matrix(np.array([[0, 1.5, 0], [2.0, 0, 0]]))
    assert sequence_to_cntk_text_format(0, {"s": matrix}) == "0\t|s 1:1.5\n0\t|s 0:2.0"


@pytest.mark.parametrize("value", [np.inf, -np.inf, np.nan])
def test_non_finite_values_are_rejected(value):
    with pytest.raises(ValueError):
        sequence_to_cntk_text_format(0, {"x": np.array([[1.0, value]])})


def test_output_reads_back(ctf):
    streams = StreamDefs(
        a=StreamDef(field="a", shape=3, is_sparse=True), b=StreamDef(field="b", shape=2), c=StreamDef(shape=1)
    )
    text = "\n".join(
        [
            sequence_to_cntk_text_format(0, {"b": np.array([[1, 2], [3, 4]], np.float32), "a": [{2: 1.5}], "c": [[7]]}),
            sequence_to_cntk_text_format(1, {"b": np.array([[5, 6]], np.float32), "a": [{}, {0: 1}], "c": [[8]]}),
        ]
    )
    parsed = ctf.read(text, streams)
    assert parsed.keys == [0, 1]
    assert parsed.lengths == [2, 2]
    assert parsed.dense("b") == [[[1, 2], [3, 4]], [[5, 6]]]
    assert parsed.sparse("a") == [[[(2, 1.5)]], [[], [(0, 1.0)]]]
    assert parsed.dense("c") == [[[7]], [[8]]]


def test_text_ids_read_back(ctf):
    text = "\n".join(
        sequence_to_cntk_text_format(key, {"v": np.array([[i], [i + 1]], np.float32)})
        for i, key in enumerate(["utt-1", "utt-2"])
    )
    parsed = ctf.read(text, StreamDefs(v=StreamDef(field="v", shape=1)))
    assert parsed.keys == ["utt-1", "utt-2"]
    assert parsed.dense("v") == [[[0], [1]], [[1], [2]]]


# ------------------------------------------------------------------------------------- round trips
def finite(dtype: type) -> st.SearchStrategy[float]:
    width = 32 if dtype == np.float32 else 64
    return st.floats(allow_nan=False, allow_infinity=False, width=width)


@st.composite
def sequences(draw: st.DrawFn, dtype: type) -> tuple[int, int, list[tuple[np.ndarray, list[dict[int, float]]]]]:
    """(dense dim, sparse dim, [(dense (len, dim) array, sparse samples as dicts)]) with random lengths."""
    dense_dim = draw(st.integers(1, 6))
    sparse_dim = draw(st.integers(1, 3000))
    result = []
    for _ in range(draw(st.integers(1, 6))):
        dense = draw(hnp.arrays(dtype, (draw(st.integers(1, 5)), dense_dim), elements=finite(dtype)))
        sparse = draw(
            st.lists(
                st.dictionaries(st.integers(0, sparse_dim - 1), finite(dtype).map(dtype), max_size=6),
                min_size=1,
                max_size=5,
            )
        )
        result.append((dense, sparse))
    return dense_dim, sparse_dim, result


def round_trip(files, dtype: type, data) -> None:
    dense_dim, sparse_dim, seqs = data
    text = "\n".join(
        sequence_to_cntk_text_format(key, {"d": dense, "s": sparse}) for key, (dense, sparse) in enumerate(seqs)
    )
    streams = StreamDefs(
        d=StreamDef(field="d", shape=dense_dim), s=StreamDef(field="s", shape=sparse_dim, is_sparse=True)
    )
    precision = "float" if dtype == np.float32 else "double"
    parsed = files.read(text + "\n", streams, precision=precision, chunk_size_in_bytes=256)
    assert parsed.keys == list(range(len(seqs)))
    assert parsed.lengths == [max(len(dense), len(sparse)) for dense, sparse in seqs]
    for key, (dense, sparse) in enumerate(seqs):
        read_dense = parsed.streams["d"][key]
        assert read_dense.dtype == dtype
        assert read_dense.shape == dense.shape
        assert bits(read_dense) == bits(dense)
        read_sparse = parsed.streams["s"][key]
        assert read_sparse.shape == (len(sparse), sparse_dim)
        for row, sample in enumerate(sparse):
            start, end = read_sparse.indptr[row], read_sparse.indptr[row + 1]
            assert read_sparse.indices[start:end].tolist() == sorted(sample)
            expected = np.array([sample[i] for i in sorted(sample)], dtype=dtype)
            assert bits(read_sparse.data[start:end]) == bits(expected)


@settings(max_examples=150, deadline=None)
@given(data=sequences(np.float32))
def test_float32_round_trip_is_bit_exact(ctf_session, data):
    round_trip(ctf_session, np.float32, data)


@settings(max_examples=150, deadline=None)
@given(data=sequences(np.float64))
def test_float64_round_trip_is_bit_exact(ctf_session, data):
    round_trip(ctf_session, np.float64, data)


@settings(max_examples=100, deadline=None)
@given(
    matrix=hnp.arrays(
        np.float32,
        st.tuples(st.integers(1, 6), st.integers(1, 50)),
        elements=st.one_of(st.just(0.0), finite(np.float32)),
    )
)
def test_scipy_sparse_round_trip(ctf_session, matrix):
    text = sequence_to_cntk_text_format(0, {"s": scipy.sparse.csr_matrix(matrix)})
    streams = StreamDefs(s=StreamDef(field="s", shape=matrix.shape[1], is_sparse=True))
    parsed = ctf_session.read(text, streams)
    read = parsed.streams["s"][0]
    assert read.shape == matrix.shape
    assert bits(read.toarray()) == bits(matrix + np.float32(0))  # -0.0 entries are dropped by csr_matrix
