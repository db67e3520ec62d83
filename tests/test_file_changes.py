"""Files edited in place while a reader has them open (issue 22, 1.4): a rewrite that keeps the size and puts the
modification time back (``os.utime``, as ``rsync --inplace -t`` does) is detected from what a user cannot set back
— the change time (ctime) of the open file, the inode of a file opened again — when a chunk is read, in every
file-backed format, with an error naming the file and what changed; never read with the old index. One ``fstat``
per chunk read, after the read. A file deleted or replaced (renamed over) while open is still read as it was."""

from __future__ import annotations

import base64
import os
import pickle
import shutil
import struct
import time
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cntkio import (
    CBFDeserializer,
    CTFDeserializer,
    FormatError,
    HTKFeatureDeserializer,
    MinibatchSource,
    StreamDef,
    StreamDefs,
    write_cbf,
)
from cntkio._src.formats import htk_features as htk_features
from cntkio.htk import ScpEntry, write_archive, write_features, write_scp
from conftest import numbered_ctf

X = StreamDefs(x=StreamDef(field="x", shape=2))


def rewrite_in_place(path: Path, data: bytes) -> None:
    """``data`` written over the file (the same inode), its size and modification time as they were. Written again
    while the change time has not moved: with coarse timestamps (kernels without multigrain ones) a rewrite in
    the same clock tick as the file's last change leaves no trace (git's "racy" entries)."""
    info = path.stat()
    assert len(data) == info.st_size
    while True:
        with path.open("r+b") as file:
            file.write(data)
        os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))
        after = path.stat()
        if after.st_ctime_ns != info.st_ctime_ns:
            break
        time.sleep(0.005)
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (info.st_ino, info.st_size, info.st_mtime_ns)


def shuffled_lines(path: Path, every: int) -> bytes:
    """The file's lines with every ``every``-th pair swapped (the same bytes, other keys in other places)."""
    lines = path.read_bytes().splitlines(keepends=True)
    for i in range(0, len(lines) - 1, every):
        lines[i], lines[i + 1] = lines[i + 1], lines[i]
    return b"".join(lines)


# ------------------------------------------------------------------------------------------------------ CTF
def test_a_ctf_file_rewritten_in_place_under_a_source_is_an_error_never_other_keys(tmp_path: Path) -> None:
    """40,000 sequences, 4,000 of them moved by the rewrite: whatever the source prefetched before it is right,
    and the first chunk read after it raises, naming the file and the change time."""
    path = numbered_ctf(tmp_path / "data.ctf", 40_000)
    reader = CTFDeserializer(path, X, chunk_size_in_bytes=64 << 10)
    source = MinibatchSource(reader, randomize=False, max_sweeps=1)
    first = source.next_minibatch(1000)
    rewrite_in_place(path, shuffled_lines(path, 10))
    delivered = [first]
    with pytest.raises(FormatError, match="changed since it was indexed") as raised:
        while minibatch := source.next_minibatch(1000):
            delivered.append(minibatch)
    assert raised.value.file == str(path) and "change time" in str(raised.value)
    for minibatch in delivered:  # chunks read before the rewrite: keys and values together
        keys = np.array([key for _, key in minibatch.sequence_keys])  # type: ignore[union-attr]
        np.testing.assert_array_equal(minibatch["x"].values[:, 0], keys)
    source.close()


def counting_fstat(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The descriptors ``os.fstat`` is called with from now on."""
    calls: list[int] = []
    fstat = os.fstat

    def counted(fd: int) -> os.stat_result:
        calls.append(fd)
        return fstat(fd)

    monkeypatch.setattr(os, "fstat", counted)
    return calls


def test_one_fstat_per_chunk_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = numbered_ctf(tmp_path / "data.ctf", 2000)
    reader = CTFDeserializer(path, X, chunk_size_in_bytes=4096)
    calls = counting_fstat(monkeypatch)
    for chunk in range(reader.num_chunks()):
        reader.get_chunk(chunk)
    assert len(calls) == reader.num_chunks() > 5


def test_a_sharded_corpus_names_the_shard_that_changed(tmp_path: Path) -> None:
    first, second = numbered_ctf(tmp_path / "a.ctf", 100), numbered_ctf(tmp_path / "b.ctf", 100)
    corpus = CTFDeserializer([first, second], X)  # type: ignore[arg-type]  # (a list makes a sharded corpus)
    corpus.get_chunk(1)
    rewrite_in_place(second, shuffled_lines(second, 2))
    corpus.get_chunk(0)  # the first shard is as it was
    with pytest.raises(FormatError, match="change time") as raised:
        corpus.get_chunk(1)
    assert raised.value.file == str(second)


def test_a_file_deleted_or_replaced_while_open_is_still_read_as_indexed(tmp_path: Path) -> None:
    path = numbered_ctf(tmp_path / "data.ctf", 100)
    deleted, replaced = CTFDeserializer(path, X), CTFDeserializer(path, X)
    other = numbered_ctf(tmp_path / "other.ctf", 100)
    rewrite_in_place(other, shuffled_lines(other, 2))
    os.replace(other, path)  # the open file's link count drops to 0 (and its ctime moves): still the same bytes
    assert replaced.get_chunk(0)["x"].values[1, 0] == 1
    path.unlink()
    assert deleted.get_chunk(0)["x"].values[1, 0] == 1


def test_a_pickled_copy_refuses_the_same_file_rewritten_with_its_mtime_put_back(tmp_path: Path) -> None:
    path = numbered_ctf(tmp_path / "data.ctf", 100)
    pickled = pickle.dumps(CTFDeserializer(path, X))
    assert pickle.loads(pickled).num_chunks() == 1  # unchanged: the copy opens
    rewrite_in_place(path, shuffled_lines(path, 2))
    with pytest.raises(FormatError, match=r"changed since the deserializer was pickled.*change time"):
        pickle.loads(pickled)


# ------------------------------------------------------------------------------------------------------ CBF
def test_a_cbf_file_rewritten_in_place_is_an_error(tmp_path: Path) -> None:
    ctf = numbered_ctf(tmp_path / "data.ctf", 50)
    path = write_cbf(CTFDeserializer(ctf, X), tmp_path / "data.cbf")
    reader = CBFDeserializer(path)
    data = path.read_bytes()
    seven = struct.pack("<f", 7.0)
    assert data.count(seven) == 2  # sequence 7's two values
    rewrite_in_place(path, data.replace(seven, struct.pack("<f", 8.0)))
    with pytest.raises(FormatError, match=r"changed since it was indexed.*change time") as raised:
        reader.get_chunk(0)
    assert raised.value.file == str(path)


# ------------------------------------------------------------------------------------------------------ HTK
def htk_corpus(tmp_path: Path, count: int) -> tuple[Path, dict[str, np.ndarray]]:
    utterances = {f"utt{i}": np.full((3, 2), i, dtype=np.float32) for i in range(count)}
    entries = write_archive(tmp_path / "all.ark", utterances)
    scp = tmp_path / "all.scp"
    write_scp(scp, entries)
    return scp, utterances


def features(scp: Path, **options: Any) -> HTKFeatureDeserializer:
    return HTKFeatureDeserializer(StreamDefs(feats=StreamDef(shape=2, scp=str(scp))), **options)


def test_an_htk_archive_rewritten_in_place_names_the_file_and_an_utterance(tmp_path: Path) -> None:
    scp, _ = htk_corpus(tmp_path, 6)
    reader = features(scp)
    archive = tmp_path / "all.ark"
    data = archive.read_bytes()
    three, four = struct.pack(">f", 3.0) * 2, struct.pack(">f", 4.0) * 2
    assert three in data
    rewrite_in_place(archive, data.replace(three, four))
    with pytest.raises(FormatError, match=r"changed since it was indexed.*change time") as raised:
        reader.get_chunk(0)
    assert raised.value.file == str(archive) and raised.value.sequence_key == "utt0"


def test_an_htk_file_reopened_must_be_the_indexed_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """More files than stay open: one closed meanwhile and replaced by another of the same size and modification
    time is refused when opened again (another inode), not read as the indexed one."""
    monkeypatch.setattr(htk_features, "MAX_OPEN_FILES", 4)
    entries = []
    for i in range(8):
        path = tmp_path / f"u{i}.htk"
        write_features(path, np.full((3, 2), i, dtype=np.float32))
        entries.append(ScpEntry(f"u{i}", str(path)))
    scp = tmp_path / "all.scp"
    write_scp(scp, entries)
    reader = features(scp, chunk_frames=2)  # a chunk an utterance
    assert reader._files.limit == 4 and reader.num_chunks() == 8
    first = tmp_path / "u0.htk"
    info = first.stat()
    write_features(tmp_path / "new.htk", np.full((3, 2), 99, dtype=np.float32))
    os.replace(tmp_path / "new.htk", first)
    os.utime(first, ns=(info.st_atime_ns, info.st_mtime_ns))
    with pytest.raises(FormatError, match=r"changed since it was indexed.*another file") as raised:
        reader.get_chunk(0)
    assert raised.value.file == str(first) and raised.value.sequence_key == "u0"
    assert reader.get_chunk(7)["feats"].values[0, 0] == 7


# ------------------------------------------------------------------------------------------------------ images
cv2 = pytest.importorskip("cv2")
from cntkio import Base64ImageDeserializer, ImageDeserializer  # noqa: E402


def bmp(value: int) -> bytes:
    """An 8 x 8 BMP image of one grey value (every such image has the same size)."""
    ok, data = cv2.imencode(".bmp", np.full((8, 8, 3), value, dtype=np.uint8))
    assert ok
    return bytes(data)


IMAGE = StreamDefs(features=StreamDef(field="image", transforms=[]), labels=StreamDef(field="label", shape=4))


def test_a_base64_file_rewritten_in_place_is_an_error_not_another_image(tmp_path: Path) -> None:
    path = tmp_path / "images.b64"
    payloads = [base64.b64encode(bmp(10 * i)).decode() for i in range(4)]
    lines = [f"{i}\t{i}\t{p}\n" for i, p in enumerate(payloads)]
    path.write_text("".join(lines))
    reader = Base64ImageDeserializer(path, IMAGE, images_per_chunk=2)
    assert reader.get_chunk(0)["features"].values[1, 0, 0, 0] == 10
    lines[0], lines[1] = lines[0][:4] + lines[1][4:], lines[1][:4] + lines[0][4:]  # the images of keys 0, 1 swapped
    rewrite_in_place(path, "".join(lines).encode())
    with pytest.raises(FormatError, match=r"changed since it was indexed.*change time") as raised:
        reader.get_chunk(0)
    assert raised.value.file == str(path)


def test_a_base64_chunk_costs_one_fstat(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "images.b64"
    path.write_text("".join(f"{i}\t{i % 4}\t{base64.b64encode(bmp(i)).decode()}\n" for i in range(12)))
    reader = Base64ImageDeserializer(path, IMAGE, images_per_chunk=4)
    calls = counting_fstat(monkeypatch)
    for chunk in range(reader.num_chunks()):
        reader.get_chunk(chunk)
    assert len(calls) == reader.num_chunks() == 3


def test_a_zip_archive_of_an_image_map_rewritten_in_place_is_an_error(tmp_path: Path) -> None:
    archive = tmp_path / "images.zip"
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_STORED) as z:
        for i in range(4):
            z.writestr(f"img{i}.bmp", bmp(10 * i))
    map_file = tmp_path / "map.txt"
    map_file.write_text("".join(f".../images.zip@/img{i}.bmp\t{i}\n" for i in range(4)))
    reader = ImageDeserializer(map_file, IMAGE)
    assert reader.get_chunk(1)["features"].values[0, 0, 0, 0] == 10
    data = archive.read_bytes()
    one, two = bmp(10)[-64:], bmp(20)[-64:]  # pixels of images 1 and 2 (same size), swapped in place
    rewrite_in_place(archive, data.replace(one, b"\0" * 64).replace(two, one).replace(b"\0" * 64, two))
    with pytest.raises(FormatError, match=r"changed since it was opened.*change time") as raised:
        reader.get_chunk(1)
    assert raised.value.file == str(archive)


def test_a_zip_archive_replaced_before_a_worker_opens_it_is_refused(tmp_path: Path) -> None:
    """A pickled reader's archives (a DataLoader worker's) must be the ones the map was checked against."""
    archive = tmp_path / "images.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("img.bmp", bmp(1))
    map_file = tmp_path / "map.txt"
    map_file.write_text(".../images.zip@/img.bmp\t0\n")
    reader = ImageDeserializer(map_file, IMAGE)
    archives = pickle.loads(pickle.dumps(reader.archives))
    info = archive.stat()
    shutil.copy(archive, tmp_path / "copy.zip")
    with zipfile.ZipFile(tmp_path / "copy.zip", "a") as z:
        z.writestr("other.bmp", bmp(2))
    os.replace(tmp_path / "copy.zip", archive)
    os.utime(archive, ns=(info.st_atime_ns, info.st_mtime_ns))
    with pytest.raises(FormatError, match=r"changed since it was first opened.*size"):
        archives.read(0, "img.bmp")


# ------------------------------------------------------------------------------- files read whole (pickled copies)
def test_pickled_readers_refuse_listings_rewritten_with_their_mtime_put_back(tmp_path: Path) -> None:
    """SCP, MLF and image map files are read whole when a reader is built, and again by its pickled copy (a
    DataLoader worker): the same file rewritten in place with its size and modification time kept would give the
    copy another index than the original's. Refused, naming the file."""
    from cntkio._src.formats.htk_labels import HTKMLFDeserializer

    scp, _ = htk_corpus(tmp_path, 4)
    mlf = tmp_path / "labels.mlf"
    mlf.write_text('#!MLF!#\n"utt0.lab"\n0 300000 s1\n.\n"utt1.lab"\n0 300000 s2\n.\n')
    states = tmp_path / "states.list"
    states.write_text("s1\ns2\ns3\n")
    (tmp_path / "img.bmp").write_bytes(bmp(1))
    map_file = tmp_path / "map.txt"
    map_file.write_text(f"{tmp_path}/img.bmp\t1\n{tmp_path}/img.bmp\t2\n")
    readers = {
        scp: features(scp),
        mlf: HTKMLFDeserializer(str(states), StreamDefs(labels=StreamDef(shape=3, mlf=str(mlf)))),
        map_file: ImageDeserializer(map_file, IMAGE),
    }
    for path, reader in readers.items():
        pickled = pickle.dumps(reader)
        pickle.loads(pickled)  # unchanged: the copy is built
        data = path.read_bytes()
        rewrite_in_place(path, data.replace(b"utt1", b"utt2") if b"utt1" in data else data.replace(b"\t1\n", b"\t3\n"))
        with pytest.raises(FormatError, match=r"changed since the deserializer was pickled.*change time") as raised:
            pickle.loads(pickled)
        assert raised.value.file == str(path)


# ------------------------------------------------------------------------------------------------ property
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    edits=st.lists(
        st.tuples(
            st.integers(0, 10**6),
            st.one_of(st.text("0123456789", min_size=1, max_size=6).map(str.encode), st.binary(min_size=1, max_size=8)),
        ),
        min_size=1,
        max_size=4,
    ),
    mtime_back=st.booleans(),
    chunk=st.integers(0, 7),
)
def test_after_any_in_place_edit_a_chunk_read_raises_or_is_the_indexed_data(
    tmp_path_factory: pytest.TempPathFactory, edits: list[tuple[int, bytes]], mtime_back: bool, chunk: int
) -> None:
    """Any bytes written anywhere in the file (the same ones too), the modification time put back or not: a chunk
    read afterwards raises an error naming the file, or gives exactly what it gave before the edit."""
    path = numbered_ctf(tmp_path_factory.mktemp("edit") / "data.ctf", 800)
    reader = CTFDeserializer(path, X, chunk_size_in_bytes=2400)
    chunk %= reader.num_chunks()
    before = reader.get_chunk(chunk)["x"].values.copy()
    data = bytearray(path.read_bytes())
    for at, piece in edits:
        at %= len(data) - len(piece)
        data[at : at + len(piece)] = piece
    if mtime_back:
        rewrite_in_place(path, bytes(data))
    else:
        with path.open("r+b") as file:
            file.write(bytes(data))
    try:
        after = reader.get_chunk(chunk)["x"].values
    except FormatError as error:
        assert error.file == str(path)
    else:
        np.testing.assert_array_equal(after, before)
