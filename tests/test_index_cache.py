"""Persisted CTF indexes (``cache_index=True``, :mod:`cntkio.index_cache`): used when valid, rebuilt with a warning
when stale, corrupt, truncated or of another version, written atomically (also by concurrent processes), kept in
``index_cache_dir`` when asked, and giving exactly the minibatches (and counted errors) of a fresh index."""

from __future__ import annotations

import logging
import multiprocessing
import os
import shutil
import struct
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cntkio import CTFDeserializer, MinibatchSource, StreamDef, StreamDefs, _native
from conftest import numbered_ctf

STREAMS = StreamDefs(x=StreamDef(field="x", shape=2), y=StreamDef(field="y", shape=5, is_sparse=True))
X = StreamDefs(x=StreamDef(field="x", shape=2))


def write_ctf(path: Path, sequences: int, bad_line: bool = False) -> Path:
    lines = []
    for s in range(sequences):
        for t in range(1 + s % 3):
            lines.append(f"{s} |x {s}.5 {t} |y {s % 5}:1")
        if bad_line and s == 3:
            lines.append(f"{s} |x oops 1")
    path.write_text("\n".join(lines) + "\n")
    return path


def caches(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.cntkio-index"))


def everything(deserializer: CTFDeserializer) -> tuple[list[Any], np.ndarray, np.ndarray]:
    source = MinibatchSource(deserializer, randomize=False, max_sweeps=1)
    minibatch = source.next_minibatch(10**6)
    return [key for _, key in minibatch.sequence_keys], minibatch["x"].values, minibatch["y"].indices


def test_the_second_open_uses_the_cache_and_reads_the_same(tmp_path: Path) -> None:
    data = write_ctf(tmp_path / "a.ctf", 40)
    fresh = everything(CTFDeserializer(data, STREAMS))
    first = CTFDeserializer(data, STREAMS, cache_index=True, chunk_size_in_bytes=200)
    assert len(caches(tmp_path)) == 1
    cached = CTFDeserializer(data, STREAMS, cache_index=True, chunk_size_in_bytes=200)
    assert cached.num_chunks() == first.num_chunks() > 3
    for got in (everything(first), everything(cached)):
        assert got[0] == fresh[0]
        np.testing.assert_array_equal(got[1], fresh[1])
        np.testing.assert_array_equal(got[2], fresh[2])


def no_scan(monkeypatch: pytest.MonkeyPatch) -> None:
    """Makes scanning a CTF file fail: an index can then only come from its cache."""

    def scan(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the file was scanned, not read from its cache")

    monkeypatch.setattr(_native, "ctf_index", scan)


def test_the_cache_is_what_the_index_comes_from(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = write_ctf(tmp_path / "a.ctf", 200)
    fresh = everything(CTFDeserializer(data, STREAMS, chunk_size_in_bytes=300))
    CTFDeserializer(data, STREAMS, cache_index=True, chunk_size_in_bytes=300)
    no_scan(monkeypatch)
    cached = everything(CTFDeserializer(data, STREAMS, cache_index=True, chunk_size_in_bytes=300))
    assert cached[0] == fresh[0]
    np.testing.assert_array_equal(cached[1], fresh[1])


@pytest.mark.parametrize("ids", ["text", "none"])
def test_a_file_with_text_ids_or_none_is_read_from_its_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ids: str
) -> None:
    """Text ids (the keys as a blob and offsets) and lines without ids (the keys are the line numbers) come from
    the cache too (text ids were scanned again on every open: the cache's consistency check wanted numeric keys)."""
    data = tmp_path / "a.ctf"
    data.write_text("".join(f"{f'utt{s} ' if ids == 'text' else ''}|x {s}.5 1 |y {s % 5}:1\n" for s in range(50)))
    options: dict[str, Any] = {"chunk_size_in_bytes": 200, "skip_sequence_ids": ids == "none"}
    fresh = everything(CTFDeserializer(data, STREAMS, **options))
    CTFDeserializer(data, STREAMS, cache_index=True, **options)
    no_scan(monkeypatch)
    cached = everything(CTFDeserializer(data, STREAMS, cache_index=True, **options))
    assert cached[0] == fresh[0]
    np.testing.assert_array_equal(cached[1], fresh[1])


def swap_lines_keeping_size_and_mtime(path: Path, first: int) -> None:
    """Lines ``first`` and ``first + 1`` swapped in place, the modification time put back (``os.utime``)."""
    info = path.stat()
    lines = path.read_bytes().splitlines(keepends=True)
    lines[first], lines[first + 1] = lines[first + 1], lines[first]
    while True:  # written again if coarse timestamps left the change time in the tick of the last change
        with path.open("r+b") as file:  # in place: the same inode
            file.write(b"".join(lines))
        os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))
        after = path.stat()
        if after.st_ctime_ns != info.st_ctime_ns:
            break
        time.sleep(0.005)
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (info.st_size, info.st_mtime_ns, info.st_ino)


def test_a_same_size_rewrite_with_the_mtime_put_back_is_indexed_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Lines in the middle (beyond the first and last 64 KiB) swapped, size and mtime kept: the change time tells,
    so the cache is stale, and every key is delivered with its own values (never "key 10000 with x = 10001")."""
    data = numbered_ctf(tmp_path / "a.ctf", 20_000)
    CTFDeserializer(data, X, cache_index=True)
    swap_lines_keeping_size_and_mtime(data, 10_000)
    with caplog.at_level(logging.WARNING, logger="cntkio"):
        reader = CTFDeserializer(data, X, cache_index=True)
    assert "stale" in caplog.text and "change time" in caplog.text, caplog.text
    source = MinibatchSource(reader, randomize=False, max_sweeps=1)
    minibatch = source.next_minibatch(10**6)
    keys = np.array([key for _, key in minibatch.sequence_keys])
    np.testing.assert_array_equal(minibatch["x"].values[:, 0], keys)
    assert keys[10_000] == 10_001


def test_a_copied_file_rebuilds_its_cache_once_then_uses_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Data and cache copied elsewhere with their modification times (``shutil.copy2``): another inode, so the
    cache is built again once (correct: nothing says the copy holds the same bytes), and used from then on."""
    original = tmp_path / "original"
    original.mkdir()
    data = write_ctf(original / "a.ctf", 60)
    CTFDeserializer(data, STREAMS, cache_index=True)
    copy = tmp_path / "copy"
    copy.mkdir()
    for path in (data, *caches(original)):
        shutil.copy2(path, copy / path.name)
    assert (copy / "a.ctf").stat().st_mtime_ns == data.stat().st_mtime_ns
    with caplog.at_level(logging.WARNING, logger="cntkio"):
        CTFDeserializer(copy / "a.ctf", STREAMS, cache_index=True)
    assert "stale" in caplog.text and "inode" in caplog.text, caplog.text
    caplog.clear()
    no_scan(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="cntkio"):
        again = CTFDeserializer(copy / "a.ctf", STREAMS, cache_index=True)
        original_again = CTFDeserializer(data, STREAMS, cache_index=True)
    assert not caplog.records
    assert everything(again)[0] == everything(original_again)[0]


@pytest.mark.parametrize("damage", ["bit flip", "truncated", "empty", "other version", "garbage"])
def test_a_damaged_cache_is_rebuilt_with_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: str):
    data = write_ctf(tmp_path / "a.ctf", 50)
    fresh = everything(CTFDeserializer(data, STREAMS))
    CTFDeserializer(data, STREAMS, cache_index=True)
    (cache,) = caches(tmp_path)
    content = bytearray(cache.read_bytes())
    if damage == "bit flip":
        content[len(content) // 2] ^= 0x10
    elif damage == "truncated":
        content = content[: len(content) - 100]
    elif damage == "empty":
        content = bytearray()
    elif damage == "other version":
        content[8:12] = struct.pack("<I", 99)
        length = len(content) - 16
        content[length + 8 : length + 12] = struct.pack("<I", _native.crc32c(bytes(content[:length])))
    else:
        content = bytearray(b"not an index at all" * 10)
    cache.write_bytes(bytes(content))
    with caplog.at_level(logging.WARNING, logger="cntkio"):
        rebuilt = CTFDeserializer(data, STREAMS, cache_index=True)
    assert any("index cache" in r.message and "indexing" in r.message for r in caplog.records), caplog.text
    got = everything(rebuilt)
    assert got[0] == fresh[0]
    np.testing.assert_array_equal(got[1], fresh[1])
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="cntkio"):
        CTFDeserializer(data, STREAMS, cache_index=True)  # rewritten: valid again
    assert not caplog.records


def test_a_changed_data_file_is_indexed_again(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    data = write_ctf(tmp_path / "a.ctf", 30)
    CTFDeserializer(data, STREAMS, cache_index=True)
    with data.open("a") as f:
        f.write("999 |x 1 2 |y 0:1\n")
    with caplog.at_level(logging.WARNING, logger="cntkio"):
        reader = CTFDeserializer(data, STREAMS, cache_index=True)
    assert "stale" in caplog.text
    assert everything(reader)[0][-1] == 999


def test_options_that_shape_the_index_get_their_own_cache(tmp_path: Path) -> None:
    data = write_ctf(tmp_path / "a.ctf", 30)
    small = CTFDeserializer(data, STREAMS, cache_index=True, chunk_size_in_bytes=100)
    large = CTFDeserializer(data, STREAMS, cache_index=True)
    assert len(caches(tmp_path)) == 2
    assert CTFDeserializer(data, STREAMS, cache_index=True, chunk_size_in_bytes=100).num_chunks() == small.num_chunks()
    assert CTFDeserializer(data, STREAMS, cache_index=True).num_chunks() == large.num_chunks() == 1


def test_index_cache_dir_keeps_the_data_folder_untouched(tmp_path: Path) -> None:
    data_dir, cache_dir = tmp_path / "data", tmp_path / "caches" / "ctf"
    data_dir.mkdir()
    data = write_ctf(data_dir / "a.ctf", 20)
    CTFDeserializer(data, STREAMS, cache_index=True, index_cache_dir=cache_dir)
    assert caches(data_dir) == [] and len(caches(cache_dir)) == 1
    other = write_ctf(tmp_path / "a.ctf", 25)  # the same name elsewhere: a cache of its own
    CTFDeserializer(other, STREAMS, cache_index=True, index_cache_dir=cache_dir)
    assert len(caches(cache_dir)) == 2
    assert len(everything(CTFDeserializer(data, STREAMS, cache_index=True, index_cache_dir=cache_dir))[0]) == 20


def test_a_cache_that_cannot_be_written_is_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    data = write_ctf(tmp_path / "a.ctf", 20)
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder should be")
    with caplog.at_level(logging.WARNING, logger="cntkio"):
        reader = CTFDeserializer(data, STREAMS, cache_index=True, index_cache_dir=blocker / "sub")
    assert "cannot be written" in caplog.text
    assert len(everything(reader)[0]) == 20


def test_errors_counted_while_indexing_are_counted_from_the_cache_too(tmp_path: Path) -> None:
    data = write_ctf(tmp_path / "a.ctf", 20, bad_line=True)
    fresh = CTFDeserializer(data, STREAMS, max_errors=5)
    everything(fresh)
    CTFDeserializer(data, STREAMS, max_errors=5, cache_index=True)
    cached = CTFDeserializer(data, STREAMS, max_errors=5, cache_index=True)
    assert everything(cached)[0] == everything(CTFDeserializer(data, STREAMS, max_errors=5))[0]
    assert cached.errors.count == fresh.errors.count >= 1


def _open_with_cache(path: str) -> int:
    return CTFDeserializer(path, STREAMS, cache_index=True).sequence_index().num_sequences


def test_concurrent_writers_leave_one_complete_cache(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    data = write_ctf(tmp_path / "a.ctf", 3000)
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        counts = pool.map(_open_with_cache, [str(data)] * 8)
    assert counts == [3000] * 8
    assert len(caches(tmp_path)) == 1
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
    with caplog.at_level(logging.WARNING, logger="cntkio"):
        assert _open_with_cache(str(data)) == 3000
    assert not caplog.records
