"""Defects a review of CBF reading and writing found (a rewrite in place, overflows, keys, empty or damaged
sources, CLI messages); each test failed before its fix."""

from __future__ import annotations

import itertools
import os
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from cntkio import (
    CBFDeserializer,
    ConfigError,
    FormatError,
    RecordDeserializer,
    StreamDef,
    StreamDefs,
    StreamInformation,
    UserDeserializer,
    write_cbf,
)
from cntkio._src.cli.main import main as cli
from cntkio._src.common.keys import KeyColumn

MAGIC = 0x636E746B5F62696E


def cbf_bytes(streams: list[tuple[str, int, int, int]], lengths: list[int], blocks: bytes) -> bytes:
    """A one-chunk CBF file: streams (name, sparse, double, dim), the sequence lengths and the stream blocks."""
    chunk = np.asarray(lengths, dtype="<u4").tobytes() + blocks
    header_offset = 12 + len(chunk)
    header = struct.pack("<QII", MAGIC, 1, len(streams))
    for name, sparse, double, dim in streams:
        header += struct.pack("<BI", sparse, len(name)) + name.encode() + struct.pack("<BI", double, dim)
    header += struct.pack("<qII", 12, len(lengths), sum(lengths))
    return struct.pack("<QI", MAGIC, 1) + chunk + header + struct.pack("<q", header_offset)


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120, cwd="/"
    )


# ----------------------------------------------------------------------------- CBF decoding (cbf.cpp)
def test_cbf_rewritten_in_place_with_the_same_size_and_mtime_is_not_a_heap_overflow(tmp_path: Path) -> None:
    """decode_chunk reads the chunk's seqLength table again and trusts it: the sparse indptr is sized by the
    chunk table's sample count, but the sample counts are only bounded by the re-read lengths. A file rewritten
    in place within the modification-time granularity (same size, same mtime) overflows the heap (abort)."""
    dim = 50_000
    sparse_block = struct.pack("<Ii", 1, 0) + struct.pack("<i", 0)  # 1 sample, nnz 0, 0 entries in sample 0
    dense_block = struct.pack("<I", 1) + np.zeros(dim, dtype="<f4").tobytes()
    path = tmp_path / "m.cbf"
    path.write_bytes(cbf_bytes([("s", 1, 0, 4), ("d", 0, 0, dim)], [1], sparse_block + dense_block))
    code = f"""
        import os, struct
        from cntkio import CBFDeserializer, FormatError
        path = {str(path)!r}
        reader = CBFDeserializer(path)
        info = os.stat(path)
        data = bytearray(open(path, "rb").read())
        n = {dim}
        chunk = struct.pack("<I", n) + struct.pack("<Ii", n, 0) + bytes(4 * n) + struct.pack("<I", 0)
        data[12 : 12 + len(chunk)] = chunk  # same size: seqLength n, the sparse sequence n samples
        with open(path, "r+b") as f:
            f.write(data)
        os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))
        try:
            reader.get_chunk(0)
            print("decoded")
        except (FormatError, ValueError) as error:
            print("refused", error)
        """
    result = run_python(code)
    assert result.returncode == 0, f"crashed ({result.returncode}): {result.stderr[-500:]}"
    assert "refused" in result.stdout


def test_cbf_dense_byte_count_overflow_is_a_format_error(tmp_path: Path) -> None:
    """samples * dim * itemsize is computed in int64 without an overflow check (cbf.cpp, dense branch): dim 2^31
    float64 and 2^30 samples wrap to 0 bytes, so a 47-byte file decodes to a stream whose seq_offsets claim 2^30
    samples over an empty values array instead of raising FormatError."""
    length = 2**30
    path = tmp_path / "overflow.cbf"
    path.write_bytes(cbf_bytes([("x", 0, 1, 2**31)], [length], struct.pack("<I", length)))
    reader = CBFDeserializer(path)
    with pytest.raises(FormatError):
        chunk = reader.get_chunk(0)
        stream = chunk["x"]
        assert len(stream.values) == int(stream.seq_offsets[-1]), "inconsistent chunk"
    reader.close()


def test_cbf_keys_index_like_numeric_keys(tmp_path: Path) -> None:
    """RangeKeys (keys.py) adds ``first`` to any index: keys[-1] is -1 (not the last key), keys[len] is made up
    instead of IndexError, so iterating the CBF index's keys never ends (list(keys) hangs); and concatenating two
    RangeKeys columns calls RangeKeys(values) (TypeError)."""
    path = tmp_path / "k.cbf"
    path.write_bytes(cbf_bytes([("x", 0, 0, 1)], [1, 1, 1], (struct.pack("<I", 1) + struct.pack("<f", 1.0)) * 3))
    reader = CBFDeserializer(path)
    keys = reader.sequence_index().keys
    assert len(keys) == 3
    assert keys[-1] == 2
    with pytest.raises(IndexError):
        keys[3]
    assert len(list(itertools.islice(iter(keys), 10))) == 3
    joined = KeyColumn.concatenate([keys.slice(0, 2), keys.slice(2, 3)])
    assert joined.take(np.arange(3)) == [0, 1, 2]
    reader.close()


# ----------------------------------------------------------------------------- CBF writing (convert.py)
class Empty(UserDeserializer):
    def stream_infos(self) -> list[StreamInformation]:
        return [StreamInformation("x", 0, "dense", np.float32, (3,))]

    def num_chunks(self) -> int:
        return 2

    def get_chunk(self, chunk_id: int) -> dict[str, np.ndarray]:
        return {"x": np.zeros((0, 3), dtype=np.float32)}


def test_write_cbf_refuses_a_source_without_sequences(tmp_path: Path) -> None:
    """write_cbf writes a header with 0 chunks when the source has no sequence (convert.py: no check before
    _write_header); the file it reports as written is one every CBF reader (cntkio's and CNTK's) refuses."""
    target = tmp_path / "empty.cbf"
    try:
        write_cbf(Empty(), target)
    except ConfigError:
        assert not target.exists()
        return
    CBFDeserializer(target)  # FormatError: the file has no chunks


def test_write_cbf_skips_records_counted_as_errors(tmp_path: Path) -> None:
    """A RecordDeserializer with max_errors marks a bad record invalid (no samples in any stream); write_cbf
    ignores ParsedChunk.invalid and fails with "chunk 0 has a sequence without samples" (convert.py
    _chunk_columns), so a corpus with tolerated bad records cannot be converted."""
    source = tmp_path / "r.txt"
    source.write_text("1\n2\nbad\n4\n")
    reader = RecordDeserializer(
        source,
        lambda record: {"x": np.array([float(record)])},
        StreamDefs(x=StreamDef(shape=1)),
        max_errors=1,
        trace_level=0,
    )
    target = write_cbf(reader, tmp_path / "r.cbf")
    converted = CBFDeserializer(target)
    assert converted.get_chunk(0)["x"].values.ravel().tolist() == [1.0, 2.0, 4.0]
    converted.close()
    reader.close()


def test_cli_convert_names_the_output_it_cannot_write(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """cli._convert reports every OSError as "cannot convert '<input>': <strerror>": an output directory that does
    not exist reads as the input file being missing."""
    source = tmp_path / "in.ctf"
    source.write_text("0 |x 1 2\n1 |x 3 4\n")
    output = tmp_path / "missing" / "out.cbf"
    assert cli(["convert", str(source), str(output), "--no-progress"]) == 2
    error = capsys.readouterr().err
    assert str(output.parent) in error, error
    assert os.path.exists(source)
