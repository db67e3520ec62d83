"""RecordDeserializer: framing (lines, length-prefixed, TFRecord), chunking, sweeps and checkpoints, decoder
validation and max_errors, several files, and the svmlight / CSV examples against scikit-learn and NumPy."""

from __future__ import annotations

import importlib.util
import logging
import os
import pickle
import struct
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import scipy.sparse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cntkio import FormatError, MaxErrorsExceeded, MinibatchSource, StreamDef, StreamDefs, _native
from cntkio._src.common.errors import ConfigError
from cntkio._src.formats import records as records_module
from cntkio._src.formats.records import RecordDeserializer

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
X3 = StreamDefs(x=StreamDef(shape=3))
NUMBER = StreamDefs(n=StreamDef(shape=1))


def load_example(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"cntkio_example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def write(path: Path, data: bytes) -> str:
    path.write_bytes(data)
    return str(path)


def texts_of(path: str | list[str], **options: Any) -> list[str]:
    """The records a file is framed into, in order (through a key function that returns each record's text)."""
    reader = RecordDeserializer(path, decode_length, NUMBER, key=lambda r: r.decode("latin-1"), **options)
    index = reader.sequence_index()
    return list(index.keys.take(np.arange(index.num_sequences)))


def decode_length(record: bytes) -> dict[str, Any]:
    return {"n": len(record)}


def decode_numbers(record: bytes) -> dict[str, Any]:
    return {"x": np.array(record.split(), dtype=np.float64)}


def model_lines(data: bytes, header_lines: int = 0, skip_blank: bool = True) -> list[bytes]:
    """What framing='lines' must give, written the obvious way."""
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    lines = [line[:-1] if line.endswith(b"\r") else line for line in lines[header_lines:]]
    if skip_blank:
        lines = [line for line in lines if line.strip(b" \t\r\v\f")]
    return lines


def length_prefixed(records: list[bytes]) -> bytes:
    return b"".join(struct.pack("<Q", len(r)) + r for r in records)


_CRC_TABLE = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ (0x82F63B78 if _c & 1 else 0)
    _CRC_TABLE.append(_c)


def crc32c(data: bytes) -> int:
    """CRC-32C written independently of the native one (bit by bit tables, byte at a time)."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked(crc: int) -> int:
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def tfrecords(records: list[bytes]) -> bytes:
    out = []
    for record in records:
        length = struct.pack("<Q", len(record))
        out += [length, struct.pack("<I", masked(crc32c(length))), record, struct.pack("<I", masked(crc32c(record)))]
    return b"".join(out)


def read_sweeps(reader: RecordDeserializer, sweeps: int, minibatch: int = 7, **options: Any) -> list[list[int]]:
    """The keys of every sweep a MinibatchSource reads."""
    source = MinibatchSource(reader, max_sweeps=sweeps, **options)
    keys: list[int] = []
    while mb := source.next_minibatch(minibatch):
        keys += [key for _, key in mb.sequence_keys]
    source.close()
    n = reader.num_records
    assert len(keys) == sweeps * n
    return [keys[k * n : (k + 1) * n] for k in range(sweeps)]


# ------------------------------------------------------------------------------------- framing: lines
def test_lines_with_crlf_blank_lines_and_no_final_newline(tmp_path):
    path = write(tmp_path / "a.txt", b"1 2 3\r\n\r\n4 5 6\n \t \n\n7 8 9")
    reader = RecordDeserializer(path, decode_numbers, X3)
    assert reader.num_records == 3
    chunk = reader.get_chunk(0)["x"]
    assert chunk.values.tolist() == [[1, 2, 3], [4, 5, 6], [7, 8, 9]]
    assert chunk.values.dtype == np.float32 and not chunk.values.flags.writeable
    assert chunk.seq_offsets.tolist() == [0, 1, 2, 3]
    assert texts_of(path) == ["1 2 3", "4 5 6", "7 8 9"]


def test_blank_lines_are_records_when_asked(tmp_path):
    path = write(tmp_path / "a.txt", b"a\r\n\r\n\n  \nb\n")
    assert texts_of(path, skip_blank_lines=False) == ["a", "", "", "  ", "b"]
    assert texts_of(path) == ["a", "b"]


def test_header_lines_are_skipped_in_every_file(tmp_path):
    first = write(tmp_path / "a.csv", b"x,y\n1,2\n3,4\n")
    second = write(tmp_path / "b.csv", b"x,y\r\n5,6")
    assert texts_of([first, second], header_lines=1) == ["1,2", "3,4", "5,6"]
    only_header = write(tmp_path / "c.csv", b"x,y")
    assert texts_of([first, only_header], header_lines=1) == ["1,2", "3,4"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    data=st.lists(st.sampled_from([b"\n", b"\r", b" ", b"\t", b"a", b"bc", b"\r\n"]), max_size=40).map(b"".join),
    block=st.integers(1, 9),
    header=st.integers(0, 3),
    skip_blank=st.booleans(),
)
def test_lines_framed_in_blocks_match_a_plain_split(tmp_path, monkeypatch, data, block, header, skip_blank):
    monkeypatch.setattr(records_module, "LINE_BLOCK_BYTES", block)
    path = write(tmp_path / "a.txt", data)
    expected = model_lines(data, header, skip_blank)
    if not expected:
        with pytest.raises(FormatError, match="no records"):
            texts_of(path, header_lines=header, skip_blank_lines=skip_blank)
        return
    assert texts_of(path, header_lines=header, skip_blank_lines=skip_blank) == [e.decode() for e in expected]


def test_error_lines_count_header_and_blank_lines(tmp_path):
    path = write(tmp_path / "a.txt", b"header\n1 2 3\n\n\n4 5\n6 7 8\n")
    with pytest.raises(FormatError) as info:
        RecordDeserializer(path, decode_numbers, X3, header_lines=1).get_chunk(0)
    error = info.value
    assert (error.file, error.line, error.offset, error.sequence_key, error.input) == (path, 5, 15, 1, "x")
    assert "record 1 of the file" in str(error) and "shape (2,)" in str(error)


# ------------------------------------------------------------------------ framing: length-prefixed, TFRecord
@pytest.mark.parametrize("framing", ["length_prefixed", "tfrecord"])
def test_binary_records_round_trip(tmp_path, framing):
    rng = np.random.default_rng(0)
    records = [bytes(rng.integers(0, 256, int(n), dtype=np.uint8)) for n in rng.integers(0, 50, 200)]
    records[3] = b""
    records[7] = bytes(3 * 2**20)  # longer than the walk's block: only its header is read when indexing
    data = length_prefixed(records) if framing == "length_prefixed" else tfrecords(records)
    path = write(tmp_path / "r.bin", data)
    reader = RecordDeserializer(path, decode_length, NUMBER, framing=framing, chunk_size_in_bytes=500)
    assert reader.num_records == len(records) and reader.num_chunks() > 5
    lengths = np.concatenate([reader.get_chunk(c)["n"].values[:, 0] for c in range(reader.num_chunks())])
    assert lengths.tolist() == [len(r) for r in records]
    assert texts_of(path, framing=framing) == [r.decode("latin-1") for r in records]


def test_truncated_length_prefixed_file_names_the_record_and_its_offset(tmp_path):
    records = [b"abc", b"", b"defgh"]
    data = length_prefixed(records)
    offsets = [0, 11, 19]
    for cut in range(1, len(data)):
        path = write(tmp_path / "r.bin", data[:cut])
        if cut in (11, 19):  # a whole number of records
            assert RecordDeserializer(path, decode_length, NUMBER, framing="length_prefixed").num_records == (
                offsets.index(cut)
            )
            continue
        with pytest.raises(FormatError, match="truncated record") as info:
            RecordDeserializer(path, decode_length, NUMBER, framing="length_prefixed")
        broken = max(o for o in offsets if o < cut)
        assert info.value.offset == broken and info.value.file == path
        assert f"record {offsets.index(broken)} of the file" in str(info.value)


def test_native_walk_with_a_tiny_block(tmp_path):
    records = [bytes([k]) * (k * 37 % 300) for k in range(100)]
    path = write(tmp_path / "r.bin", length_prefixed(records))
    fd = os.open(path, os.O_RDONLY)
    try:
        starts, error, offset = _native.records_walk(fd, 0, os.fstat(fd).st_size, 0, block=64)
    finally:
        os.close(fd)
    assert error == "" and offset == -1
    assert starts.tolist() == np.cumsum([0] + [8 + len(r) for r in records[:-1]]).tolist()
    with pytest.raises(ValueError):
        _native.records_walk(0, 0, 10, 2)


def test_crc32c_matches_an_independent_implementation():
    assert _native.crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
    rng = np.random.default_rng(1)
    for size in [0, 1, 7, 8, 9, 63, 64, 65, 1000]:
        data = bytes(rng.integers(0, 256, size, dtype=np.uint8))
        assert _native.crc32c(data) == _native.crc32c(data, portable=True) == crc32c(data)
        assert _native.crc32c(data[size // 2 :], _native.crc32c(data[: size // 2])) == crc32c(data)


def test_tfrecord_header_of_a_tensorboard_event_file(tmp_path):
    # TensorBoard event files (written by TensorFlow) begin with this record header: length 24 and its masked CRC
    header = b"\x18\x00\x00\x00\x00\x00\x00\x00\xa3\x7fK\x22"
    assert tfrecords([bytes(24)])[:12] == header
    assert struct.pack("<I", masked(_native.crc32c(header[:8]))) == header[8:]


def test_tfrecord_damage(tmp_path, caplog):
    records = [b"one", b"two", b"three"]
    data = bytearray(tfrecords(records))
    bad_length = bytearray(data)
    bad_length[19 + 8] ^= 1  # the length CRC of record 1
    path = write(tmp_path / "a.tfrecord", bytes(bad_length))
    with pytest.raises(FormatError, match="CRC of its length") as info:
        RecordDeserializer(path, decode_length, NUMBER, framing="tfrecord")
    assert info.value.offset == 19
    data[19 + 12] ^= 1  # the data of record 1: its data CRC no longer matches
    path = write(tmp_path / "b.tfrecord", bytes(data))
    with pytest.raises(MaxErrorsExceeded, match="data CRC") as info:
        RecordDeserializer(path, decode_length, NUMBER, framing="tfrecord").get_chunk(0)
    assert (info.value.offset, info.value.sequence_key) == (19, 1)
    with caplog.at_level(logging.WARNING, logger="cntkio"):
        reader = RecordDeserializer(path, decode_length, NUMBER, framing="tfrecord", max_errors=1)
        chunk = reader.get_chunk(0)
    assert chunk["n"].seq_offsets.tolist() == [0, 1, 1, 2] and chunk.invalid.tolist() == [0, 1, 0]
    assert reader.errors.count == 1 and "data CRC" in caplog.text
    unchecked = RecordDeserializer(path, decode_length, NUMBER, framing="tfrecord", check_crc=False)
    assert unchecked.get_chunk(0)["n"].values[:, 0].tolist() == [3, 3, 5]


# --------------------------------------------------------------------------------- chunks, sweeps, resume
def numbered_file(tmp_path: Path, count: int, name: str = "n.txt", first: int = 0) -> str:
    return write(tmp_path / name, b"".join(b"%d %d %d\n" % (k, k, k) for k in range(first, first + count)))


@pytest.mark.parametrize("randomize", [False, True])
def test_every_record_once_per_sweep(tmp_path, randomize):
    path = numbered_file(tmp_path, 250)
    reader = RecordDeserializer(path, decode_numbers, X3, chunk_size_in_bytes=64)
    assert reader.num_chunks() > 20
    sizes = [reader.chunk_index(c).num_sequences for c in range(reader.num_chunks())]
    assert sum(sizes) == 250 and max(sizes) <= 64 // 6 + 1
    options = {"randomization_window_in_chunks": 4, "randomization_seed": 3} if randomize else {"randomize": False}
    sweeps = read_sweeps(reader, 3, **options)
    assert len(sweeps) == 3 and all(sorted(s) == list(range(250)) for s in sweeps)
    assert (sweeps[0] != list(range(250))) == randomize and (sweeps[0] != sweeps[1]) == randomize


def test_values_follow_their_keys(tmp_path):
    reader = RecordDeserializer(numbered_file(tmp_path, 100), decode_numbers, X3, chunk_size_in_bytes=50)
    source = MinibatchSource(reader, max_sweeps=1, randomization_window_in_chunks=3)
    while mb := source.next_minibatch(9):
        assert mb["x"].values[:, 0].tolist() == [key for _, key in mb.sequence_keys]


@pytest.mark.parametrize("options", [{"randomize": False}, {"randomization_window_in_chunks": 3}, {"frame_mode": True}])
def test_checkpoint_restore_is_exact(tmp_path, options):
    reader = RecordDeserializer(numbered_file(tmp_path, 120), decode_numbers, X3, chunk_size_in_bytes=60)

    def batches(source: MinibatchSource, count: int) -> list[list[float]]:
        return [source.next_minibatch(11)["x"].values[:, 0].tolist() for _ in range(count)]

    source = MinibatchSource(reader, **options)
    batches(source, 5)
    state = source.get_checkpoint_state()
    expected = batches(source, 30)
    restored = MinibatchSource(pickle.loads(pickle.dumps(reader)), **options)
    restored.restore_from_checkpoint(state)
    assert batches(restored, 30) == expected


def test_several_files_are_one_corpus(tmp_path):
    files = [numbered_file(tmp_path, 30, "a.txt"), numbered_file(tmp_path, 0, "empty.txt"),
             numbered_file(tmp_path, 45, "b.txt", first=30)]  # fmt: skip
    reader = RecordDeserializer(files, decode_numbers, X3, chunk_size_in_bytes=100)
    assert reader.num_records == 75 and reader.record_location(30) == (files[2], 0)
    for chunk_id in range(reader.num_chunks()):  # a chunk never spans files
        keys = list(reader.chunk_index(chunk_id).keys)
        assert keys[-1] < 30 or keys[0] >= 30
        assert reader.get_chunk(chunk_id)["x"].values[:, 0].tolist() == keys
    assert read_sweeps(reader, 1, randomize=False) == [list(range(75))]
    assert reader.source_name == f"{files[0]} (+2 more files)"


def test_error_in_a_later_file_names_that_file(tmp_path):
    first = numbered_file(tmp_path, 5, "a.txt")
    second = write(tmp_path / "b.txt", b"1 2 3\n4 5 x\n")
    reader = RecordDeserializer([first, second], decode_numbers, X3)
    with pytest.raises(FormatError) as info:
        reader.get_chunk(reader.num_chunks() - 1)
    error = info.value
    assert (error.file, error.line, error.offset, error.sequence_key) == (second, 2, 6, 6)
    assert "record 1 of the file (record 6 of the corpus)" in str(error) and "ValueError" in str(error)


def test_no_records_and_bad_options(tmp_path):
    empty = write(tmp_path / "e.txt", b"\n \n")
    with pytest.raises(FormatError, match="no records"):
        RecordDeserializer(empty, decode_numbers, X3)
    path = numbered_file(tmp_path, 3)
    for kwargs, match in [
        ({"framing": "csv"}, "framing"),
        ({"chunk_size_in_bytes": 0}, "chunk_size"),
        ({"header_lines": 1, "framing": "tfrecord"}, "header_lines"),
        ({"precision": "half"}, "precision"),
        ({"max_errors": -1}, "max_errors"),
    ]:
        with pytest.raises(ConfigError, match=match):
            RecordDeserializer(path, decode_numbers, X3, **kwargs)
    with pytest.raises(ConfigError, match="decoder"):
        RecordDeserializer(path, None, X3)
    with pytest.raises(ConfigError, match="shape"):
        RecordDeserializer(path, decode_numbers, StreamDefs(x=StreamDef()))
    with pytest.raises(ConfigError, match="sparse"):
        RecordDeserializer(path, decode_numbers, StreamDefs(x=StreamDef(shape=(2, 3), is_sparse=True)))


def test_a_file_changed_in_place_is_refused(tmp_path):
    path = numbered_file(tmp_path, 10)
    reader = RecordDeserializer(path, decode_numbers, X3)
    with open(path, "ab") as f:
        f.write(b"10 10 10\n")
    with pytest.raises(FormatError, match="changed since it was indexed"):
        reader.get_chunk(0)
    with pytest.raises(FormatError, match="changed since"):
        pickle.loads(pickle.dumps(reader))


# ----------------------------------------------------------------------------------- decoder validation
XY = StreamDefs(x=StreamDef(shape=2), y=StreamDef(shape=4, is_sparse=True))


def good(record: bytes) -> dict[str, Any]:
    k = int(record)
    return {"x": [k, -k], "y": scipy.sparse.csr_matrix(([1.0], ([0], [k % 4])), shape=(1, 4))}


BAD_OUTPUTS = {
    "missing stream": (lambda r: {"x": [1, 2]}, "no stream 'y'", "y"),
    "wrong shape": (lambda r: {**good(r), "x": [1, 2, 3]}, "shape (3,)", "x"),
    "wrong dtype": (lambda r: {**good(r), "x": np.array(["a", "b"])}, "not real numbers", "x"),
    "objects": (lambda r: {**good(r), "x": [[1], [2, 3]]}, "not an array", "x"),
    "sparse dim": (lambda r: {**good(r), "y": scipy.sparse.csr_matrix((1, 5))}, "shape (1, 5)", "y"),
    "sparse index": (
        lambda r: {**good(r), "y": scipy.sparse.csr_matrix(([1.0], [7], [0, 1]), shape=(1, 4))},
        "sparse index 7",
        "y",
    ),
    "two samples": (lambda r: {**good(r), "x": np.zeros((2, 2))}, "2 samples", "x"),
    "no sample": (lambda r: {**good(r), "x": np.zeros((0, 2))}, "no sample", "x"),
    "not a dict": (lambda r: [1, 2], "expected a dict", None),
    "raises": (lambda r: {"x": [int(r) // 0, 0]}, "ZeroDivisionError", None),
}


@pytest.mark.parametrize("case", BAD_OUTPUTS)
def test_bad_decoder_output_names_file_record_offset_and_stream(tmp_path, case):
    decode, reason, stream = BAD_OUTPUTS[case]
    path = write(tmp_path / "a.txt", b"0\n1\n2\n3\n")

    def decode_third(record: bytes) -> dict[str, Any]:
        return decode(record) if record == b"2" else good(record)

    with pytest.raises(MaxErrorsExceeded) as info:
        RecordDeserializer(path, decode_third, XY).get_chunk(0)
    error = info.value
    assert (error.file, error.line, error.offset, error.sequence_key, error.input) == (path, 3, 4, 2, stream)
    assert reason in str(error) and "record 2 of the file" in str(error)


def test_good_records_decode_exactly(tmp_path):
    path = write(tmp_path / "a.txt", b"0\n1\n2\n3\n5\n")
    chunk = RecordDeserializer(path, good, XY).get_chunk(0)
    assert chunk["x"].values.tolist() == [[0, 0], [1, -1], [2, -2], [3, -3], [5, -5]]
    y = chunk["y"]
    assert y.indices.dtype == np.int32 and y.csr().toarray().argmax(axis=1).tolist() == [0, 1, 2, 3, 1]
    assert chunk.invalid is None


def test_bad_records_are_skipped_counted_once_and_logged(tmp_path, caplog):
    lines = [b"%d 0 0" % k if k % 5 else b"%d oops" % k for k in range(40)]
    path = write(tmp_path / "a.txt", b"\n".join(lines))
    with caplog.at_level(logging.WARNING, logger="cntkio"):
        reader = RecordDeserializer(path, decode_numbers, X3, max_errors=8, chunk_size_in_bytes=40)
        sweeps = read_sweeps(reader, 3, randomize=False)
    assert reader.errors.count == 8
    assert sorted(e.sequence_key for e in reader.errors.errors) == list(range(0, 40, 5))
    assert len([r for r in caplog.records if "skipped bad record" in r.getMessage()]) == 8
    assert sweeps == [list(range(40))] * 3  # the bad records' sequences are there, without samples
    with pytest.raises(MaxErrorsExceeded) as info:
        read_sweeps(RecordDeserializer(path, decode_numbers, X3, max_errors=7), 1, randomize=False)
    assert info.value.sequence_key == 35 and info.value.max_errors == 7
    frames = MinibatchSource(RecordDeserializer(path, decode_numbers, X3, max_errors=8), frame_mode=True, max_sweeps=1)
    assert frames.next_minibatch(100)["x"].num_samples == 32  # frame mode drops them


def test_decode_chunk_stacked_and_lists(tmp_path):
    path = write(tmp_path / "a.txt", b"".join(b"%d\n" % k for k in range(10)))

    def stacked(records: list[bytes]) -> dict[str, Any]:
        k = np.array(records, dtype=np.float64)
        return {"x": np.stack([k, -k], axis=1), "y": scipy.sparse.csr_matrix(np.eye(4)[k.astype(int) % 4])}

    def lists(records: list[bytes]) -> dict[str, Any]:
        return {name: [good(r)[name] for r in records] for name in ("x", "y")}

    calls = []
    for decode_chunk in (stacked, lists):
        reader = RecordDeserializer(path, None, XY, decode_chunk=lambda r, d=decode_chunk: calls.append(len(r)) or d(r))
        chunk = reader.get_chunk(0)
        assert chunk["x"].values[:, 1].tolist() == [-k for k in range(10)]
        assert chunk["y"].csr().toarray().argmax(axis=1).tolist() == [k % 4 for k in range(10)]
    assert calls == [10, 10]  # one call per chunk


def test_the_decoders_arrays_are_copied_not_frozen(tmp_path):
    """The chunk's arrays are read-only; the arrays a decoder returns (which it may keep and reuse) are copied into
    them, in every form the converter takes (stacked, one per record, flat by the records' lengths)."""
    path = write(tmp_path / "a.txt", b"".join(b"%d\n" % k for k in range(4)))
    kept: dict[str, Any] = {}

    def stacked(records: list[bytes]) -> dict[str, Any]:
        k = np.array(records, dtype=np.float32)
        kept["x"] = np.stack([k, -k], axis=1)
        kept["y"] = scipy.sparse.csr_matrix(np.eye(4, dtype=np.float32)[k.astype(int) % 4])
        return dict(kept)

    chunk = RecordDeserializer(path, None, XY, decode_chunk=stacked).get_chunk(0)
    assert not chunk["x"].values.flags.writeable and not chunk["y"].values.flags.writeable
    assert kept["x"].flags.writeable and kept["y"].data.flags.writeable
    assert chunk["y"].csr().toarray().argmax(axis=1).tolist() == [0, 1, 2, 3]


def test_decode_chunk_failure_is_narrowed_to_the_bad_record(tmp_path):
    path = write(tmp_path / "a.txt", b"1,2\n3,4\n5\n7,8\n")
    calls = []

    def decode_chunk(records: list[bytes]) -> dict[str, Any]:
        calls.append(len(records))
        return {"x": np.array(b",".join(records).split(b","), dtype=np.float64).reshape(len(records), 2)}

    reader = RecordDeserializer(path, None, StreamDefs(x=StreamDef(shape=2)), decode_chunk=decode_chunk, max_errors=1)
    assert reader.get_chunk(0)["x"].values.tolist() == [[1, 2], [3, 4], [7, 8]]
    assert reader.errors.errors[0].line == 3 and "reshape" in reader.errors.errors[0].reason
    assert calls == [4, 1, 1, 1, 1]
    reader.get_chunk(0)
    assert calls[5:] == [3]  # a known bad record is left out of later reads


def test_decode_chunk_failing_only_on_a_whole_chunk_is_an_error(tmp_path):
    path = numbered_file(tmp_path, 6)

    def decode_chunk(records: list[bytes]) -> dict[str, Any]:
        return {"x": np.zeros((1, 3))}  # one row whatever the number of records

    with pytest.raises(
        FormatError, match=r"records 0\.\.5 of the file .* none fails alone: 1 samples stacked for 6 records"
    ):
        RecordDeserializer(path, None, X3, decode_chunk=decode_chunk, max_errors=100).get_chunk(0)


def test_sequence_count_mismatch_across_streams(tmp_path):
    path = numbered_file(tmp_path, 4)

    def decode_chunk(records: list[bytes]) -> dict[str, Any]:  # one x too few
        return {"x": [np.zeros(2)] * (len(records) - 1), "y": [scipy.sparse.csr_matrix((1, 4))] * len(records)}

    with pytest.raises(FormatError, match="0 arrays for 1 records") as info:
        RecordDeserializer(path, None, XY, decode_chunk=decode_chunk).get_chunk(0)
    assert (info.value.offset, info.value.input, info.value.sequence_key) == (0, "x", 0)


def test_sequences_of_several_samples(tmp_path):
    path = write(tmp_path / "a.txt", b"1 2 3\n4\n5 6\n")
    streams = StreamDefs(x=StreamDef(shape=1), first=StreamDef(shape=1))

    def decode(record: bytes) -> dict[str, Any]:
        values = np.array(record.split(), dtype=np.float64)
        return {"x": values, "first": values[:1]}

    reader = RecordDeserializer(path, decode, streams, sequence_length=lambda r: len(r.split()))
    assert reader.sequence_index().lengths.tolist() == [3, 1, 2]
    source = MinibatchSource(reader, randomize=False, max_sweeps=1)
    mb = source.next_minibatch(100)
    assert [s[:, 0].tolist() for s in mb["x"].as_sequences()] == [[1, 2, 3], [4], [5, 6]]
    assert mb["first"].sequence_lengths.tolist() == [1, 1, 1]
    wrong = RecordDeserializer(path, decode, streams, sequence_length=lambda r: 2)
    with pytest.raises(FormatError, match="3 samples, but the record's length is 2"):
        wrong.get_chunk(0)


def test_keys_from_the_records(tmp_path):
    path = write(tmp_path / "a.txt", b"id7 1 2 3\nid3 4 5 6\n")
    reader = RecordDeserializer(
        path, lambda r: decode_numbers(r.split(b" ", 1)[1]), X3, key=lambda r: r.split(b" ", 1)[0].decode()
    )
    mb = MinibatchSource(reader, randomize=False, max_sweeps=1).next_minibatch(10)
    assert mb.sequence_keys == [(path, "id7"), (path, "id3")]


# ------------------------------------------------------------------------------------------- examples
def svmlight_file(path: Path, rng: np.random.Generator, rows: int, dim: int) -> str:
    lines = []
    for _ in range(rows):
        count = int(rng.integers(0, 6))
        columns = np.sort(rng.choice(dim, size=count, replace=False)) + 1  # 1-based (scikit-learn wants them sorted)
        values = [repr(float(v)) for v in rng.normal(0, 10, count) * 10.0 ** rng.integers(-8, 8, count)]
        label = rng.integers(-1, 3)
        lines.append(f"{label} " + " ".join(f"{c}:{v}" for c, v in zip(columns, values)))
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_svmlight_example_matches_scikit_learn(tmp_path):
    sklearn_datasets = pytest.importorskip("sklearn.datasets")
    example = load_example("svmlight_reader")
    rng = np.random.default_rng(5)
    dim = 50
    path = svmlight_file(tmp_path / "data.svm", rng, 3000, dim)
    expected_x, expected_y = sklearn_datasets.load_svmlight_file(path, n_features=dim, zero_based=False)
    source = MinibatchSource(example.svmlight_reader(path, dim, chunk_size_in_bytes=20000), randomize=False)
    mb = source.next_minibatch(3000)
    assert mb["features"].num_sequences == 3000
    ours = mb["features"].csr.toarray()
    theirs = expected_x.astype(np.float32).toarray()
    assert ours.dtype == np.float32 and np.array_equal(ours.view(np.uint32), theirs.view(np.uint32))
    assert np.array_equal(mb["label"].values[:, 0], expected_y.astype(np.float32))


def test_svmlight_example_names_a_bad_line(tmp_path):
    example = load_example("svmlight_reader")
    path = write(tmp_path / "bad.svm", b"1 1:0.5\n0 2:1 9:2\n1 3:1\n")
    with pytest.raises(FormatError) as info:
        MinibatchSource(example.svmlight_reader(path, 4)).next_minibatch(10)
    assert (info.value.line, info.value.input) == (2, "features") and "sparse index 8" in str(info.value)


def test_csv_example_matches_numpy_loadtxt(tmp_path):
    example = load_example("csv_reader")
    rng = np.random.default_rng(9)
    dim = 6
    table = rng.normal(0, 1, (2000, dim + 1)) * 10.0 ** rng.integers(-6, 6, (2000, dim + 1))
    lines = ["label," + ",".join(f"x{i}" for i in range(dim))] + [",".join(map(repr, row.tolist())) for row in table]
    path = tmp_path / "data.csv"
    path.write_text("\r\n".join(lines))
    expected = np.loadtxt(path, delimiter=",", skiprows=1, dtype=np.float64).astype(np.float32)
    reader = example.csv_reader(str(path), dim, header_lines=1, chunk_size_in_bytes=10000)
    assert reader.num_chunks() > 5
    mb = MinibatchSource(reader, randomize=False).next_minibatch(2000)
    assert np.array_equal(mb["features"].values.view(np.uint32), expected[:, 1:].view(np.uint32))
    assert np.array_equal(mb["label"].values[:, 0].view(np.uint32), expected[:, 0].view(np.uint32))


def test_sparse_entries_are_sorted_and_duplicates_summed(tmp_path):
    path = write(tmp_path / "a.txt", b"x\n")
    unsorted = scipy.sparse.csr_matrix(([1.0, 2.0, 4.0], [3, 0, 3], [0, 3]), shape=(1, 4))
    reader = RecordDeserializer(path, lambda r: {"y": unsorted}, StreamDefs(y=StreamDef(shape=4, is_sparse=True)))
    y = reader.get_chunk(0)["y"]
    assert (y.indices.tolist(), y.values.tolist(), y.indptr.tolist()) == ([0, 3], [2.0, 5.0], [0, 2])
    assert unsorted.indices.tolist() == [3, 0, 3]  # the decoder's matrix is left alone


def test_dense_samples_of_several_dimensions(tmp_path):
    path = write(tmp_path / "a.txt", b"1\n2\n3\n")
    streams = StreamDefs(image=StreamDef(shape=(2, 3)), flag=StreamDef(shape=1))
    reader = RecordDeserializer(path, lambda r: {"image": np.full((2, 3), int(r)), "flag": int(r) > 1}, streams)
    mb = MinibatchSource(reader, randomize=False, max_sweeps=1).next_minibatch(10)
    assert mb["image"].values.shape == (3, 2, 3) and mb["image"].values[:, 1, 2].tolist() == [1, 2, 3]
    assert mb["flag"].values[:, 0].tolist() == [0, 1, 1]


def test_joins_a_ctf_file_by_record_number(tmp_path):
    from cntkio import CTFDeserializer

    ctf = write(tmp_path / "f.ctf", b"".join(b"%d |x %d %d %d\n" % (k, k, k, k) for k in range(20)))
    labels = write(tmp_path / "labels.txt", b"".join(b"%d\n" % (k * 10) for k in range(20)))
    features = CTFDeserializer(ctf, StreamDefs(x=StreamDef(field="x", shape=3)), chunk_size_in_bytes=50)
    label = RecordDeserializer(labels, lambda r: {"y": float(r)}, StreamDefs(y=StreamDef(shape=1)))
    source = MinibatchSource([features, label], randomization_window_in_chunks=2, max_sweeps=1)
    mb = source.next_minibatch(20)
    assert mb["y"].values[:, 0].tolist() == (mb["x"].values[:, 0] * 10).tolist()
    assert sorted(mb["x"].values[:, 0].tolist()) == list(range(20))
