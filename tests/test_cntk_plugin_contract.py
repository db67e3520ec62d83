"""CNTK's plug-in contract (issue 24, section 1): a ``UserDeserializer`` is called one call at a time unless it says it
is thread-safe, ``StreamInformation`` keeps CNTK's attributes, sparse streams may be declared ``(1, dim)``, a sparse
``Value.asarray()`` follows one rule in every source, a ``UserMinibatchSource`` builds ``MinibatchData`` from arrays,
and every ``cntk.io`` name imports from ``cntkio``.

CNTK's own io tests ``test_user_deserializer``, ``test_user_deserializer_sample_mode``,
``test_user_deserializer_sequence_mode`` and ``test_usermbsource`` (``bindings/python/cntk/io/tests/io_tests.py``,
CNTK 2.7, MIT licence) are ported below: their plug-ins and assertions as CNTK wrote them, with ``cntk.io`` replaced by
``cntkio.io`` and what needs CNTK's network library (input variables, ``Value.one_hot``) replaced by plain data.
"""

from __future__ import annotations

import functools
import pickle
import random
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp

import cntkio
import cntkio.io as C
from cntkio import UserDataError
from cntkio.io import (
    CTFDeserializer,
    MinibatchData,
    MinibatchSource,
    MinibatchSourceFromData,
    StreamDef,
    StreamDefs,
    StreamInformation,
    UserDeserializer,
    UserMinibatchSource,
)


# --- 1. one call at a time, unless the plug-in is thread-safe ---------------------------------------------------------
class Overlaps(UserDeserializer):
    """Records how many of its calls run at once (each call sleeps, letting any other thread in)."""

    def __init__(self, chunks: int = 12) -> None:
        self.chunks, self.active, self.most = chunks, 0, 0
        self.threads: set[int] = set()
        self.guard = threading.Lock()

    def _enter(self) -> None:
        with self.guard:
            self.active += 1
            self.most = max(self.most, self.active)
            self.threads.add(threading.get_ident())
        time.sleep(0.003)
        with self.guard:
            self.active -= 1

    def stream_infos(self) -> list[StreamInformation]:
        self._enter()
        return [StreamInformation("x", 0, "dense", np.float32, (2,))]

    def num_chunks(self) -> int:
        self._enter()
        return self.chunks

    def get_chunk(self, chunk_id: int) -> dict[str, Any]:
        self._enter()
        return {"x": np.full((10, 2), chunk_id, dtype=np.float32)}


class ThreadSafeOverlaps(Overlaps):
    thread_safe = True


def _read_all(source: Any, size: int = 7) -> int:
    samples = 0
    while minibatch := source.next_minibatch(size):
        samples += minibatch["x"].num_samples
    return samples


def test_a_plugin_is_called_one_call_at_a_time_by_default() -> None:
    plugin = Overlaps()
    source = MinibatchSource(plugin, max_sweeps=3, randomization_window_in_chunks=4)
    assert _read_all(source) == 3 * 120
    assert plugin.most == 1 and len(plugin.threads) >= 2  # called from several threads, never two at once
    assert UserDeserializer.thread_safe is False and plugin.thread_safe is False


def test_two_sources_over_one_plugin_object_do_not_overlap_either() -> None:
    plugin = Overlaps()
    sources = [MinibatchSource(plugin, max_sweeps=2, randomization_seed=s) for s in (1, 2)]
    totals: list[int] = []
    threads = [threading.Thread(target=lambda s=s: totals.append(_read_all(s))) for s in sources]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert totals == [240, 240] and plugin.most == 1


def test_a_thread_safe_plugin_is_called_concurrently() -> None:
    plugin = ThreadSafeOverlaps(chunks=24)
    source = MinibatchSource(plugin, max_sweeps=2, randomization_window_in_chunks=8)
    assert _read_all(source, 40) == 2 * 240
    assert plugin.most >= 2


def test_a_pickled_adapter_keeps_serialising() -> None:
    info = StreamInformation("x", 0, "dense", np.float32, (2,))
    adapter = GenDeserializer(stream_infos=[info], num_chunks=3, num_sequences=4).as_deserializer()
    adapter.sequence_index()
    copy = pickle.loads(pickle.dumps(adapter))  # (DataLoader workers get the adapter pickled)
    assert copy._lock is not None and copy._lock is not adapter._lock
    assert copy.get_chunk(2)["x"].values.tolist() == [[2, 2]] * 4


class Seeded(UserDeserializer):
    """CNTK io-tests' GenDeserializer pattern: the global ``random`` seeded with the chunk id, then lengths drawn."""

    def stream_infos(self) -> list[StreamInformation]:
        return [StreamInformation("x", 0, "dense", np.float32, (2,))]

    def num_chunks(self) -> int:
        return 15

    def get_chunk(self, chunk_id: int) -> Any:
        random.seed(chunk_id)
        sequences = []
        for _ in range(100):
            sequences.append(np.full((random.randint(1, 10), 2), chunk_id, np.float32))
            sp.csr_matrix(sequences[-1])  # (GenDeserializer's work between draws: the GIL passes to other threads)
        return {"x": sequences}


def test_the_global_random_seed_pattern_reads_every_chunk_as_indexed() -> None:
    """Concurrent calls gave other lengths than the index (``UserDataError: GenDeserializer, chunk 1: sequence 33 now
    has 8 samples, the index has 10``) or, when the lengths happened to match, other values."""
    lengths = {}  # key -> length, as the seeded generator draws them
    for chunk in range(15):
        draw = random.Random(chunk)
        lengths.update({100 * chunk + i: draw.randint(1, 10) for i in range(100)})
    plugin = Seeded()
    for randomize in (False, True):
        source = MinibatchSource([plugin], randomize=randomize, max_sweeps=3, randomization_window_in_chunks=5)
        sequences = 0
        while minibatch := source.next_minibatch(20):
            x = minibatch["x"].as_sequences()
            for (_, key), values in zip(minibatch.sequence_keys, x):
                assert len(values) == lengths[key] and (values == key // 100).all()
            sequences += len(x)
        assert sequences == 3 * 15 * 100


# --- 2. StreamInformation's CNTK attributes ---------------------------------------------------------------------
def test_stream_information_has_cntks_attribute_names() -> None:
    info = StreamInformation("x", 3, "dense", np.float32, (2, 3), True)
    assert info.sample_shape == (2, 3) and info.shape == (2, 3)
    assert (info.m_name, info.m_id, info.m_storage_format) == ("x", 3, "dense")
    assert info.m_element_type == np.float32 and info.m_sample_layout == (3, 2)
    assert info.m_defines_mb_size is True and info.m_is_binary is False
    assert (info.name, info.storage_format) == ("x", "dense")
    assert StreamInformation("n", 0, "dense", np.float32, 7).sample_shape == (7,)


def test_a_plugin_reads_its_streams_sample_shape() -> None:
    class Shaped(UserDeserializer):  # CNTK's GenDeserializer and the manual's CSV reader use stream.sample_shape
        def stream_infos(self) -> list[StreamInformation]:
            return [StreamInformation("x", 0, "dense", np.float32, (2, 3))]

        def num_chunks(self) -> int:
            return 2

        def get_chunk(self, chunk_id: int) -> dict[str, Any]:
            (info,) = self.stream_infos()
            return {"x": np.full((4, *info.sample_shape), chunk_id, dtype=np.float32)}

    minibatch = MinibatchSource(Shaped(), randomize=False, max_sweeps=1).next_minibatch(8)
    assert minibatch["x"].shape == (8, 1, 2, 3)


# --- 3. sparse streams declared (1, dim) ------------------------------------------------------------------------
def test_a_sparse_stream_declared_1_by_n_is_a_dim_stream_given_back_as_declared() -> None:
    info = StreamInformation("y", 1, "sparse", np.float32, (1, 3))
    assert info.sample_shape == (1, 3) and info.shape == (3,) and info.m_sample_layout == (3, 1)
    plugin = GenDeserializer(stream_infos=[info], num_chunks=2, num_sequences=4)
    source = MinibatchSource([plugin], randomize=False, max_sweeps=1)
    (stream,) = source.stream_infos()
    assert stream.shape == (3,) and stream.sample_shape == (1, 3)
    y = source.next_minibatch(8)["y"]
    assert y.shape == y.data.shape == (8, 1, 1, 3) and y.sample_shape == (1, 3)
    assert y.asarray().shape == (8, 1, 1, 3) and y.asarray()[:, 0, 0].tolist() == [[0, 0, 0]] * 4 + [[1, 1, 1]] * 4
    assert y.csr.shape == (8, 3) and [s.shape for s in y.as_sequences()] == [(1, 3)] * 8
    deep = StreamInformation("y", 1, "sparse", np.float32, (1, 1, 5))
    assert deep.shape == (5,) and deep.sample_shape == (1, 1, 5)


def test_a_sparse_stream_with_a_leading_axis_other_than_1_is_refused() -> None:
    plugin = GenDeserializer(stream_infos=[StreamInformation("y", 0, "sparse", np.float32, (2, 3))], num_chunks=1,
                             num_sequences=2)  # fmt: skip
    with pytest.raises(cntkio.ConfigError, match=r"needs a 1-D shape \(dim,\) or \(1, \.\.\., 1, dim\), got \(2, 3\)"):
        MinibatchSource(plugin)


def test_a_sequence_given_as_one_sample_of_the_stream_shape_has_one_sample() -> None:
    """CNTK read a list item whose rank is the sample's as a sequence of one sample (io_tests' 'y' streams)."""
    infos = [StreamInformation("x", 0, "dense", np.float32, (3,)), StreamInformation("y", 1, "dense", np.float32, (1,))]
    chunk = {"x": [np.ones((2, 3), np.float32), np.zeros((4, 3), np.float32)], "y": [np.ones(1, np.float32)] * 2}
    minibatch = MinibatchSource(SimpleDeserailizer(infos, [chunk]), randomize=False).next_minibatch(6)
    assert minibatch["y"].sequence_lengths.tolist() == [1, 1] and minibatch["x"].sequence_lengths.tolist() == [2, 4]


def test_two_streams_defining_the_minibatch_size_are_refused() -> None:
    infos = [
        StreamInformation("x", 0, "dense", np.float32, (3,), True),
        StreamInformation("y", 1, "dense", np.float32, (1,), True),
    ]
    with pytest.raises(cntkio.ConfigError, match="only one stream can have defines_mb_size=True, got x, y"):
        MinibatchSource(SimpleDeserailizer(infos, [{}]))


# --- 4. one sparse .data.asarray() rule -------------------------------------------------------------------------
Y = np.array([[1, 0, 0], [0, 2, 0], [0, 0, 3], [4, 0, 0], [0, 5, 0]], dtype=np.float32)


class FromChunks(UserDeserializer):
    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data

    def stream_infos(self) -> list[StreamInformation]:
        return [StreamInformation("y", 0, "sparse", np.float32, (3,))]

    def num_chunks(self) -> int:
        return 1

    def get_chunk(self, chunk_id: int) -> dict[str, Any]:
        return self.data


def _values(tmp_path: Path) -> dict[str, Any]:
    """The same sparse stream (rows of Y, 3 items, or the first 3 rows as one sequence) from every kind of source."""
    ctf = tmp_path / "y.ctf"
    ctf.write_text("".join(f"{i} |y {' '.join(f'{j}:{v:g}' for j, v in enumerate(r) if v)}\n" for i, r in enumerate(Y)))
    streams = StreamDefs(y=StreamDef(field="y", shape=3, is_sparse=True))
    seq = [sp.csr_matrix(Y[:3])]
    user = UserMinibatch()
    return {
        "ctf": MinibatchSource(CTFDeserializer(str(ctf), streams), randomize=False).next_minibatch(3)["y"].data,
        "user sample mode": MinibatchSource(FromChunks({"y": sp.csr_matrix(Y)}), randomize=False)
        .next_minibatch(3)["y"]
        .data,
        "user sequence mode": MinibatchSource(FromChunks({"y": seq}), randomize=False).next_minibatch(3)["y"].data,
        "from data, sample mode": MinibatchSourceFromData({"y": sp.csr_matrix(Y)}).next_minibatch(3)["y"].data,
        "from data, sequence mode": MinibatchSourceFromData({"y": seq}).next_minibatch(3)["y"].data,
        "user minibatch source": user.next_minibatch(3, 1, 0)[user.info].data,
    }


class UserMinibatch(UserMinibatchSource):
    def __init__(self) -> None:
        self.info = StreamInformation("y", 0, "sparse", np.float32, (3,))
        super().__init__()

    def stream_infos(self) -> list[StreamInformation]:
        return [self.info]

    def next_minibatch(self, num_samples: int, number_of_workers: int, worker_rank: int, device: Any = None) -> Any:
        return {self.info: MinibatchData(sp.csr_matrix(Y[:3]), 3, 3, False)}


def test_a_sparse_values_asarray_is_one_rule_in_every_source(tmp_path: Path) -> None:
    """CNTK 2.1-2.7: the dense array of the value's shape; a CSR matrix when that shape is 2-D (items without a
    sequence axis)."""
    for name, value in _values(tmp_path).items():
        result = value.asarray()
        dense = np.asarray(value)
        assert dense.shape == value.shape, name
        if len(value.shape) == 2:
            assert isinstance(result, sp.csr_matrix) and result.shape == value.shape, name
            assert (result.toarray() == Y[:3]).all(), name
        else:
            assert isinstance(result, np.ndarray) and result.shape == value.shape, name
            assert (result == dense).all() and (result.reshape(-1, 3) == Y[:3]).all(), name
    shapes = {name: value.shape for name, value in _values(tmp_path).items()}
    assert shapes == {
        "ctf": (3, 1, 3),
        "user sample mode": (3, 1, 3),
        "user sequence mode": (1, 3, 3),
        "from data, sample mode": (3, 3),
        "from data, sequence mode": (1, 3, 3),
        "user minibatch source": (3, 3),
    }


def test_sparse_sequences_of_different_lengths_are_zero_padded() -> None:
    sequences = [sp.csr_matrix(Y[:3]), sp.csr_matrix(Y[3:])]
    value = MinibatchSource(FromChunks({"y": sequences}), randomize=False).next_minibatch(5)["y"].data
    result = value.asarray()
    assert isinstance(result, np.ndarray) and result.shape == (2, 3, 3)
    assert (result[0] == Y[:3]).all() and (result[1, :2] == Y[3:]).all() and not result[1, 2].any()
    assert [s.shape for s in value.as_sequences()] == [(3, 3), (2, 3)]  # (2.0 RC1's list of CSR matrices)


# --- 5. MinibatchData(value, num_sequences, num_samples, sweep_end) from arrays -------------------------------------
def test_minibatch_data_in_cntks_form_takes_arrays_and_csr() -> None:
    dense = MinibatchData(np.arange(12, dtype=np.float32).reshape(2, 3, 2), 2, 6, True)
    assert dense.shape == dense.data.shape == (2, 3, 2) and dense.end_of_sweep and dense.sample_shape == (2,)
    assert dense.sequence_lengths.tolist() == [3, 3] and dense.asarray().ravel().tolist() == list(range(12))
    items = MinibatchData(np.eye(3, dtype=np.float32), 3, 3, False)  # one sample per sequence: no sequence axis
    assert items.data.shape == (3, 3) and items.num_samples == 3 and items.data.asarray().tolist() == np.eye(3).tolist()
    one_hot = MinibatchData(sp.csr_matrix(Y), 5, 5, False)
    assert one_hot.is_sparse and one_hot.data.shape == (5, 3) and (one_hot.data.asarray().toarray() == Y).all()
    sequence = MinibatchData(sp.csr_matrix(Y), 1, 5, False)
    assert sequence.data.shape == (1, 5, 3) and (np.asarray(sequence.data)[0] == Y).all()
    ragged = MinibatchData([sp.csr_matrix(Y[:2]), sp.csr_matrix(Y[2:])], 2, 5, False)
    assert ragged.sequence_lengths.tolist() == [2, 3] and ragged.data.shape == (2, 3, 3)
    assert [s.toarray().tolist() for s in ragged.as_sequences()] == [Y[:2].tolist(), Y[2:].tolist()]
    dense_ragged = MinibatchData([np.ones((1, 4)), np.zeros((3, 4))], 2, 4, False)
    assert dense_ragged.data.shape == (2, 3, 4) and dense_ragged.info.dtype == np.float64
    again = MinibatchData(ragged.data, 2, 5, True)  # another minibatch's Value
    assert again.is_sparse and again.as_sequences()[1].shape == (3, 3) and again.end_of_sweep


def test_minibatch_data_in_cntks_form_names_what_it_accepts() -> None:
    for value in ("text", [[1, 2], [3]], {"y": Y}, sp.coo_matrix(Y)):
        with pytest.raises(TypeError, match=r"NumPy array .* SciPy CSR matrix"):
            MinibatchData(value, 1, 1, False)
    with pytest.raises(UserDataError, match="num_samples is 4"):
        MinibatchData(np.ones((2, 3, 2), np.float32), 2, 4, False)
    with pytest.raises(UserDataError, match="list of CSR matrices, one per sequence"):
        MinibatchData(sp.csr_matrix(Y), 2, 5, False)
    with pytest.raises(UserDataError, match=r"first axis \(5\) must be num_sequences \(2\)"):
        MinibatchData(Y, 2, 5, False)


def test_read_minibatch_names_cntk_form_data_after_its_key() -> None:
    source = UserMinibatch()
    minibatch = source.read_minibatch(3)
    assert minibatch["y"].info.name == "y" and minibatch["y"].data.shape == (3, 3)


# --- 6. every cntk.io name imports from cntkio ---------------------------------------------------------------------
def test_every_cntk_io_name_imports_from_cntkio() -> None:
    from cntkio import (  # noqa: F401 (the import is the test)
        DEFAULT_RANDOMIZATION_WINDOW,
        INFINITE_SAMPLES,
        MAX_UI64,
        CNTKTextFormatMinibatchSource,
        LatticeDeserializer,
        MinibatchSourceConfig,
        ReaderConfig,
        minibatch_source,
        text_format_minibatch_source,
    )

    missing = [name for name in C.__all__ if not hasattr(cntkio, name)]
    assert not missing
    assert INFINITE_SAMPLES == C.INFINITE_SAMPLES and MAX_UI64 == C.MAX_UI64
    assert DEFAULT_RANDOMIZATION_WINDOW == cntkio.DEFAULT_RANDOMIZATION_WINDOW_IN_CHUNKS
    with pytest.raises(NotImplementedError):
        LatticeDeserializer("lattices.txt", {})


def test_cntk_2_0_names_from_cntkio_warn_with_todays_spelling(tmp_path: Path) -> None:
    ctf = tmp_path / "a.ctf"
    ctf.write_text("0 |x 1 2\n1 |x 3 4\n")
    with pytest.warns(DeprecationWarning, match=r"MinibatchSource\(CTFDeserializer"):
        source = cntkio.text_format_minibatch_source(str(ctf), [cntkio.StreamConfiguration("x", 2)], randomize=False)
    assert source.next_minibatch(2)["x"].asarray().ravel().tolist() == [1, 2, 3, 4]
    with pytest.warns(DeprecationWarning):
        cntkio.MinibatchSourceConfig([cntkio.CTFDeserializer(str(ctf), StreamDefs(x=StreamDef(shape=2)))], False)


# --- CNTK's io tests (io_tests.py, CNTK 2.7), ported --------------------------------------------------------------
class SimpleDeserailizer(UserDeserializer):  # (CNTK's spelling)
    def __init__(self, stream_infos: Any, chunk_data: Any) -> None:
        super().__init__()
        self._streams = stream_infos
        self._chunk_data = chunk_data

    def stream_infos(self) -> Any:
        return self._streams

    def num_chunks(self) -> int:
        return len(self._chunk_data)

    def get_chunk(self, chunk_id: int) -> Any:
        return self._chunk_data[chunk_id % self.num_chunks()]


def test_user_deserializer() -> None:
    N = 5
    N_seq = 3
    chunk_data = [
        {
            "x": [d for d in np.arange(N * N_seq * 3).reshape((N, N_seq, 3)).astype(np.float32)],
            "y": [d for d in np.arange(N * 1).reshape((N, 1)).astype(np.float32)],
        },
        {
            "x": [d for d in np.arange(N * N_seq * 3).reshape((N, N_seq, 3)).astype(np.float32)],
            "y": [d for d in np.arange(N * 1).reshape((N, 1)).astype(np.float32)],
        },
    ]
    x, y = object(), object()  # (CNTK: input variables, the keys of input_map)

    # test StreamInformation with defines_mb_size set
    d = SimpleDeserailizer(
        stream_infos=[
            StreamInformation("x", 0, "dense", np.float32, (3,)),
            StreamInformation("y", 1, "dense", np.float32, (1,), True),
        ],
        chunk_data=chunk_data,
    )
    mbs = MinibatchSource([d], randomize=False)
    input_map = {x: mbs["x"], y: mbs["y"]}
    mb_size = 5
    batch = mbs.next_minibatch(mb_size, input_map)
    assert batch[x].number_of_sequences == mb_size
    assert batch[x].number_of_samples == mb_size * N_seq
    assert batch[y].number_of_sequences == mb_size
    assert batch[y].number_of_samples == mb_size

    # test StreamInformation without defines_mb_size set
    d = SimpleDeserailizer(
        stream_infos=[
            StreamInformation("x", 0, "dense", np.float32, (3,)),
            StreamInformation("y", 1, "dense", np.float32, (1,)),
        ],
        chunk_data=chunk_data,
    )
    mbs = MinibatchSource([d], randomize=False)
    input_map = {x: mbs["x"], y: mbs["y"]}
    batch = mbs.next_minibatch(mb_size, input_map)
    # one sequence with 3 samples is retrieved
    assert batch[x].number_of_sequences == 1
    assert batch[x].number_of_samples == N_seq
    assert batch[y].number_of_sequences == 1
    assert batch[y].number_of_samples == 1

    # test more than one defines_mb_size set
    with pytest.raises(Exception):  # noqa: B017 (as CNTK's test)
        d = SimpleDeserailizer(
            stream_infos=[
                StreamInformation("x", 0, "dense", np.float32, (3,), True),
                StreamInformation("y", 1, "dense", np.float32, (1,), True),
            ],
            chunk_data=chunk_data,
        )
        mbs = MinibatchSource([d], randomize=False)
        input_map = {x: mbs["x"], y: mbs["y"]}
        batch = mbs.next_minibatch(5, input_map)


# Helper generator
class GenDeserializer(UserDeserializer):
    def __init__(self, stream_infos: Any, num_chunks: int, num_sequences: int, max_sequence_len: int = 1) -> None:
        super().__init__()
        self._streams = stream_infos
        self._num_chunks = num_chunks
        self._num_sequences = num_sequences
        self._max_sequence_len = max_sequence_len
        self._chunk_list: list[Any] = []

    def stream_infos(self) -> Any:
        return self._streams

    def num_chunks(self) -> int:
        return self._num_chunks

    def get_chunk(self, chunk_id: int) -> Any:
        random.seed(chunk_id)
        result = {}
        for stream in self._streams:
            total = functools.reduce(lambda x, y: x * y, stream.sample_shape)
            chunk = []
            for _ in range(self._num_sequences):
                if self._max_sequence_len == 1:
                    shape = stream.sample_shape
                else:
                    seq_len = random.randint(1, self._max_sequence_len)
                    shape = [seq_len]
                    shape.extend(stream.sample_shape)
                    shape = tuple(shape) if stream.storage_format == "dense" else (shape[0], total)

                if stream.storage_format == "dense":
                    data = np.full(shape=shape, fill_value=chunk_id, dtype=np.float32)
                else:
                    data = np.full(shape=shape, fill_value=chunk_id, dtype=np.float32)
                    data = sp.csr_matrix(data, shape=shape, dtype=np.float32)
                chunk.append(data)

            if stream.storage_format == "dense":
                result[stream.name] = chunk if self._max_sequence_len != 1 else np.stack(chunk)
            else:  # sparse
                result[stream.name] = chunk if self._max_sequence_len != 1 else sp.csr_matrix(sp.vstack(chunk))

        self._chunk_list.append(result)
        return result

    def get_chunks_list(self) -> list[Any]:
        return self._chunk_list


def test_user_deserializer_sample_mode() -> None:
    streams = [
        StreamInformation("x", 0, "dense", np.float32, (2, 3)),
        StreamInformation("y", 1, "sparse", np.float32, (1, 3)),
    ]

    def run_minibatch_source(minibatch_source: Any, num_chunks: int, num_samples_per_value: int) -> None:
        sample_x_values = np.zeros(num_chunks, dtype=np.int32)
        sample_y_values = np.zeros(num_chunks, dtype=np.int32)
        mb_count = 0

        while True:
            if mb_count % 10 == 1:  # perform checkpointing
                checkpoint_state = minibatch_source.get_checkpoint_state()
                for _ in range(3):
                    minibatch_source.next_minibatch(20)
                minibatch_source.restore_from_checkpoint(checkpoint_state)
                mb_count += 1
                continue
            mb = minibatch_source.next_minibatch(20)
            mb_count += 1
            if not mb:
                break

            for sequence in mb[minibatch_source.streams.x].asarray():
                for sample in sequence:
                    value = int(sample[0][0])
                    sample_x_values[value] += 1

            for sequence in mb[minibatch_source.streams.y].asarray():
                for sample in sequence:
                    value = int(sample[0][0])
                    sample_y_values[value] += 1
            mb = None

        expected_values = np.full(num_chunks, fill_value=num_samples_per_value, dtype=np.int32)
        assert (sample_x_values == expected_values).all()
        assert (sample_y_values == expected_values).all()

    # Big chunks
    d = GenDeserializer(stream_infos=streams, num_chunks=20, num_sequences=100)
    mbs = MinibatchSource([d], randomize=False, max_sweeps=2)
    run_minibatch_source(mbs, num_chunks=20, num_samples_per_value=200)
    # Randomized
    mbs = MinibatchSource([d], randomize=True, max_sweeps=2, randomization_window_in_chunks=5)
    run_minibatch_source(mbs, num_chunks=20, num_samples_per_value=200)

    # Small chunks of 1
    d = GenDeserializer(stream_infos=streams, num_chunks=20, num_sequences=1)
    mbs = MinibatchSource([d], randomize=False, max_sweeps=3)
    run_minibatch_source(mbs, num_chunks=20, num_samples_per_value=3)
    # Randomized
    mbs = MinibatchSource([d], randomize=True, max_sweeps=3, randomization_window_in_chunks=5)
    run_minibatch_source(mbs, num_chunks=20, num_samples_per_value=3)


def test_user_deserializer_sequence_mode() -> None:
    streams = [
        StreamInformation("x", 0, "dense", np.float32, (2, 3)),
        StreamInformation("y", 1, "sparse", np.float32, (3,)),
    ]

    def run_minibatch_source(minibatch_source: Any, num_chunks: int, num_sequences_per_value: int) -> None:
        sequence_x_values = np.zeros(num_chunks, dtype=np.int32)
        sequence_y_values = np.zeros(num_chunks, dtype=np.int32)
        mb_count = 0
        while True:
            if mb_count % 10 == 1:  # perform checkpointing
                checkpoint_state = minibatch_source.get_checkpoint_state()
                for _ in range(3):
                    minibatch_source.next_minibatch(20)
                minibatch_source.restore_from_checkpoint(checkpoint_state)
                mb_count += 1
                continue

            mb = minibatch_source.next_minibatch(20)
            mb_count += 1
            if not mb:
                break

            for sequence in mb[minibatch_source.streams.x].asarray():
                sequence_x_values[int(sequence[0][0][0])] += 1

            # (CNTK: as_sequences(C.sequence.input_variable((3,), True)); the variable is accepted and not needed)
            for sequence in mb[minibatch_source.streams.y].as_sequences(None):
                sequence_y_values[int(sequence.toarray()[0][0])] += 1
            mb = None

        expected_values = np.full(num_chunks, fill_value=num_sequences_per_value, dtype=np.int32)
        assert (sequence_x_values == expected_values).all()
        assert (sequence_y_values == expected_values).all()

    # Big chunks
    d = GenDeserializer(stream_infos=streams, num_chunks=15, num_sequences=100, max_sequence_len=10)
    mbs = MinibatchSource([d], randomize=False, max_sweeps=2)
    state = mbs.get_checkpoint_state()
    mbs.restore_from_checkpoint(state)
    run_minibatch_source(mbs, num_chunks=15, num_sequences_per_value=200)
    # Randomized
    mbs = MinibatchSource([d], randomize=True, max_sweeps=2, randomization_window_in_chunks=5)
    state = mbs.get_checkpoint_state()
    mbs.restore_from_checkpoint(state)
    run_minibatch_source(mbs, num_chunks=15, num_sequences_per_value=200)

    # Small chunks of 1
    d = GenDeserializer(stream_infos=streams, num_chunks=15, num_sequences=1, max_sequence_len=10)
    mbs = MinibatchSource([d], randomize=False, max_sweeps=3)
    run_minibatch_source(mbs, num_chunks=15, num_sequences_per_value=3)
    # Randomized
    mbs = MinibatchSource([d], randomize=True, max_sweeps=3, randomization_window_in_chunks=5)
    run_minibatch_source(mbs, num_chunks=15, num_sequences_per_value=3)


MBDATA_SPARSE = r"""0	|x 560:1	|y 1 0 0 0 0
0	|x 0:1
0	|x 0:1
1	|x 560:1	|y 0 1 0 0 0
1	|x 0:1
1	|x 0:1
1	|x 424:1
"""


class MyDataSource(UserMinibatchSource):
    def __init__(self, f_dim: int, l_dim: int) -> None:
        self.f_dim, self.l_dim = f_dim, l_dim

        self.fsi = StreamInformation("features", 0, "sparse", np.float32, (self.f_dim,))
        self.lsi = StreamInformation("labels", 1, "dense", np.float32, (self.l_dim,))

        self.data: dict[int, Any] = {}
        for line in MBDATA_SPARSE.split("\n"):
            line = line.strip()
            if not line:
                continue
            seq_id_text, data = line.split("|", 1)
            data = data.split("|")
            seq_id = int(seq_id_text.strip())

            if seq_id not in self.data:
                self.data[seq_id] = {"features": []}

            features = data[0].split(" ")
            assert features[0] == "x"
            vocab_idx = int(features[1].split(":")[0])
            self.data[seq_id]["features"].append(vocab_idx)

            if len(data) == 2:
                assert "labels" not in self.data[seq_id]
                labels = data[1].split(" ")
                assert labels[0] == "y"
                val = np.asarray([labels[1:]], dtype=np.float32)
                self.data[seq_id]["labels"] = val

        self.sequences = sorted(self.data)
        self.next_seq_idx = 0

        super().__init__()

    def stream_infos(self) -> list[StreamInformation]:
        return [self.fsi, self.lsi]

    def next_minibatch(self, num_samples: int, number_of_workers: int, worker_rank: int, device: Any = None) -> Any:
        features: list[Any] = []
        labels: list[Any] = []

        sweep_end = False

        f_sample_count = 0
        l_sample_count = 0

        while max(f_sample_count, l_sample_count) < num_samples:
            if self.next_seq_idx == len(self.sequences):
                sweep_end = True
                self.next_seq_idx = 0

            seq_id = self.sequences[self.sequences[self.next_seq_idx]]

            f_data = self.data[seq_id]["features"]
            l_data = self.data[seq_id]["labels"]
            if (features or labels) and max(f_sample_count + len(f_data), l_sample_count + len(l_data)) > num_samples:
                break
            f_sample_count += len(f_data)
            features.append(f_data)

            l_sample_count += len(l_data)
            labels.append(l_data)

            self.next_seq_idx += 1

        num_seq = len(features)

        # CNTK: f_data = Value.one_hot(batch=features, num_classes=self.f_dim): one CSR matrix per sequence here
        f_data = [
            sp.csr_matrix((np.ones(len(f), np.float32), f, np.arange(len(f) + 1)), shape=(len(f), self.f_dim))
            for f in features
        ]
        # CNTK: l_data = Value(batch=np.asarray(labels, dtype=np.float32)): the array itself here
        l_data = np.asarray(labels, dtype=np.float32)
        result = {
            self.fsi: MinibatchData(f_data, num_seq, f_sample_count, sweep_end),
            self.lsi: MinibatchData(l_data, num_seq, l_sample_count, sweep_end),
        }

        return result


def test_usermbsource(tmp_path: Path) -> None:
    tmpfile = tmp_path / "mbdata.txt"
    tmpfile.write_text(MBDATA_SPARSE)

    input_dim = 1000
    num_output_classes = 5

    # Setting up the native MB source as the ground truth
    n_mb_source = CTFDeserializer(
        str(tmpfile),
        StreamDefs(
            features=StreamDef(field="x", shape=input_dim, is_sparse=True),
            labels=StreamDef(field="y", shape=num_output_classes, is_sparse=False),
        ),
    )
    n_mb_source = MinibatchSource(n_mb_source, randomize=False)
    n_features_si = n_mb_source["features"]
    n_labels_si = n_mb_source["labels"]

    n_mb = n_mb_source.next_minibatch(2)
    n_features = n_mb[n_features_si]
    n_labels = n_mb[n_labels_si]

    # Setting up the user MB source
    u_mb_source = MyDataSource(input_dim, num_output_classes)
    u_features_si = u_mb_source["features"]
    u_labels_si = u_mb_source["labels"]

    u_mb = u_mb_source.next_minibatch(2, 1, 0)
    u_features = u_mb[u_features_si]
    u_labels = u_mb[u_labels_si]

    assert u_features.shape == n_features.shape == (1, 3, 1000)
    assert u_features.end_of_sweep == n_features.end_of_sweep
    assert u_features.num_sequences == n_features.num_sequences
    assert u_features.num_samples == n_features.num_samples
    assert u_features.is_sparse == n_features.is_sparse

    assert u_labels.shape == n_labels.shape == (1, 1, 5)
    assert u_labels.end_of_sweep is n_labels.end_of_sweep is False
    assert u_labels.num_sequences == u_labels.num_sequences
    assert u_labels.num_samples == u_labels.num_samples
    assert u_labels.is_sparse is n_labels.is_sparse is False

    u_label_data = u_labels.asarray()
    n_label_data = n_labels.asarray()
    assert np.allclose(u_label_data, n_label_data)

    n_mb = n_mb_source.next_minibatch(10)
    n_features = n_mb[n_features_si]
    n_labels = n_mb[n_labels_si]

    u_mb = u_mb_source.next_minibatch(10, 1, 0)
    u_features = u_mb[u_features_si]
    u_labels = u_mb[u_labels_si]

    assert u_labels.shape == n_labels.shape
    u_label_data = u_labels.asarray()
    n_label_data = n_labels.asarray()

    assert np.allclose(u_label_data, n_label_data)

    assert u_features.end_of_sweep is u_labels.end_of_sweep is True
    assert u_features.num_samples == n_features.num_samples
    assert u_features.num_sequences == n_features.num_sequences
    # (beyond CNTK's test: the values agree too)
    assert np.array_equal(np.asarray(u_features.data), np.asarray(n_features.data))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert u_mb_source.read_minibatch(2)["features"].info.name == "features"


def test_a_forked_child_does_not_inherit_a_held_plugin_lock(tmp_path: Path) -> None:
    """A process forked while a parse thread is inside a plug-in's get_chunk (a DataLoader worker started by fork)
    reads that plug-in: it inherited the plug-in's lock held by a thread it lacks (it waited forever before)."""
    import subprocess
    import sys
    import textwrap

    script = tmp_path / "fork.py"
    script.write_text(textwrap.dedent('''
        import os, time, numpy as np, cntkio
        from cntkio import UserDeserializer, StreamInformation

        class Slow(UserDeserializer):
            def stream_infos(self): return [StreamInformation("x", 0, "dense", np.float32, (2,))]
            def num_chunks(self): return 4
            def get_chunk(self, c): time.sleep(0.5); return {"x": np.full((10, 2), c, np.float32)}

        plugin = Slow()
        source = cntkio.MinibatchSource(plugin, max_sweeps=1, randomize=False, num_parse_threads=2)
        source.next_minibatch(10); time.sleep(0.1)  # parse threads inside get_chunk, holding its lock
        pid = os.fork()
        if pid == 0:
            child = cntkio.MinibatchSource(plugin, max_sweeps=1, randomize=False, prefetch=False)
            os._exit(0 if child.next_minibatch(10)["x"].num_samples == 10 else 3)
        _, status = os.waitpid(pid, 0)
        print("child", os.waitstatus_to_exitcode(status))
    '''))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=False)
    assert "child 0" in done.stdout, done.stdout + done.stderr


def test_a_plugin_is_indexed_once_whatever_the_sources_reading_it() -> None:
    """A new source per epoch (what cntkio.torch's passes make) over one plug-in object without chunk_index reads
    it whole once to index it, not once per source (8, 16, 24 get_chunk calls over three epochs before)."""
    calls = []

    class Counted(UserDeserializer):
        def stream_infos(self) -> list[StreamInformation]:
            return [StreamInformation("x", 0, "dense", np.float32, (2,))]

        def num_chunks(self) -> int:
            return 4

        def get_chunk(self, chunk_id: int) -> dict[str, Any]:
            calls.append(chunk_id)
            return {"x": np.full((10, 2), chunk_id, np.float32)}

    plugin = Counted()
    for _ in range(3):
        source = MinibatchSource(plugin, randomize=False, max_sweeps=1, prefetch=False)
        while source.next_minibatch(10):
            pass
    assert len(calls) == 4 + 3 * 4  # the index once, then each epoch's reads
