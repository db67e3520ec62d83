"""Regression tests of the defects found in review (issue 6, part 3), each reproduced on the earlier core,
and the cntk.io details of part 4."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections import Counter
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
    FormatError,
    MinibatchSource,
    StreamDef,
    StreamDefs,
    StreamInformation,
    _native,
)
from cntkio._src.reading import checkpoint as checkpoint
from order_helpers import STREAMS, keys_of, make_data, write_ctf

X = StreamDefs(x=StreamDef(field="x", shape=2))


def sequences_file(tmp_path: Path, count: int, length: int = 1) -> Path:
    path = tmp_path / f"seq_{count}_{length}.ctf"
    path.write_text("".join(f"{i} |x {i} {t}\n" for i in range(count) for t in range(length)))
    return path


# ----------------------------------------------------------------------------------- 1. elastic resume
def _read_all(source: MinibatchSource, size: int, partitions: int, index: int, limit: int) -> tuple[list[Any], Any]:
    keys: list[Any] = []
    for _ in range(limit):
        minibatch = source.next_minibatch(size, num_data_partitions=partitions, partition_index=index)
        if not minibatch:
            break
        keys += keys_of(minibatch)
    return keys, source.get_checkpoint_state()


def test_merge_keeps_earlier_layers_when_partition_0_is_in_the_next_sweep(tmp_path):
    """The issue's repro: 60 sequences, 2 sweeps; 2 partitions read 2 minibatches -> merge -> 3 partitions
    read unevenly (one into sweep 1, one a single minibatch, one nothing) -> merge -> 1 partition reads to
    the end. Every key must appear exactly twice."""
    path = sequences_file(tmp_path, 60)

    def open_source() -> MinibatchSource:
        return MinibatchSource(
            CTFDeserializer(path, X, chunk_size_in_bytes=120), max_sweeps=2, randomization_window_in_chunks=3
        )

    keys: list[Any] = []
    states = []
    for index in range(2):
        with open_source() as source:
            read, state = _read_all(source, 8, 2, index, 2)
            keys += read
            states.append(state)
    merged = MinibatchSource.merge_checkpoints(states)
    states = []
    for index, limit in ((0, 9), (1, 1), (2, 0)):
        with open_source() as source:
            source.restore_from_checkpoint(merged)
            read, state = _read_all(source, 9, 3, index, limit)
            keys += read
            states.append(state)
    assert states[0]["cursor"]["sweep"] == 1  # partition 0 moved into the next sweep
    merged = MinibatchSource.merge_checkpoints(states)
    with open_source() as source:
        source.restore_from_checkpoint(json.loads(json.dumps(merged)))
        read, _ = _read_all(source, 7, 1, 0, 10**6)
        keys += read
    counts = Counter(keys)
    assert set(counts.values()) == {2} and len(counts) == 60


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    steps=st.lists(
        st.tuples(st.integers(1, 4), st.lists(st.integers(0, 6), min_size=4, max_size=4), st.integers(1, 12)),
        min_size=1,
        max_size=4,
    ),
    randomized=st.booleans(),
)
def test_any_reads_and_merges_keep_every_sequence_once_per_sweep(tmp_path, steps, randomized):
    """Property: any sequence of partitionings (each partition reading any number of minibatches, across
    sweep boundaries) joined by merges, then one partition reading to the end, delivers every sequence of
    every sweep exactly once."""
    path = sequences_file(tmp_path, 30, 1)
    options: dict[str, Any] = (
        {"randomization_window_in_chunks": 2, "randomization_seed": 3} if randomized else {"randomize": False}
    )

    def open_source() -> MinibatchSource:
        return MinibatchSource(CTFDeserializer(path, X, chunk_size_in_bytes=100), max_sweeps=3, **options)

    keys: list[Any] = []
    state = None
    for partitions, reads, size in steps:
        states = []
        for index in range(partitions):
            with open_source() as source:
                if state is not None:
                    source.restore_from_checkpoint(state)
                read, partition_state = _read_all(source, size, partitions, index, reads[index])
                keys += read
                states.append(partition_state)
        state = MinibatchSource.merge_checkpoints(states)
    with open_source() as source:
        source.restore_from_checkpoint(state)
        keys += _read_all(source, 5, 1, 0, 10**6)[0]
    counts = Counter(keys)
    assert len(counts) == 30 and set(counts.values()) == {3}


# ------------------------------------------------------------------------------- 2. read-only cache
def test_changing_a_minibatch_does_not_change_later_sweeps(tmp_path):
    path = sequences_file(tmp_path, 10, 2)
    with MinibatchSource(CTFDeserializer(path, X), randomize=False) as source:
        first = source.next_minibatch(20)
        values = first["x"].values
        expected = values.copy()
        values -= 1  # the user's array: a copy, not the cache
        second = source.next_minibatch(20)
        np.testing.assert_array_equal(second["x"].values, expected)


def test_chunks_handed_out_by_the_deserializer_are_read_only(tmp_path):
    reader = CTFDeserializer(sequences_file(tmp_path, 4), X)
    chunk = reader.get_chunk(0)
    with pytest.raises(ValueError, match="read-only"):
        chunk["x"].values[0, 0] = 5
    reader.close()


def test_torch_tensors_do_not_alias_the_cache(tmp_path):
    torch_module = pytest.importorskip("cntkio.torch")
    path = sequences_file(tmp_path, 6)
    with MinibatchSource(CTFDeserializer(path, X), randomize=False) as source:
        tensor = torch_module.to_tensor(source.next_minibatch(6)["x"])
        tensor.add_(100)
        assert float(source.next_minibatch(6)["x"].values.max()) < 100


# ------------------------------------------------------------------------ 3./4. truncated or replaced files
TRUNCATE_CHILD = r"""
import os, sys, threading, time
from cntkio import CTFDeserializer, StreamDef, StreamDefs, FormatError
path, phase = sys.argv[1], sys.argv[2]
streams = StreamDefs(x=StreamDef(field="x", shape=3))
size = os.path.getsize(path)
def truncate(delay):
    time.sleep(delay)
    with open(path, "r+b") as f:
        f.truncate(size // 3)
try:
    if phase == "index":
        threading.Thread(target=truncate, args=(0.002,)).start()
        reader = CTFDeserializer(path, streams, chunk_size_in_bytes=size + 1)
        reader.get_chunk(0)
    else:
        reader = CTFDeserializer(path, streams, chunk_size_in_bytes=size + 1)
        threading.Thread(target=truncate, args=(0.002,)).start()
        for _ in range(50):
            reader.get_chunk(0)
except FormatError as error:
    print("error:", error)
print("done")
"""


@pytest.mark.parametrize("phase", ["index", "parse"])
def test_truncating_the_file_while_it_is_read_never_crashes(tmp_path, phase):
    path = tmp_path / "big.ctf"
    line = "|x 1.25 2.5 3.75\n"
    path.write_text(line * 800_000)
    result = subprocess.run(
        [sys.executable, "-c", TRUNCATE_CHILD, str(path), phase], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.rstrip().endswith("done")


def test_a_replaced_file_keeps_being_read_as_the_file_that_was_indexed(tmp_path):
    """``os.replace`` with a same-size file: the open file is still the indexed one, so keys and values
    stay together (never the new file's values under the old keys)."""
    path = tmp_path / "data.ctf"
    path.write_text("".join(f"{i} |x {i} 1\n" for i in range(5000)))
    reader = CTFDeserializer(path, X, chunk_size_in_bytes=2000)
    replacement = tmp_path / "new.ctf"
    replacement.write_text("".join(f"{i} |x {i} 7\n" for i in range(5000)))
    os.replace(replacement, path)
    with MinibatchSource(reader, randomize=False, max_sweeps=1) as source:
        while minibatch := source.next_minibatch(500):
            keys = np.array([key for _, key in minibatch.sequence_keys])
            np.testing.assert_array_equal(minibatch["x"].values[:, 0], keys)
            assert set(minibatch["x"].values[:, 1].tolist()) == {1.0}


def test_a_file_rewritten_in_place_is_an_error(tmp_path):
    path = tmp_path / "data.ctf"
    path.write_text("".join(f"{i} |x {i} 1\n" for i in range(100)))
    reader = CTFDeserializer(path, X, chunk_size_in_bytes=200)
    with open(path, "r+b") as f:
        f.write(b"7")
    os.utime(path, ns=(1, 1))
    with pytest.raises(FormatError, match="changed since it was indexed"):
        reader.get_chunk(0)


def test_a_deleted_file_keeps_being_read(tmp_path):
    path = sequences_file(tmp_path, 50)
    reader = CTFDeserializer(path, X, chunk_size_in_bytes=100)
    path.unlink()
    assert reader.get_chunk(reader.num_chunks() - 1)["x"].values[-1, 0] == 49


# ------------------------------------------------------------------------------- 5. closed sources
def test_reading_after_close_raises_at_once(tmp_path):
    source = MinibatchSource(CTFDeserializer(sequences_file(tmp_path, 1000), X, chunk_size_in_bytes=500))
    source.next_minibatch(10)
    source.close()
    for _ in range(3):
        with pytest.raises(ValueError, match="closed"):
            source.next_minibatch(10)
    source.close()


def test_sources_are_context_managers(tmp_path):
    with MinibatchSource(CTFDeserializer(sequences_file(tmp_path, 10), X)) as source:
        assert source.next_minibatch(3)
    with pytest.raises(ValueError, match="closed"):
        source.next_minibatch(3)


# ----------------------------------------------------------------- 6. tolerated errors in frame mode and BPTT
@pytest.mark.parametrize("options", [{"frame_mode": True}, {"truncation_length": 2}])
def test_a_tolerated_bad_sample_makes_its_sequence_invalid_not_fatal(tmp_path, options):
    path = tmp_path / "bad.ctf"
    lines = [f"{i} |x {i} {t}" for i in range(6) for t in range(3)]
    lines[4] = "1 |x 1 oops"  # sequence 1, row 1
    path.write_text("\n".join(lines) + "\n")
    reader = CTFDeserializer(path, X, max_errors=5, trace_level=0)
    with MinibatchSource(reader, randomize=False, max_sweeps=1, **options) as source:
        keys = []
        while minibatch := source.next_minibatch(4):
            keys += keys_of(minibatch)
            values = minibatch["x"].values
            assert not np.any(values[:, 0] == 1)  # nothing of the invalid sequence
        assert reader.errors.count == 2  # the bad number, and the row left without a sample
        assert source.invalid_sequences_skipped > 0
    delivered = {key[0] if isinstance(key, tuple) else key for key in keys}
    assert delivered == {0, 2, 3, 4, 5}


def test_a_short_stream_without_an_error_is_still_named(tmp_path):
    path = tmp_path / "ragged.ctf"
    path.write_text("0 |x 1 2 |y 1:1\n0 |x 3 4\n")
    reader = CTFDeserializer(path, STREAMS)
    with MinibatchSource(reader, frame_mode=True) as source, pytest.raises(CNTKIOError, match="input 'y'"):
        source.next_minibatch(4)


# ------------------------------------------------------------------------------------ 7. long text ids
MEMORY_CHILD = r"""
import resource, sys
from cntkio import CTFDeserializer, StreamDef, StreamDefs, MinibatchSource
from cntkio._src.cli.inspect_ctf import inspect_file, StreamSpec
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
reader = CTFDeserializer(sys.argv[1], StreamDefs(x=StreamDef(field="x", shape=1)))
with MinibatchSource(reader, max_sweeps=1) as source:
    while source.next_minibatch(1000):
        pass
inspect_file(sys.argv[1], [StreamSpec("x", 1, False, "x")])
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)
"""


def test_one_long_text_id_costs_its_bytes_not_a_fixed_width_array(tmp_path):
    path = tmp_path / "ids.ctf"
    lines = [f"s{i} |x {i}" for i in range(100_000)]
    lines[500] = "L" * 2000 + " |x 1"
    path.write_text("\n".join(lines) + "\n")
    result = subprocess.run([sys.executable, "-c", MEMORY_CHILD, str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    assert int(result.stdout.split()[-1]) < 100  # MiB (a fixed-width array of 2,000 characters: ~800)


# --------------------------------------------------------------------------------- 8./10. error locations
def test_a_fatal_index_error_names_its_line_from_the_index(tmp_path):
    path = tmp_path / "fatal.ctf"
    path.write_text("".join(f"{i} |x 1 2\n" for i in range(1000)) + "99999999999999999999 |x 1 2\n")
    with pytest.raises(FormatError, match="64-bit") as info:
        CTFDeserializer(path, X)
    assert (info.value.line, info.value.column) == (1001, 1)


def test_many_errors_on_one_line_get_their_columns(tmp_path):
    path = tmp_path / "errors.ctf"
    fields = " ".join(["|x 1 2"] + ["|x 3 4"] * 2000)
    path.write_text("|x 5 6\n" + fields + "\n")
    reader = CTFDeserializer(path, X, max_errors=10**6, trace_level=0)
    reader.get_chunk(0)
    errors = sorted(reader.errors.errors, key=lambda e: e.offset)
    assert len(errors) == 2000
    assert {e.line for e in errors} == {2}
    assert [e.column for e in errors[:3]] == [8, 15, 22]


# ---------------------------------------------------------------------------------- 9. lazy provenance
class Synthetic(Deserializer):
    """A plug-in with integer keys that counts index requests."""

    def __init__(self, chunks: int, per_chunk: int):
        self.chunks, self.per_chunk = chunks, per_chunk
        self.index_calls = 0

    def stream_infos(self) -> list[StreamInformation]:
        return [StreamInformation("v", 0, "dense", np.dtype(np.float32), (1,))]

    def num_chunks(self) -> int:
        return self.chunks

    def chunk_index(self, chunk_id: int) -> ChunkIndex:
        self.index_calls += 1
        first = chunk_id * self.per_chunk
        return ChunkIndex(chunk_id, np.arange(first, first + self.per_chunk), np.ones(self.per_chunk, dtype=np.int64))

    def get_chunk(self, chunk_id: int) -> dict[str, Any]:
        first = chunk_id * self.per_chunk
        values = np.arange(first, first + self.per_chunk, dtype=np.float32).reshape(-1, 1)
        return {"v": DenseStream(values, np.arange(self.per_chunk + 1, dtype=np.int64))}


def test_a_plug_in_index_is_read_once_and_keys_are_computed_on_demand():
    plugin = Synthetic(30, 1000)
    with MinibatchSource(plugin, max_sweeps=1) as source:
        while minibatch := source.next_minibatch(64):
            pass
        assert plugin.index_calls == 30
    with MinibatchSource(plugin, max_sweeps=1) as source:
        minibatch = source.next_minibatch(64)
        np.testing.assert_array_equal(
            [key for _, key in minibatch.sequence_keys], minibatch["v"].values[:, 0].astype(np.int64)
        )


def test_malformed_plug_in_chunks_are_rejected_at_the_boundary():
    class Broken(Synthetic):
        def get_chunk(self, chunk_id: int) -> dict[str, Any]:
            chunk = super().get_chunk(chunk_id)
            offsets = chunk["v"].seq_offsets.copy()
            offsets[-1] += 5  # claims samples that do not exist
            return {"v": DenseStream(chunk["v"].values, offsets)}

    with MinibatchSource(Broken(2, 10)) as source, pytest.raises(CNTKIOError, match="malformed"):
        source.next_minibatch(4)

    class WrongType(Synthetic):
        def get_chunk(self, chunk_id: int) -> dict[str, Any]:
            chunk = super().get_chunk(chunk_id)
            return {"v": DenseStream(chunk["v"].values.astype(np.float64), chunk["v"].seq_offsets)}

    with MinibatchSource(WrongType(2, 10)) as source, pytest.raises(CNTKIOError, match="float64"):
        source.next_minibatch(4)


# ----------------------------------------------------------------------------------------- 11. threads
def test_a_source_shared_by_threads_delivers_each_sequence_once(tmp_path):
    path = sequences_file(tmp_path, 6000)
    keys: list[Any] = []
    lock = threading.Lock()
    with MinibatchSource(CTFDeserializer(path, X, chunk_size_in_bytes=4000), max_sweeps=1) as source:

        def work() -> None:
            while minibatch := source.next_minibatch(37):
                with lock:
                    keys.extend(keys_of(minibatch))

        threads = [threading.Thread(target=work) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert sorted(keys) == list(range(6000))


# ------------------------------------------------------------------------------------- 13. smaller ones
def test_summed_duplicate_sparse_entries_that_overflow_are_an_error(tmp_path):
    path = tmp_path / "sum.ctf"
    path.write_text("0 |x 1 2 |y 3:3e38 3:3e38\n1 |x 1 2 |y 3:1\n")
    reader = CTFDeserializer(path, STREAMS, max_errors=1, trace_level=0)
    chunk = reader.get_chunk(0)
    assert np.isfinite(chunk["y"].values).all()
    assert reader.errors.count == 1 and "out of range" in reader.errors.errors[0].reason


def test_a_huge_text_id_is_shortened_in_messages(tmp_path):
    path = tmp_path / "id.ctf"
    path.write_text("A" * 100_000 + " |x 1 zz\n")
    reader = CTFDeserializer(path, X)
    with pytest.raises(FormatError) as info:
        reader.get_chunk(0)
    assert len(str(info.value)) < 500 and "100000 characters" in str(info.value)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_or_a_device_is_named_as_such(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(FormatError, match="a FIFO"):
        CTFDeserializer(fifo, X)
    with pytest.raises(FormatError, match="a character device"):
        CTFDeserializer("/dev/zero", X)


def test_the_source_keeps_a_deserializers_own_trace_level_unless_told(tmp_path):
    reader = CTFDeserializer(sequences_file(tmp_path, 3), X, trace_level=0)
    MinibatchSource(reader).close()
    assert reader.trace_level == 0
    MinibatchSource(reader, trace_level=2).close()
    assert reader.trace_level == 2


def test_stream_dimensions_are_checked_when_streams_are_defined():
    with pytest.raises(ConfigError, match="values per sample"):
        StreamDef(shape=2**62)
    with pytest.raises(ConfigError, match="positive"):
        StreamDef(shape=(3, 0))


def test_native_entry_points_check_their_arguments(tmp_path):
    path = sequences_file(tmp_path, 3)
    fd = os.open(path, os.O_RDONLY)
    try:
        aliases = [("x", False, 2)]
        offsets = np.array([0, 5], dtype=np.int64)
        with pytest.raises(ValueError, match="differ in length"):
            _native.ctf_parse(fd, 0, 10, 0, offsets, offsets[:1], 1, aliases, False, True)
        with pytest.raises(ValueError, match="outside the chunk"):
            _native.ctf_parse(fd, 0, 4, 0, offsets, offsets + 100, 1, aliases, False, True)
        with pytest.raises(ValueError, match="mode"):
            _native.ctf_parse(fd, 0, 10, 0, offsets, offsets, 7, aliases, False, True)
        with pytest.raises(ValueError, match="out of range"):
            _native.ctf_index(fd, 10, False, [("x", False, 2**62)], -1, False, False, True, 100)
        store = _native.ChunkStore([[(False, 2, "f", 4)], [(True, 5, "f", 4)]], [2, 3])
        gathered = store.gather(np.array([1], dtype=np.int32), np.array([0], dtype=np.int64), None, None, 0)
        assert gathered.missing == [(0, 1)]  # not loaded: the caller loads it and asks again
        with pytest.raises(ValueError, match="differ in length"):
            store.gather(np.array([1], dtype=np.int32), np.array([0, 1], dtype=np.int64), None, None, 0)
        with pytest.raises(ValueError, match="out of range"):
            store.gather(np.array([2], dtype=np.int32), np.array([0], dtype=np.int64), None, None, 0)
        starts = np.array([0, 2, 2, 4], dtype=np.int64)
        with pytest.raises(ValueError, match="outside"):
            store.set_lookup(1, np.array([0, 4], dtype=np.int32), starts)
        with pytest.raises(ValueError, match="slot count"):
            store.set_lookup(1, np.array([0, 3], dtype=np.int32), starts[:3])
        with pytest.raises(ValueError, match="secondary"):
            store.set_lookup(0, np.array([0, 3], dtype=np.int32), starts)
        with pytest.raises(ValueError, match="text"):
            _native.join_keys(
                (2, np.zeros(1, np.uint8), np.array([0, 1])), (0, np.zeros(1, np.uint64), None), False, False
            )
        with pytest.raises(ValueError, match="outside the blob"):
            _native.key_duplicates((2, np.zeros(1, np.uint8), np.array([0, 5])), True)
    finally:
        os.close(fd)


# --------------------------------------------------------------------------------------- 4. cntk.io details
def test_input_map_keeps_provenance(tmp_path):
    data = write_ctf(tmp_path / "small.ctf", [1, 2, 1])
    with MinibatchSource(CTFDeserializer(data.path, STREAMS), randomize=False, max_sweeps=1) as source:
        minibatch = source.next_minibatch(10, input_map={"features": source.streams.x})
        assert [key for _, key in minibatch.sequence_keys] == [0, 1, 2]
        assert minibatch["features"].keys == minibatch.sequence_keys


# ------------------------------------------------------------------------------------ checkpoint checks
@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda s: s["cursor"].update(sweep=-1), "sweep"),
        (lambda s: s["cursor"].update(position=10**9), "position"),
        (lambda s: s.update(version=99), "newer"),
        (lambda s: s.pop("fingerprint"), "fingerprint"),
        (lambda s: s["cursor"].update(block="3"), "integer"),
        (lambda s: s["cursor"].update(partitioning=[2, 5]), "partition"),
        (lambda s: s.update(minibatchSourcePosition=s["minibatchSourcePosition"] + 1), "does not match"),
        (lambda s: s["cursor"].update(layers={"0": [[2, [1]]]}), "cursors"),
        (lambda s: s["cursor"].update(block=10**6), "block"),
    ],
)
def test_malformed_checkpoints_are_clear_value_errors(tmp_path, change, message):
    """Re-sealed (a consistent digest), so that each check behind the digest is reached; the source is left
    exactly where it was."""
    data = make_data(tmp_path, 50, max_length=3)
    with MinibatchSource(CTFDeserializer(data.path, STREAMS, chunk_size_in_bytes=200)) as source:
        source.next_minibatch(7)
        state = json.loads(json.dumps(source.get_checkpoint_state()))
        change(state)
        before = source.get_checkpoint_state()
        with pytest.raises(ValueError, match=message):
            source.restore_from_checkpoint(checkpoint.seal(state))
        assert source.get_checkpoint_state() == before


@pytest.mark.parametrize(
    "change",
    [
        lambda s: s["cursor"].update(position=s["cursor"]["position"] + 1),
        lambda s: s["cursor"].update(
            block_position=s["cursor"]["block_position"] + 1, position=s["cursor"]["position"] + 1
        ),
        lambda s: s.update(epoch=3),
    ],
)
def test_a_state_changed_by_hand_is_refused(tmp_path, change):
    data = make_data(tmp_path, 50, max_length=3)
    with MinibatchSource(CTFDeserializer(data.path, STREAMS, chunk_size_in_bytes=200), randomize=False) as source:
        source.next_minibatch(7, num_data_partitions=2, partition_index=1)
        state = json.loads(json.dumps(source.get_checkpoint_state()))
        change(state)
        with pytest.raises(ValueError, match="modified or damaged"):
            source.restore_from_checkpoint(state)


def test_a_checkpoint_does_not_restore_onto_another_file_with_the_same_counts(tmp_path):
    first = write_ctf(tmp_path / "a.ctf", [2, 3, 1])
    second = write_ctf(tmp_path / "b.ctf", [2, 3, 1])
    second.path.write_text(second.path.read_text().replace("|x 1 0", "|x 1 9"))  # the same sizes, other values
    with MinibatchSource(CTFDeserializer(first.path, STREAMS)) as source:
        source.next_minibatch(2)
        state = source.get_checkpoint_state()
    with MinibatchSource(CTFDeserializer(second.path, STREAMS)) as other, pytest.raises(ValueError):
        other.restore_from_checkpoint(state)


def test_the_torch_dataset_is_a_context_manager_that_closes_open_iterations(tmp_path):
    torch_module = pytest.importorskip("cntkio.torch")
    path = sequences_file(tmp_path, 100)
    sources: list[MinibatchSource] = []

    def make_source() -> MinibatchSource:
        sources.append(MinibatchSource(CTFDeserializer(path, X), randomize=False))
        return sources[-1]

    with torch_module.MinibatchDataset(make_source, 10) as dataset:
        iterator = iter(dataset)
        next(iterator)
    with pytest.raises(ValueError, match="closed"):
        sources[0].next_minibatch(10)


# ------------------------------------------------------------------------------------- found in review
class Flaky(Synthetic):
    """Chunk 1 fails once, as a plug-in reading a network file might."""

    def __init__(self, chunks: int, per_chunk: int):
        super().__init__(chunks, per_chunk)
        self.failures = {1}

    def get_chunk(self, chunk_id: int) -> dict[str, Any]:
        if chunk_id in self.failures:
            self.failures.discard(chunk_id)
            raise OSError("transient")
        return super().get_chunk(chunk_id)


@pytest.mark.parametrize("options", [{}, {"truncation_length": 3}])
@pytest.mark.parametrize("prefetch", [False, True])
def test_a_read_that_fails_delivers_its_units_on_the_next_read(prefetch, options):
    with MinibatchSource(Flaky(4, 10), max_sweeps=1, randomize=False, prefetch=prefetch, **options) as source:
        values: list[int] = []
        failures = 0
        while True:
            try:
                minibatch = source.next_minibatch(10)
            except OSError:
                failures += 1
                continue
            if not minibatch:
                break
            data = minibatch["v"]
            values += data.values[:, 0].astype(int).tolist()
    assert sorted(values) == list(range(40)) and failures <= 1


def test_a_partition_whose_share_of_two_sweeps_was_read_before_a_merge_reads_on():
    """After a merge, layers can mark two whole sweeps as read for a partition; it must not stop there."""
    plugin = Synthetic(4, 5)

    def open_source() -> MinibatchSource:
        return MinibatchSource(plugin, max_sweeps=4, randomize=False)

    keys: list[Any] = []
    states = []
    for index, reads in ((0, 1), (1, 25)):
        with open_source() as source:
            keys += _read_all(source, 2, 2, index, reads)[0]
            states.append(source.get_checkpoint_state())
    merged = MinibatchSource.merge_checkpoints(states)
    for index in range(2):
        with open_source() as source:
            source.restore_from_checkpoint(merged)
            keys += _read_all(source, 2, 2, index, 10**6)[0]
    assert set(Counter(keys).values()) == {4} and len(Counter(keys)) == 20


def test_keys_that_round_up_to_the_end_of_their_range_keep_their_chunk(monkeypatch):
    """start + window * u with u < 1 can round to start + window for large starts; no unit may be lost."""
    from cntkio._src.corpus.table import Corpus
    from cntkio._src.order import Randomization, SweepOrder, default

    real = np.random.default_rng

    class Rounding:
        def __init__(self, seed: Any):
            self.rng, self.per_chunk = real(seed), isinstance(seed, list) and len(seed) == 3

        def permutation(self, n: int) -> np.ndarray:
            return self.rng.permutation(n)

        def random(self, n: int) -> np.ndarray:
            draws = self.rng.random(n)
            if self.per_chunk:
                draws[0] = 1 - 2**-53  # a legal draw
            return draws

    class Long(Synthetic):
        def chunk_index(self, chunk_id: int) -> ChunkIndex:
            index = super().chunk_index(chunk_id)
            return ChunkIndex(chunk_id, index.keys, np.full(self.per_chunk, 10**9, dtype=np.int64))

    monkeypatch.setattr(default.np.random, "default_rng", Rounding)
    corpus = Corpus([Long(6, 2)], None, False)
    sweep = SweepOrder(corpus, Randomization(True, 10**5, True, 0, False), 0)
    units = np.concatenate([sweep.block(k).units for k in range(sweep.num_blocks)])
    assert sorted(units.tolist()) == list(range(12))


def test_a_pickled_ctf_deserializer_reopens_its_file_and_refuses_a_changed_one(tmp_path):
    import pickle

    path = sequences_file(tmp_path, 20)
    reader = CTFDeserializer(path, X, chunk_size_in_bytes=60, max_errors=3)
    copy = pickle.loads(pickle.dumps(reader))
    np.testing.assert_array_equal(copy.get_chunk(1)["x"].values, reader.get_chunk(1)["x"].values)
    assert copy.errors.max_errors == 3 and copy.num_chunks() == reader.num_chunks()
    data = pickle.dumps(reader)
    path.write_text(path.read_text() + "20 |x 20 0\n")
    with pytest.raises(FormatError, match="changed since the deserializer was pickled"):
        pickle.loads(data)
