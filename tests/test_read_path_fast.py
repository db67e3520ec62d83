"""The read path's fast paths give exactly what the general walk gives.

``Cursor.select`` takes a read that lies inside one block from the block's precomputed greedy chain
(``Cursor._chained``); the general walk handles partitions, layers, length buckets, epoch ends and reads that cross
blocks. Every test here reads the same source twice — once as it reads, once with the chain turned off (the slow
reference) — and compares everything observable: units, keys, values, lengths, sweep ends and the checkpoint state
after each minibatch. The native gather's arrays (views of one arena per minibatch) are checked for what NumPy users
rely on: dtype, shape, contiguity, writability, and life beyond the source.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cntkio import CTFDeserializer, MinibatchSource, StreamDef, StreamDefs
from cntkio._src.reading.cursor import Cursor
from order_helpers import STREAMS, Data, make_data, snapshot

CHUNK = 600  # bytes: the 1500-sequence file has dozens of chunks
SIZES = [1, 7, 32, 5, 64, 13, 200]


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Data:
    """1500 sequences of 1..6 samples."""
    return make_data(tmp_path_factory.mktemp("fast"), 1500, max_length=6, seed=11)


@pytest.fixture
def slow(monkeypatch: pytest.MonkeyPatch) -> Callable[[], Any]:
    """A context in which ``Cursor.select`` always takes the general walk."""

    class Slow:
        def __enter__(self) -> None:
            monkeypatch.setattr(Cursor, "_chained", lambda self, budget, epoch_end: None)

        def __exit__(self, *exc: object) -> None:
            monkeypatch.undo()

    return Slow


def open_source(data: Data, **options: Any) -> MinibatchSource:
    options.setdefault("randomization_seed", 3)
    return MinibatchSource(CTFDeserializer(data.path, STREAMS, chunk_size_in_bytes=CHUNK), **options)


def plain_state(state: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint state without what differs between two sources of the same data (nothing, so far)."""
    return dict(state)


def trace(
    source: MinibatchSource, sizes: list[int], limit: int = 10_000, partitions: Iterator[tuple[int, int]] | None = None
) -> list[Any]:
    """Everything observable about each read until the end: the minibatch, its units and the state after it."""
    out: list[Any] = []
    for step in range(limit):
        size = sizes[step % len(sizes)]
        partition: dict[str, int] = {}
        if partitions is not None:
            count, index = next(partitions)
            partition = {"num_data_partitions": count, "partition_index": index}
        minibatch = source.next_minibatch(size, **partition)
        if not minibatch:
            out.append(("end", source.get_checkpoint_state()))
            break
        units = minibatch.provenance.units.tolist()
        out.append((snapshot(minibatch), units, plain_state(source.get_checkpoint_state())))
    return out


def both(slow: Callable[[], Any], make: Callable[[], MinibatchSource], read: Callable[[MinibatchSource], Any]) -> Any:
    """``read`` of a source as it reads, checked equal to the same read with the chain turned off."""
    source = make()
    try:
        fast = read(source)
    finally:
        source.close()
    with slow():
        reference_source = make()
        try:
            reference = read(reference_source)
        finally:
            reference_source.close()
    assert fast == reference
    return fast


def count_chained(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the reads ``Cursor._chained`` answered (so a test proves the fast path ran)."""
    answered = [0]
    chained = Cursor._chained

    def counting(self: Cursor, budget: int, epoch_end: float) -> Any:
        result = chained(self, budget, epoch_end)
        answered[0] += result is not None
        return result

    monkeypatch.setattr(Cursor, "_chained", counting)
    return answered


@pytest.mark.parametrize("sizes", [[64], [1], [300], SIZES])
def test_randomized_sweeps_match_the_general_walk(data: Data, slow: Callable[[], Any], sizes: list[int]) -> None:
    result = both(slow, lambda: open_source(data, max_sweeps=3), lambda s: trace(s, sizes))
    assert result[-1][0] == "end"


def test_the_fast_path_answers_most_reads(data: Data, monkeypatch: pytest.MonkeyPatch) -> None:
    answered = count_chained(monkeypatch)
    source = open_source(data, max_sweeps=2)
    reads = len(trace(source, [16])) - 1
    source.close()
    assert answered[0] > reads // 2


@pytest.mark.parametrize("max_samples", [1, 37, 1000, 2345])
def test_max_samples_ending_mid_block(data: Data, slow: Callable[[], Any], max_samples: int) -> None:
    both(slow, lambda: open_source(data, max_samples=max_samples), lambda s: trace(s, SIZES))


def test_epochs_of_a_size_that_ends_mid_block(data: Data, slow: Callable[[], Any]) -> None:
    """Epochs of 777 samples (max_samples, read epoch by epoch with start_epoch): each ends inside a block, and later
    epochs start mid-sweep."""

    def read(source: MinibatchSource) -> list[Any]:
        out = []
        for epoch in range(4):
            source.start_epoch(epoch)
            out.append(trace(source, [50, 9]))
        return out

    both(slow, lambda: open_source(data, max_samples=777), read)


def test_file_order(data: Data, slow: Callable[[], Any]) -> None:
    both(slow, lambda: open_source(data, randomize=False, max_sweeps=2), lambda s: trace(s, SIZES))


@pytest.mark.parametrize("window", [1, 3])
def test_small_windows_many_blocks(data: Data, slow: Callable[[], Any], window: int) -> None:
    both(slow, lambda: open_source(data, randomization_window_in_chunks=window, max_sweeps=2), lambda s: trace(s, [40]))


def test_partitions_and_a_partition_count_that_changes(data: Data, slow: Callable[[], Any]) -> None:
    def read(source: MinibatchSource) -> list[Any]:
        single = trace(source, [30], limit=7)
        split = trace(source, [60], limit=40, partitions=iter([(2, 0), (2, 1)] * 20))
        again = trace(source, [25])  # back to one partition: layers of the split remain in this sweep
        return [single, split, again]

    both(slow, lambda: open_source(data, max_sweeps=2), read)


def test_length_buckets(data: Data, slow: Callable[[], Any]) -> None:
    both(slow, lambda: open_source(data, max_sweeps=2, bucket_by_length=48), lambda s: trace(s, [48, 20]))


def test_frame_mode(data: Data, slow: Callable[[], Any]) -> None:
    both(slow, lambda: open_source(data, max_sweeps=1, frame_mode=True), lambda s: trace(s, [64, 3]))


def test_truncated_bptt(data: Data, slow: Callable[[], Any]) -> None:
    both(slow, lambda: open_source(data, max_sweeps=1, truncation_length=4), lambda s: trace(s, [16]))


def test_max_sequences(data: Data, slow: Callable[[], Any]) -> None:
    def read(source: MinibatchSource) -> list[Any]:
        out = []
        while minibatch := source._next_minibatch(64, None, None, None, max_sequences=5):
            out.append((snapshot(minibatch), source.get_checkpoint_state()))
        return out

    both(slow, lambda: open_source(data, max_sweeps=1), read)


@pytest.mark.parametrize("after", [0, 1, 5, 33])
def test_restore_mid_block(data: Data, slow: Callable[[], Any], after: int) -> None:
    """A state taken mid-block, restored into a new source: it reads on as the source it came from would."""

    def read(source: MinibatchSource) -> list[Any]:
        trace(source, [20], limit=after)
        state = source.get_checkpoint_state()
        rest = trace(source, [20, 3])
        restored = open_source(data, max_sweeps=2)
        try:
            restored.restore_from_checkpoint(state)
            again = trace(restored, [20, 3])
        finally:
            restored.close()
        assert again == rest
        return rest

    both(slow, lambda: open_source(data, max_sweeps=2), read)


def test_a_restore_between_reads_of_the_same_block_moves_the_chain(data: Data) -> None:
    """Rewinding a source that holds a chain (restore to an earlier state) reads from the restored offset."""
    source = open_source(data, max_sweeps=1)
    trace(source, [20], limit=3)
    state = source.get_checkpoint_state()
    first = trace(source, [20], limit=6)
    source.restore_from_checkpoint(state)
    assert trace(source, [20], limit=6) == first
    source.close()


# --- the native gather's arrays ----------------------------------------------------------------------------------
def test_gathered_arrays_are_ordinary_numpy_arrays(tmp_path: Path) -> None:
    path = tmp_path / "shapes.ctf"
    lines = []
    for sequence in range(40):
        for step in range(1 + sequence % 4):
            dense = " ".join(str(sequence * 10 + step + k / 10) for k in range(6))
            sparse = f" |s {sequence % 5}:{step + 1}" if step % 2 == 0 else ""
            lines.append(f"{sequence} |d {dense}{sparse}")
    path.write_text("\n".join(lines) + "\n")
    streams = StreamDefs(
        d=StreamDef(field="d", shape=6),
        s=StreamDef(field="s", shape=5, is_sparse=True),
    )
    source = MinibatchSource(CTFDeserializer(str(path), streams), randomization_seed=1, max_sweeps=1)
    minibatches = []
    while minibatch := source.next_minibatch(17):
        minibatches.append(minibatch)
    source.close()
    del source
    gc.collect()
    total = 0
    for minibatch in minibatches:
        d, s = minibatch["d"], minibatch["s"]
        samples = int(d.sequence_lengths.sum())
        total += samples
        assert d.values.shape == (samples, 6) and d.values.dtype == np.float32
        assert s.values.dtype == np.float32 and s.indices.dtype == np.int32 and s.indptr.dtype == np.int64
        assert d.sequence_lengths.dtype == np.int64 and s.sequence_lengths.dtype == np.int64
        for array in (d.values, d.sequence_lengths, s.values, s.indices, s.indptr, s.sequence_lengths):
            assert array.flags.c_contiguous and array.flags.writeable and array.flags.aligned
        assert s.indptr[0] == 0 and s.indptr[-1] == len(s.values) == len(s.indices)
        assert len(s.indptr) == int(s.sequence_lengths.sum()) + 1
        for (_, key), rows in zip(minibatch.sequence_keys, d.as_sequences()):
            expected = [[key * 10 + step + k / 10 for k in range(6)] for step in range(len(rows))]
            np.testing.assert_allclose(rows, np.asarray(expected, dtype=np.float32), rtol=1e-6)
        before = d.values.copy()
        s.values[:] = -1  # writing one stream leaves the others alone
        np.testing.assert_array_equal(d.values, before)
    assert total == sum(1 + sequence % 4 for sequence in range(40))


def test_a_stream_without_values_gathers_empty_arrays(tmp_path: Path) -> None:
    path = tmp_path / "empty.ctf"
    path.write_text("".join(f"{k} |a {k} |b\n" for k in range(10)))  # b: one sample without values each
    streams = StreamDefs(a=StreamDef(field="a", shape=1), b=StreamDef(field="b", shape=4, is_sparse=True))
    source = MinibatchSource(CTFDeserializer(str(path), streams), randomization_seed=2, max_sweeps=1)
    minibatch = source.next_minibatch(4)
    source.close()
    b = minibatch["b"]
    assert b.values.shape == (0,) and b.indices.shape == (0,)
    assert b.indptr.tolist() == [0] * (int(b.sequence_lengths.sum()) + 1)
    assert minibatch["a"].values.shape == (4, 1)
