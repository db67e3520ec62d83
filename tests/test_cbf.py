"""CBF: reading (CNTK-written files, every malformation a FormatError), writing (byte-identical to CNTK's
files, CTF -> CBF -> read bit-identical), conversion on the command line, and CBF through MinibatchSource."""

from __future__ import annotations

import pickle
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cntkio import (
    CBFDeserializer,
    ConfigError,
    CTFDeserializer,
    Deserializer,
    FormatError,
    MinibatchSource,
    StreamDef,
    StreamDefs,
    write_cbf,
)
from cntkio._src.cli.main import main as cli
from conformance.corpus import corpus_dir, corpus_present
from order_helpers import STREAMS, assert_exactly_once, make_data, read, snapshot

CNTK_FILES = [
    "10x10_dense",
    "10x10_sparse",
    "50x20_jagged_sequences_dense",
    "50x20_jagged_sequences_sparse",
    "Simple_dense",
]


def cntk_file(name: str) -> Path:
    path = corpus_dir() / "Data" / "CNTKBinaryReader" / f"{name}.bin"
    if not corpus_present() or not path.is_file():
        pytest.skip("CNTK conformance corpus not found")
    return path


def all_sequences(reader: Deserializer) -> dict[str, list[Any]]:
    """Every sequence of every stream, in order: dense (samples, dim) arrays or (indptr, indices, values)."""
    out: dict[str, list[Any]] = {info.name: [] for info in reader.stream_infos()}
    for chunk_id in range(reader.num_chunks()):
        chunk = reader.get_chunk(chunk_id)
        for name, data in chunk.items():
            offsets = data.seq_offsets
            for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist()):
                if hasattr(data, "indptr"):
                    e0, e1 = int(data.indptr[a]), int(data.indptr[b])
                    out[name].append(
                        (
                            (data.indptr[a : b + 1] - e0).tolist(),
                            data.indices[e0:e1].tolist(),
                            data.values[e0:e1].tobytes(),
                        )
                    )
                else:
                    out[name].append(data.values[a:b].tobytes())
    return out


# ------------------------------------------------------------------------------------------- CNTK's files
@pytest.mark.parametrize("name", CNTK_FILES)
def test_cntk_written_files_are_rewritten_byte_for_byte(name: str, tmp_path: Path) -> None:
    original = cntk_file(name)
    reader = CBFDeserializer(original)
    rewritten = write_cbf(reader, tmp_path / "copy.cbf", chunk_size_in_bytes=None)
    assert rewritten.read_bytes() == original.read_bytes()


def test_the_spec_example_file(tmp_path: Path) -> None:
    """binary-format.md §6: one dense stream x (dim 2), one sequence [1.0, 2.0]; 79 bytes."""
    path = tmp_path / "x.ctf"
    path.write_text("0 |x 1 2\n")
    written = write_cbf(CTFDeserializer(path, StreamDefs(x=StreamDef(field="x", shape=2))), tmp_path / "x.cbf")
    expected = bytes.fromhex(
        "6E69625F6B746E63 01000000 01000000 01000000 0000803F00000040 6E69625F6B746E63 01000000 01000000"
        " 00 01000000 78 00 02000000 0C00000000000000 01000000 01000000 1C00000000000000".replace(" ", "")
    )
    assert written.read_bytes() == expected
    minibatch = MinibatchSource(CBFDeserializer(written), max_sweeps=1).next_minibatch(10)
    assert minibatch["x"].values.tolist() == [[1.0, 2.0]]


# ------------------------------------------------------------------------------------------ round trips
@st.composite
def ctf_files(draw: Any) -> tuple[str, int]:
    sequences = draw(st.integers(1, 25))
    lines = []
    for key in range(sequences):
        for step in range(draw(st.integers(1, 5))):
            dense = " ".join(repr(draw(st.floats(-1e6, 1e6, width=32))) for _ in range(3))
            entries = sorted(draw(st.sets(st.integers(0, 49), max_size=4)))
            sparse = " ".join(f"{i}:{draw(st.floats(-100, 100, width=32))!r}" for i in entries)
            line = f"{key} |d {dense}" if step == 0 or draw(st.booleans()) else f"{key}"
            lines.append(f"{line} |s {sparse}" if entries or step == 0 else line)
    return "\n".join(lines) + "\n", draw(st.integers(20, 2000))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=ctf_files(), precision=st.sampled_from(["float", "double"]))
def test_property_ctf_to_cbf_reads_back_bit_identical(tmp_path: Path, case: tuple[str, int], precision: str) -> None:
    text, chunk_size = case
    path = tmp_path / "p.ctf"
    path.write_text(text)
    streams = StreamDefs(d=StreamDef(field="d", shape=3), s=StreamDef(field="s", shape=50, is_sparse=True))
    source = CTFDeserializer(path, streams, precision=precision, optional_inputs=True)
    written = write_cbf(source, tmp_path / "p.cbf", chunk_size_in_bytes=chunk_size)
    reader = CBFDeserializer(written, precision=precision)
    assert all_sequences(reader) == all_sequences(source)
    assert reader.sequence_index().lengths.tolist() == source.sequence_index().lengths.tolist()


@pytest.mark.parametrize(
    "options",
    [
        {"randomize": False},
        {"randomization_window_in_chunks": 3, "randomization_seed": 5},
        {"randomization_window_in_chunks": 2, "compat": True},
        {"frame_mode": True, "randomization_window_in_chunks": 2},
        {"truncation_length": 3, "randomization_window_in_chunks": 2},
    ],
)
@pytest.mark.parametrize("minibatch_size", [1, 7, 64])
def test_a_ctf_file_and_its_cbf_give_the_same_minibatches(
    tmp_path: Path, options: dict[str, Any], minibatch_size: int
) -> None:
    """As CNTK's io test: same data, same chunks (chunk_size_in_bytes=None keeps the source's), same seed."""
    data = make_data(tmp_path, 80, max_length=5, seed=3)
    ctf = CTFDeserializer(data.path, STREAMS, chunk_size_in_bytes=300)
    cbf = CBFDeserializer(write_cbf(ctf, tmp_path / "d.cbf", chunk_size_in_bytes=None))
    assert cbf.num_chunks() == ctf.num_chunks()

    def values(source: MinibatchSource) -> list[Any]:
        return [snapshot(m)[1:] for m in read(source, minibatch_size)]  # everything but the keys' file names

    expected = values(MinibatchSource(ctf, max_sweeps=2, **options))
    assert values(MinibatchSource(cbf, max_sweeps=2, **options)) == expected


def test_cbf_partitions_checkpoints_and_composites(tmp_path: Path) -> None:
    data = make_data(tmp_path, 60, max_length=4, seed=8)
    cbf = CBFDeserializer(write_cbf(CTFDeserializer(data.path, STREAMS), tmp_path / "d.cbf", chunk_size_in_bytes=200))
    options = {"randomization_window_in_chunks": 2, "randomization_seed": 2, "max_sweeps": 1}
    parts = [read(MinibatchSource(cbf, **options), 5, num_data_partitions=3, partition_index=i) for i in range(3)]
    keys = [k for minibatches in parts for m in minibatches for _, k in m.sequence_keys]
    assert_exactly_once(keys, range(60))
    source = MinibatchSource(cbf, **options)
    first = read(source, 6, limit=3)
    restored = MinibatchSource(cbf, **options)
    restored.restore_from_checkpoint(source.get_checkpoint_state())
    reference = read(MinibatchSource(cbf, **options), 6)
    assert [snapshot(m) for m in first + read(restored, 6)] == [snapshot(m) for m in reference]
    labels = tmp_path / "labels.ctf"
    labels.write_text("".join(f"{k} |z {k}\n" for k in reversed(range(0, 60, 2))))
    z = CTFDeserializer(labels, StreamDefs(z=StreamDef(field="z", shape=1)))
    joined = MinibatchSource([cbf, z], max_sweeps=1, randomize=False)
    minibatch = joined.next_minibatch(1000)
    assert [k for _, k in minibatch.sequence_keys] == list(range(0, 60, 2))
    assert minibatch["z"].values[:, 0].tolist() == list(range(0, 60, 2))
    assert minibatch["x"].values[minibatch["x"].sequence_offsets[:-1], 0].tolist() == list(range(0, 60, 2))


# --------------------------------------------------------------------------------------------- streams
def test_streams_are_renamed_checked_and_typed(tmp_path: Path) -> None:
    path = cntk_file("Simple_dense")
    everything = CBFDeserializer(path)
    assert [(i.name, i.shape, i.dtype) for i in everything.stream_infos()] == [
        ("features", (2,), np.float32),
        ("labels", (2,), np.float32),
    ]
    renamed = CBFDeserializer(path, StreamDefs(x=StreamDef(field="features")))
    assert [i.name for i in renamed.stream_infos()] == ["x", "labels"]  # unlisted streams stay, as in CNTK
    with pytest.raises(ConfigError, match="no stream 'nope'"):
        CBFDeserializer(path, StreamDefs(x=StreamDef(field="nope")))
    with pytest.raises(ConfigError, match="dimension 2, not 3"):
        CBFDeserializer(path, StreamDefs(x=StreamDef(field="features", shape=3)))
    with pytest.raises(ConfigError, match="precision"):
        CBFDeserializer(path, precision="double")
    copy = pickle.loads(pickle.dumps(everything))
    assert all_sequences(copy) == all_sequences(everything)


# ---------------------------------------------------------------------------------------- bad files
def small_cbf(tmp_path: Path) -> Path:
    path = tmp_path / "small.ctf"
    path.write_text("0 |d 1 2 |s 3:1\n0 |d 3 4 |s 0:2 4:3\n1 |d 5 6 |s 2:1\n2 |d 7 8 |s 1:1\n")
    streams = StreamDefs(d=StreamDef(field="d", shape=2), s=StreamDef(field="s", shape=5, is_sparse=True))
    return write_cbf(CTFDeserializer(path, streams), tmp_path / "small.cbf", chunk_size_in_bytes=40)


def read_everything(path: Path) -> None:
    reader = CBFDeserializer(path)
    for chunk_id in range(reader.num_chunks()):
        reader.get_chunk(chunk_id)


def test_every_truncation_is_a_format_error(tmp_path: Path) -> None:
    data = small_cbf(tmp_path).read_bytes()
    broken = tmp_path / "broken.cbf"
    for size in range(1, len(data)):
        broken.write_bytes(data[:size])
        with pytest.raises(FormatError) as raised:
            read_everything(broken)
        assert "broken.cbf" in str(raised.value) and "byte offset" in str(raised.value)


def test_every_single_byte_corruption_is_an_error_or_data(tmp_path: Path) -> None:
    """No corruption crashes or hangs: the result is a FormatError or a file that reads (values changed)."""
    data = bytearray(small_cbf(tmp_path).read_bytes())
    broken = tmp_path / "broken.cbf"
    outcomes = {"error": 0, "read": 0}
    for at in range(len(data)):
        for value in (0x00, 0xFF, data[at] ^ 0x01):
            corrupted = bytearray(data)
            corrupted[at] = value
            broken.write_bytes(bytes(corrupted))
            try:
                read_everything(broken)
                outcomes["read"] += 1
            except FormatError:
                outcomes["error"] += 1
    assert outcomes["error"] > 0 and outcomes["read"] > 0


def patched(tmp_path: Path, offset: int, fmt: str, value: Any) -> Path:
    data = bytearray(small_cbf(tmp_path).read_bytes())
    struct.pack_into(fmt, data, offset if offset >= 0 else len(data) + offset, value)
    path = tmp_path / "patched.cbf"
    path.write_bytes(bytes(data))
    return path


def header_offset(tmp_path: Path) -> int:
    return int(struct.unpack_from("<q", small_cbf(tmp_path).read_bytes(), -8)[0])


@pytest.mark.parametrize(
    ("where", "fmt", "value", "message"),
    [
        (0, "<Q", 0, "wrong magic number"),
        (8, "<I", 2, "version 2"),
        (-8, "<q", 10**12, "header offset .* outside the file"),
        ("header+8", "<I", 7, "chunk table of 7 chunks"),
        ("header+12", "<I", 7, "more streams than the header can hold"),
        ("table", "<q", 10**9, "chunk 0 starts at 1000000000, outside"),
        ("table+12", "<I", 99, "add up to"),
        ("stream0", "<B", 7, "unknown matrix encoding 7"),
    ],
)
def test_malformations_name_what_is_wrong_and_where(
    tmp_path: Path, where: Any, fmt: str, value: int, message: str
) -> None:
    header = header_offset(tmp_path)
    table = header + 16 + (1 + 4 + 1 + 1 + 4) * 2  # two streams named "d" and "s"
    offsets = {
        "header+8": header + 8,
        "header+12": header + 12,
        "table": table,
        "table+12": table + 12,
        "stream0": header + 16,
    }
    path = patched(tmp_path, offsets.get(where, where), fmt, value)
    with pytest.raises(FormatError, match=message) as raised:
        read_everything(path)
    assert raised.value.file == str(path)


def test_sparse_index_out_of_range_names_chunk_sequence_and_offset(tmp_path: Path) -> None:
    data = bytearray(small_cbf(tmp_path).read_bytes())
    index_at = data.index(struct.pack("<i", 3), 12 + 4 * 2 + 4 + 16 + 4 + 4 + 4)  # first sparse index (3)
    struct.pack_into("<i", data, index_at, 9)
    path = tmp_path / "index.cbf"
    path.write_bytes(bytes(data))
    with pytest.raises(FormatError, match=r"sparse index 9 of stream 's' is outside \[0, 5\).*chunk 0") as raised:
        read_everything(path)
    assert raised.value.offset == index_at and raised.value.input == "s"


def test_a_file_changed_after_opening_is_refused(tmp_path: Path) -> None:
    path = small_cbf(tmp_path)
    reader = CBFDeserializer(path)
    path.write_bytes(path.read_bytes() + b"\0")
    with pytest.raises(FormatError, match="changed since it was indexed"):
        reader.get_chunk(0)


# ----------------------------------------------------------------------------------------------- writing
class Failing(Deserializer):
    """Delegates to a deserializer and fails on chunk 1 (a conversion interrupted half-way)."""

    def __init__(self, inner: Deserializer):
        self.inner = inner

    def stream_infos(self) -> Any:
        return self.inner.stream_infos()

    def num_chunks(self) -> int:
        return self.inner.num_chunks()

    def chunk_index(self, chunk_id: int) -> Any:
        return self.inner.chunk_index(chunk_id)

    def get_chunk(self, chunk_id: int) -> Any:
        if chunk_id == 1:
            raise RuntimeError("interrupted")
        return self.inner.get_chunk(chunk_id)


def test_an_interrupted_conversion_leaves_no_file(tmp_path: Path) -> None:
    data = make_data(tmp_path, 40, seed=1)
    source = Failing(CTFDeserializer(data.path, STREAMS, chunk_size_in_bytes=100))
    with pytest.raises(RuntimeError, match="interrupted"):
        write_cbf(source, tmp_path / "out.cbf", chunk_size_in_bytes=50)
    assert sorted(p.name for p in tmp_path.iterdir()) == [data.path.name]


def test_cli_convert(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = make_data(tmp_path, 30, seed=2)
    out = tmp_path / "inferred.cbf"
    assert cli(["convert", str(data.path), str(out), "--chunk-size", "100", "--no-progress", "--infer-dims"]) == 0
    reader = CBFDeserializer(out)
    assert [(i.name, i.shape, i.is_sparse) for i in reader.stream_infos()] == [("x", (2,), False), ("y", (7,), True)]
    assert all_sequences(reader) == all_sequences(CTFDeserializer(data.path, STREAMS))
    assert cli(["convert", str(data.path), str(tmp_path / "x.cbf"), "--stream", "features:2:dense:x"]) == 0
    assert [i.name for i in CBFDeserializer(tmp_path / "x.cbf").stream_infos()] == ["features"]
    bad = tmp_path / "bad.ctf"
    bad.write_text("0 |x 1 2\n0 |x abc 2\n")
    assert cli(["convert", str(bad), str(tmp_path / "bad.cbf"), "--stream", "x:2:dense"]) == 1
    assert "bad.ctf:2" in capsys.readouterr().err
    assert not (tmp_path / "bad.cbf").exists()


def test_a_progress_bar_on_request(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("tqdm")
    data = make_data(tmp_path, 30, seed=2)
    write_cbf(CTFDeserializer(data.path, STREAMS, chunk_size_in_bytes=100), tmp_path / "p.cbf", progress=True)
    assert "writing CBF" in capsys.readouterr().err


def test_written_files_have_the_mode_open_gives_not_mkstemps(tmp_path: Path) -> None:
    """write_cbf and cntkio.htk's writers write through a temporary file renamed into place; that file used to keep
    mkstemp's 0o600, so the data written was unreadable to the other users of a shared cluster."""
    script = f"""
import os, stat, numpy as np
os.umask(0o022)
import cntkio.htk as htk
from cntkio import CTFDeserializer, StreamDef, StreamDefs, write_cbf
d = {str(tmp_path)!r}
with open(os.path.join(d, "a.ctf"), "w") as f:
    f.write("0 |x 1 2\\n1 |x 3 4\\n")
streams = StreamDefs(x=StreamDef(field="x", shape=2))
write_cbf(CTFDeserializer(os.path.join(d, "a.ctf"), streams), os.path.join(d, "a.cbf"))
htk.write_features(os.path.join(d, "a.htk"), np.zeros((3, 2), np.float32))
htk.write_mlf(os.path.join(d, "a.mlf"), {{"u": [(0, 3, "s")]}})
print(" ".join(oct(stat.S_IMODE(os.stat(os.path.join(d, n)).st_mode)) for n in ("a.cbf", "a.htk", "a.mlf")))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["0o644", "0o644", "0o644"]


def test_chunk_file_bytes_has_one_entry_per_chunk(tmp_path: Path) -> None:
    """The chunk table's offsets already end with the header's: chunk_file_bytes appended it again and gave one
    entry more than chunks (a trailing 0), which misplaced every later shard's sizes in a sharded CBF corpus."""
    text = "".join(f"{i} |x {i} {i}\n" for i in range(40))
    (tmp_path / "a.ctf").write_text(text)
    streams = StreamDefs(x=StreamDef(field="x", shape=2))
    for name in ("a.cbf", "b.cbf"):
        write_cbf(CTFDeserializer(tmp_path / "a.ctf", streams), tmp_path / name, chunk_size_in_bytes=200)
    one = CBFDeserializer(tmp_path / "a.cbf")
    sizes = one.chunk_file_bytes()
    assert one.num_chunks() > 1 and len(sizes) == one.num_chunks() and (sizes > 0).all()
    header = int(np.frombuffer((tmp_path / "a.cbf").read_bytes()[-8:], dtype="<i8")[0])
    assert sizes.sum() == header - 12
    both = CBFDeserializer([tmp_path / "a.cbf", tmp_path / "b.cbf"])
    assert both.chunk_file_bytes().tolist() == sizes.tolist() * 2
