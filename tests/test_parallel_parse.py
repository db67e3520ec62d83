"""One chunk parsed on several threads (runs of sequences of about equal bytes, joined) gives exactly what one
thread gives: values, sparse arrays, sequence offsets, errors with their sequences, lines and columns, and the
padding/unknown-input notes; through the reader too."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cntkio import CTFDeserializer, MinibatchSource, StreamDef, StreamDefs, _native
from cntkio._src.common.system import parsing_with

STREAMS = StreamDefs(x=StreamDef(field="x", shape=3), y=StreamDef(field="y", shape=50, is_sparse=True))


def write(path: Path, with_ids: bool, crlf: bool, final_newline: bool) -> Path:
    rng = np.random.default_rng(1)
    count = 110_000
    indices, values = rng.integers(0, 50, (count, 4)), rng.integers(1, 9, (count, 4))
    lines = []
    for s in range(count):
        entries = " ".join(f"{i}:{v}" for i, v in zip(sorted(set(indices[s].tolist())), values[s].tolist()))
        for t in range(1 + s % 3 if with_ids else 1):
            prefix = f"{s} " if with_ids else ""
            line = f"{prefix}|x {s % 7} {t} 0.5 |y {entries}"
            if s % 9_973 == 5:
                line = f"{prefix}|x 1 oops 3 |y 3:1"  # not a number: an error (counted)
            if s % 12_011 == 7:
                line += " |zz 4"  # an unknown input: a note
            if s % 17 == 3:
                line = f"{prefix}|x {s % 7} |y {entries}"  # two values of three: zero-padded (a note)
            lines.append(line)
    text = ("\r\n" if crlf else "\n").join(lines) + ("\n" if final_newline else "")
    path.write_text(text, newline="")
    return path


def parse(reader: CTFDeserializer, threads: int) -> tuple:
    with parsing_with(threads):
        return tuple(reader.get_chunk(c) for c in range(reader.num_chunks()))


@pytest.mark.parametrize("with_ids", [False, True])
@pytest.mark.parametrize("crlf", [False, True])
@pytest.mark.parametrize("final_newline", [True, False])
def test_several_threads_parse_a_chunk_exactly_as_one(tmp_path: Path, with_ids, crlf, final_newline) -> None:
    path = write(tmp_path / "data.ctf", with_ids, crlf, final_newline)
    assert path.stat().st_size > 3 << 20  # big enough to be split in 3 (runs of at least 1 MiB)
    readers = {t: CTFDeserializer(path, STREAMS, max_errors=100, chunk_size_in_bytes=64 << 20) for t in (1, 2, 3)}
    chunks = {t: parse(reader, t) for t, reader in readers.items()}
    for threads in (2, 3):
        for one, other in zip(chunks[1], chunks[threads]):
            assert set(one) == set(other)
            for name in one:
                for field in ("values", "indices", "indptr", "seq_offsets"):
                    a, b = getattr(one[name], field, None), getattr(other[name], field, None)
                    assert (a is None) == (b is None)
                    if a is not None:
                        np.testing.assert_array_equal(a, b)
            np.testing.assert_array_equal(one.invalid, other.invalid)
        assert readers[threads].errors.count == readers[1].errors.count > 0


def test_the_native_call_reports_errors_with_the_same_locations(tmp_path: Path) -> None:
    path = write(tmp_path / "data.ctf", True, False, True)
    reader = CTFDeserializer(path, STREAMS, max_errors=100, chunk_size_in_bytes=64 << 20)
    a, b = reader._chunk_range(0)
    starts = reader._offsets[a:b].astype(np.int64)
    ends = starts + reader._sizes[a:b]
    start, end = int(starts[0]), int(ends[-1])
    fd, mode = reader.data_file.fd, int(reader.id_mode)
    results = [
        _native.ctf_parse(fd, start, end, 0, starts - start, ends - start, mode, reader._aliases, False, True, threads)
        for threads in (1, 2, 4)
    ]
    columns = ("offset", "kind", "stream", "sequence", "line", "column", "byte", "record", "end")
    notes = [name for name, member in vars(_native.CtfParseStats).items() if isinstance(member, property)]
    assert len(notes) == 8
    for _, errors, stats in results[1:]:
        assert [getattr(stats, name) for name in notes] == [getattr(results[0][2], name) for name in notes]
        for column in columns:
            np.testing.assert_array_equal(getattr(errors, column), getattr(results[0][1], column))
    assert len(results[0][1]) > 0 and results[0][2].unknown_inputs > 0


def test_a_source_without_parse_threads_uses_the_cores_for_each_chunk(tmp_path: Path) -> None:
    path = write(tmp_path / "data.ctf", False, False, True)
    reads = []
    for prefetch in (False, True):
        source = MinibatchSource(
            CTFDeserializer(path, STREAMS, max_errors=100, chunk_size_in_bytes=8 << 20), prefetch=prefetch,
            max_sweeps=1, randomization_seed=2,
        )  # fmt: skip
        keys = []
        while minibatch := source.next_minibatch(5000):
            keys += [key for _, key in minibatch.sequence_keys]
        reads.append(keys)
    assert reads[0] == reads[1] and len(reads[0]) > 50_000


def test_padded_values_are_zero_in_reused_memory(tmp_path: Path) -> None:
    """Output buffers are not zero-filled before parsing: the values a short dense sample lacks are written as
    zeros, also where the memory held another chunk's values just before."""
    full = "".join(f"{s} |x 9 9 9\n" for s in range(20_000))
    short = "".join(f"{s} |x {s % 5}\n" for s in range(20_000, 40_000))
    path = tmp_path / "padded.ctf"
    path.write_text(full + short)
    reader = CTFDeserializer(path, StreamDefs(x=StreamDef(field="x", shape=3)), chunk_size_in_bytes=len(full))
    assert reader.num_chunks() == 2
    for threads in (1, 2):
        for _ in range(3):
            with parsing_with(threads):
                first = reader.get_chunk(0)
                assert (first["x"].values == 9).all()
                del first
                values = reader.get_chunk(1)["x"].values
        np.testing.assert_array_equal(values[:, 0], np.arange(20_000, 40_000) % 5)
        assert not values[:, 1:].any()
