"""Image map files and base64 image files (spec/image.md §1-§3) as cntkio._src.formats.image_map reads them: CNTK's
conformance data (cases.json 'image' cases: what parses, which line each error names), the rules on generated files
(columns, keys, '\\r', blank lines, labels, zip names, '...'), zip archives (opened once, picklable, missing items),
the base64 index and decoder, and property tests: random map lines written by a small writer parse back to the same
columns, and the native base64 decoder agrees with Python's."""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import multiprocessing
import os
import pickle
import re
import threading
import zipfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cntkio import _native
from cntkio._src.common.errors import ConfigError, FormatError
from cntkio._src.common.keys import NumericKeys, TextKeys
from cntkio._src.formats.image_map import (
    Base64Index,
    ImageMap,
    Texts,
    ZipArchives,
    decode_base64,
    decode_base64_batch,
    decode_base64_image_bytes,
    index_base64,
    parse_image_map,
    read_image_bytes,
)

CONFORMANCE = Path(os.environ.get("CNTKIO_CONFORMANCE_DIR", "../shared/conformance/cntk")).resolve()
DATA = CONFORMANCE / "Data"
needs_data = pytest.mark.skipif(not DATA.is_dir(), reason="CNTK conformance data not found")


def write(path: Path, data: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return path


def keys_of(column: Any) -> list[Any]:
    return column.take(np.arange(len(column), dtype=np.int64))


def names(image_map: ImageMap) -> list[str]:
    return [image_map.name(i) for i in range(len(image_map))]


def image_case(name: str) -> dict[str, Any]:
    cases = json.loads((CONFORMANCE / "cases.json").read_text())
    found = [c for group in cases.values() if isinstance(group, list) for c in group if isinstance(c, dict)]
    return next(c for c in found if c.get("kind") == "image" and c["name"] == name)


def fatal(function: Any, *args: Any, **kwargs: Any) -> FormatError:
    with pytest.raises(FormatError) as info:
        function(*args, **kwargs)
    return info.value


# ------------------------------------------------------------------------------------------ conformance data
@needs_data
def test_simple_map_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(DATA)  # CNTK's cases run in Data/: map paths are relative to the working directory
    images = parse_image_map("ImageReaderSimple_map.txt", label_dim=4)
    assert len(images) == 4 and images.columns == 2 and images.views == 1 and images.num_sequences == 4
    assert isinstance(images.keys, NumericKeys) and images.keys.values.dtype == np.int64
    assert keys_of(images.keys) == [0, 1, 2, 3]  # the 0-based line index
    assert names(images) == ["images/black.jpg", "images/blue.jpg", "images/green.jpg", "images/red.jpg"]
    assert [images.path_ids.dtype, images.container_ids.dtype, images.lines.dtype] == [np.int32] * 3
    assert [images.labels.dtype, images.offsets.dtype] == [np.int64] * 2
    assert images.labels.tolist() == [0, 1, 2, 3] and images.container_ids.tolist() == [-1] * 4
    assert images.lines.tolist() == [1, 2, 3, 4] and images.offsets.tolist() == [0, 19, 37, 56]
    assert len(images.containers) == 0 and images.paths.tolist() == names(images)
    assert images.cwd == str(DATA) and images.file_path(3) == str(DATA / "images" / "red.jpg")
    assert images.location(2).line == 3 and images.location(2).sequence_key == 2
    assert read_image_bytes(images, 0) == (DATA / "images" / "black.jpg").read_bytes()
    cv2 = pytest.importorskip("cv2")
    decoded = cv2.imdecode(np.frombuffer(read_image_bytes(images, 3), np.uint8), cv2.IMREAD_COLOR)
    assert decoded.shape == (8, 4, 3)  # "native image size (4x8)", HWC BGR


@needs_data
def test_three_column_map_keeps_text_keys() -> None:
    images = parse_image_map(DATA / "ImageAndTextReaderSimple_map.txt", label_dim=4)
    assert images.columns == 3 and isinstance(images.keys, TextKeys)
    assert keys_of(images.keys) == ["1", "2", "3", "4"]  # numeric-looking, still text (the join compares by text)
    assert images.paths.tolist() == ["images/black.jpg", "images/blue.jpg", "images/green.jpg", "images/red.jpg"]


@needs_data
def test_zip_map(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(DATA)
    images = parse_image_map("ImageReaderZip_map.txt", label_dim=4)
    assert images.containers.tolist() == ["images/simple.zip"] and images.container_ids.tolist() == [0] * 4
    assert [images.item(i) for i in range(4)] == [
        "chunk0/black.jpg",
        "chunk0/blue.jpg",
        "chunk1/green.jpg",
        "chunk1/red.jpg",
    ]
    with ZipArchives(images) as archives:
        archives.check(images)
        for row, color in enumerate(["black", "blue", "green", "red"]):
            assert read_image_bytes(images, row, archives) == (DATA / "images" / f"{color}.jpg").read_bytes()
        assert archives.archive(0) is archives.archive(0)  # opened once


@needs_data
def test_zip_duplicate_rows_share_path_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(DATA)
    images = parse_image_map("ImageReaderZipDuplicate_map.txt", label_dim=4)
    assert len(images) == 8 and len(images.paths) == 4  # CNTK: a success case, every line a sequence
    assert images.path_ids.tolist() == [0, 0, 0, 1, 2, 2, 2, 3] and images.labels.tolist() == [0, 0, 0, 1, 2, 2, 2, 3]
    archives = ZipArchives(images)
    archives.check(images)
    assert read_image_bytes(images, 2, archives) == read_image_bytes(images, 0, archives)


@needs_data
def test_zip_missing_item(monkeypatch: pytest.MonkeyPatch) -> None:
    """CNTK: 'Sequence missing.jpg is not found in container images/simple.zip' then a fatal error."""
    assert image_case("ImageReaderZipMissingFile")["expect"] == "exception"
    monkeypatch.chdir(DATA)
    images = parse_image_map("ImageReaderZipMissing_map.txt", label_dim=4)
    assert images.item(3) == "missing.jpg"
    archives = ZipArchives(images)
    error = fatal(archives.check, images)
    assert (error.file, error.line, error.sequence_key, error.offset) == ("ImageReaderZipMissing_map.txt", 4, 3, 113)
    assert "'missing.jpg' is not in zip archive 'images/simple.zip'" in str(error)
    assert str(fatal(read_image_bytes, images, 3, archives)) == str(error)
    assert read_image_bytes(images, 4, archives) == (DATA / "images" / "red.jpg").read_bytes()


@needs_data
def test_three_dots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The case runs from another directory with the map given by absolute path: '...' is the map's directory."""
    monkeypatch.chdir(tmp_path)
    images = parse_image_map(DATA / "ImageReader3Dots_map.txt", label_dim=4)
    assert images.directory == str(DATA)
    assert images.containers.tolist() == [f"{DATA}/images/simple.zip"] and images.item(0) == "chunk0/black.jpg"
    assert images.paths[int(images.path_ids[1])] == f"{DATA}/images/red.jpg"
    archives = ZipArchives(images)
    archives.check(images)
    assert read_image_bytes(images, 0, archives) == (DATA / "images" / "black.jpg").read_bytes()
    assert read_image_bytes(images, 1) == (DATA / "images" / "red.jpg").read_bytes()


@needs_data
@pytest.mark.parametrize(
    ("case", "file", "line", "column", "text"),
    [
        ("ImageReaderBadMap", "ImageReaderBadMap_map.txt", 3, 17, "expected 2 tab-separated columns"),
        ("ImageReaderBadLabel", "ImageReaderBadLabel_map.txt", 2, 17, "label 'blah' is not an unsigned decimal"),
        ("ImageReaderLabelOutOfRange", "ImageReaderLabelOutOfRange_map.txt", 4, 16, "class id 10 of image"),
    ],
)
def test_conformance_errors(case: str, file: str, line: int, column: int, text: str) -> None:
    """Each map error names the line CNTK names (CNTK counts from 0, cntkio from 1) and its column."""
    expected = image_case(case)
    assert expected["expect"] == "exception"
    cntk_line = int(re.search(r"[Ll]ine (\d+)", expected["expected_error_text"]).group(1))  # type: ignore[union-attr]
    error = fatal(parse_image_map, DATA / file, label_dim=4)
    assert error.line == line == cntk_line + 1 and error.column == column and text in error.reason
    assert error.file == str(DATA / file) and error.sequence_key == line - 1


@needs_data
def test_label_out_of_range_only_with_label_dim() -> None:
    """Fix 20: without a label stream there is no hidden label dimension; class ids are not read at all."""
    images = parse_image_map(DATA / "ImageReaderLabelOutOfRange_map.txt", label_dim=None)
    assert images.labels.tolist() == [-1] * 4 and images.label_dim is None
    assert parse_image_map(DATA / "ImageReaderLabelOutOfRange_map.txt", label_dim=11).labels.tolist() == [0, 1, 2, 10]
    assert "'images/red.jpg' is not below label_dim 4" in str(
        fatal(parse_image_map, DATA / "ImageReaderLabelOutOfRange_map.txt", label_dim=4)
    )


@needs_data
def test_missing_image_is_fatal(monkeypatch: pytest.MonkeyPatch) -> None:
    expected = image_case("ImageReaderMissingImage")["expected_error_text"]
    assert "Cannot open file 'imageDoesNotExists/black.jpg'" in expected
    monkeypatch.chdir(DATA)
    images = parse_image_map("ImageReaderMissingImage_map.txt", label_dim=4)
    error = fatal(read_image_bytes, images, 0)
    assert "cannot open image file 'imageDoesNotExists/black.jpg'" in str(error) and error.line == 1
    assert len(read_image_bytes(images, 1)) > 0


@needs_data
def test_multi_view_map() -> None:
    images = parse_image_map(DATA / "ImageReaderMultiView_map.txt", label_dim=4, multi_view=True)
    assert len(images) == 1 and images.views == 10 and images.num_sequences == 10
    sequences = np.arange(10)
    assert images.rows_of(sequences).tolist() == [0] * 10 and images.views_of(sequences).tolist() == list(range(10))
    assert images.rows_of(7) == 0 and images.views_of(7) == 7
    assert len(images.paths) == 1 and len(keys_of(images.keys)) == 1  # nothing copied per view


@needs_data
def test_base64_simple_matches_the_image_files() -> None:
    index = index_base64(DATA / "Base64ImageReaderSimple_map.txt", label_dim=4)
    assert isinstance(index, Base64Index) and not index.has_keys and len(index) == 4
    assert isinstance(index.keys, NumericKeys) and index.keys.values.dtype == np.int64
    assert keys_of(index.keys) == [0, 1, 2, 3]  # Base64WithWriteIds expects keys 0..3 (line indices)
    assert index.labels.tolist() == [0, 1, 2, 3] and index.lines.tolist() == [1, 2, 3, 4]
    assert [a.dtype for a in (index.payload_offsets, index.payload_lengths, index.offsets)] == [np.int64] * 3
    assert index.lines.dtype == np.int32 and index.payload_offsets.tolist()[0] == 2
    with open(DATA / "Base64ImageReaderSimple_map.txt", "rb") as file:
        blob, offsets, ok = index.decode_rows(file.fileno(), np.arange(4))
        assert ok.tolist() == [1, 1, 1, 1] and blob.dtype == np.uint8 and offsets.dtype == np.int64
        for row, color in enumerate(["black", "blue", "green", "red"]):
            expected = (DATA / "images" / f"{color}.jpg").read_bytes()
            assert bytes(blob[offsets[row] : offsets[row + 1]]) == expected
            offset, length = int(index.payload_offsets[row]), int(index.payload_lengths[row])
            assert decode_base64_image_bytes(file.fileno(), offset, length) == expected


@needs_data
def test_base64_string_ids() -> None:
    index = index_base64(DATA / "Base64WithStringIds_map.txt", label_dim=4)
    assert index.has_keys and isinstance(index.keys, TextKeys)
    assert keys_of(index.keys) == ["image0", "image1", "image2", "image3"] and index.labels.tolist() == [0, 1, 2, 3]


@needs_data
def test_invalid_base64_image_is_an_invalid_sequence() -> None:
    """The case expects the only image to be skipped (maxErrors=4): its base64 decodes, but not as a JPEG."""
    assert image_case("InvalidImageSimpleCompositeAndBase64")["expect"] == "success"
    index = index_base64(DATA / "InvalidBase64ImageReaderSimple_map.txt", label_dim=4)
    assert len(index) == 1 and keys_of(index.keys) == [0]
    with open(DATA / "InvalidBase64ImageReaderSimple_map.txt", "rb") as file:
        data = decode_base64_image_bytes(file.fileno(), int(index.payload_offsets[0]), int(index.payload_lengths[0]))
    assert data is not None
    cv2 = pytest.importorskip("cv2")
    assert cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR) is None


# ------------------------------------------------------------------------------------------ map rules
def test_crlf_and_carriage_returns(tmp_path: Path) -> None:
    images = parse_image_map(write(tmp_path / "m.txt", "a.jpg\t1\r\nb.jpg\t2\r\n"), label_dim=3)
    assert images.paths.tolist() == ["a.jpg", "b.jpg"] and images.labels.tolist() == [1, 2]
    images = parse_image_map(write(tmp_path / "k.txt", "k1\ta.jpg\t1\r\nk2\tb.jpg\t2\r\n"), label_dim=None)
    assert keys_of(images.keys) == ["k1", "k2"] and images.paths.tolist() == ["a.jpg", "b.jpg"]
    # a '\r' that does not end the line stays in its field, as CNTK keeps it
    images = parse_image_map(write(tmp_path / "r.txt", "a.jpg\r\t1\n"), label_dim=None)
    assert images.paths.tolist() == ["a.jpg\r"]


def test_carriage_return_inside_three_columns(tmp_path: Path) -> None:
    images = parse_image_map(write(tmp_path / "r.txt", "k\r\ta.jpg\r\t2\r\n"), label_dim=3)
    assert keys_of(images.keys) == ["k\r"] and images.paths.tolist() == ["a.jpg\r"] and images.labels.tolist() == [2]


def test_blank_lines_skipped_keys_stay_physical(tmp_path: Path) -> None:
    images = parse_image_map(write(tmp_path / "m.txt", "a\t0\n\n \t\r\nb\t1\n\n"), label_dim=2)
    assert keys_of(images.keys) == [0, 3] and images.lines.tolist() == [1, 4] and images.paths.tolist() == ["a", "b"]


def test_bom_and_columns_in_characters(tmp_path: Path) -> None:
    images = parse_image_map(write(tmp_path / "m.txt", b"\xef\xbb\xbfa\t0\n"), label_dim=1)
    assert images.paths.tolist() == ["a"] and images.offsets.tolist() == [3]
    error = fatal(parse_image_map, write(tmp_path / "e.txt", "\ufeffé\tx\n"), label_dim=4)
    assert (error.line, error.column, error.offset) == (1, 3, 6)  # the BOM counts in the offset only


def test_empty_map(tmp_path: Path) -> None:
    images = parse_image_map(write(tmp_path / "m.txt", ""), label_dim=4)
    assert len(images) == 0 and images.columns == 0 and isinstance(images.keys, NumericKeys)
    assert len(parse_image_map(write(tmp_path / "b.txt", "\n\n"), label_dim=None)) == 0


@pytest.mark.parametrize(
    ("text", "line", "column", "key", "reason"),
    [
        ("a.jpg\n", 1, 6, 0, "expected 2 tab-separated columns (path, label) or 3 (key, path, label), found 1"),
        ("k\ta\tb\t1\n", 1, 7, 0, "or 3 (key, path, label), found 4"),
        ("a\t0\nk\tb\t1\n", 2, 5, 1, "expected 2 tab-separated columns (path, label) as on the first line, found 3"),
        ("k\ta\t0\nb\t1\n", 2, 4, "b", "3 tab-separated columns (key, path, label) as on the first line, found 2"),
        ("k\ta\t0\nb\n", 2, 2, None, "found 1"),
        ("\ta\t0\n", 1, 1, "", "empty sequence key"),
        ("k\t\t0\n", 1, 3, "k", "empty image path"),
        ("\t0\n", 1, 1, 0, "empty image path"),
        ("a\t\n", 1, 3, 0, "empty label"),
        ("a\t\r\n", 1, 3, 0, "empty label"),
        ("k\ta\t\n", 1, 5, "k", "empty label"),
        ("a\t-1\n", 1, 3, 0, "label '-1' is not an unsigned decimal integer"),
        ("a\t3x\n", 1, 3, 0, "label '3x'"),
        ("a\t0x1\n", 1, 3, 0, "label '0x1'"),
        ("a\t1.0\n", 1, 3, 0, "label '1.0'"),
        ("a\t1 2\n", 1, 3, 0, "label '1 2'"),
        ("a\t+\n", 1, 3, 0, "label '+'"),
        ("a\t4\n", 1, 3, 0, "class id 4 of image 'a' is not below label_dim 4"),
        ("a\t99999999999999999999999\n", 1, 3, 0, "class id 99999999999999999999999 of image 'a' is not below"),
        ("@/x.jpg\t0\n", 1, 1, 0, "empty zip archive name before '@' in '@/x.jpg'"),
        ("a.zip@\t0\n", 1, 6, 0, "empty zip item name after '@' in 'a.zip@'"),
        ("k\ta.zip@/\t0\n", 1, 8, "k", "empty zip item name after '@' in 'a.zip@/'"),
    ],
)
def test_map_errors(tmp_path: Path, text: str, line: int, column: int, key: Any, reason: str) -> None:
    path = write(tmp_path / "m.txt", text)
    error = fatal(parse_image_map, path, label_dim=4)
    assert reason in error.reason
    assert (error.file, error.line, error.column, error.sequence_key) == (str(path), line, column, key)
    assert str(path) in str(error) and f":{line}:{column}" in str(error)


@pytest.mark.parametrize(("label", "value"), [("0", 0), (" 5", 5), ("+5", 5), ("5 ", 5), ("5\r", 5), ("007", 7)])
def test_label_forms(tmp_path: Path, label: str, value: int) -> None:
    assert parse_image_map(write(tmp_path / "m.txt", f"a\t{label}\n"), label_dim=8).labels.tolist() == [value]


def test_labels_not_read_without_label_dim(tmp_path: Path) -> None:
    images = parse_image_map(write(tmp_path / "m.txt", "a\tblah\nb\t-3\nc\t99999999999999999999999\n"), label_dim=None)
    assert images.labels.tolist() == [-1, -1, -1] and images.labels.dtype == np.int64
    assert "empty label" in fatal(parse_image_map, write(tmp_path / "e.txt", "a\t\n"), label_dim=None).reason


@pytest.mark.parametrize("label_dim", [0, -1, True, 1.5, "4", 2**63])
def test_label_dim_validated(tmp_path: Path, label_dim: Any) -> None:
    path = write(tmp_path / "m.txt", "a\t0\n")
    with pytest.raises(ConfigError, match="label_dim"):
        parse_image_map(path, label_dim=label_dim)
    with pytest.raises(ConfigError, match="label_dim"):
        index_base64(path, label_dim=label_dim)
    assert parse_image_map(path, label_dim=np.int64(1)).label_dim == 1


def test_zip_names(tmp_path: Path) -> None:
    text = "a.zip@/x\\y.jpg\t0\na.zip@xy\t0\na@b@c\t0\nb.zip@//deep/z.png\t0\na.zip@/x\\y.jpg\t0\n"
    images = parse_image_map(write(tmp_path / "m.txt", text), label_dim=1)
    assert images.containers.tolist() == ["a.zip", "a", "b.zip"]
    assert images.container_ids.tolist() == [0, 0, 1, 2, 0]
    assert [images.item(i) for i in range(5)] == ["x/y.jpg", "y", "@c", "/deep/z.png", "x/y.jpg"]
    assert images.path_ids.tolist() == [0, 1, 2, 3, 0] and images.name(0) == "a.zip@x/y.jpg"
    with pytest.raises(ValueError, match="zip archive"):
        images.file_path(0)
    with pytest.raises(ValueError, match="pass ZipArchives"):
        read_image_bytes(images, 0)


def test_three_dots_only_leading(tmp_path: Path) -> None:
    text = ".../img.jpg\t0\nx/.../y.jpg\t0\n.../a.zip@/i.jpg\t0\n....jpg\t0\nz.zip@/.../q\t0\n"
    images = parse_image_map(write(tmp_path / "maps" / "m.txt", text), label_dim=1)
    directory = str(tmp_path / "maps")
    assert images.name(0) == f"{directory}/img.jpg" and images.name(1) == "x/.../y.jpg"
    assert images.containers.tolist() == [f"{directory}/a.zip", "z.zip"] and images.item(2) == "i.jpg"
    assert images.name(3) == f"{directory}.jpg"  # the three dots are replaced as text, like CNTK
    assert images.item(4) == ".../q"


def test_three_dots_relative_map_and_at_in_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "m.txt", ".../img.jpg\t0\n")
    assert parse_image_map("m.txt", label_dim=1).name(0) == "./img.jpg"
    images = parse_image_map(write(tmp_path / "d@x" / "m.txt", ".../img.jpg\t0\n"), label_dim=1)
    assert images.container_ids.tolist() == [-1] and images.name(0) == f"{tmp_path}/d@x/img.jpg"  # split first


def test_paths_resolved_against_parse_time_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path / "a" / "img.bin", b"pixels")
    monkeypatch.chdir(tmp_path / "a")
    images = parse_image_map(write(tmp_path / "m.txt", "img.bin\t0\n"), label_dim=None)
    monkeypatch.chdir(tmp_path)
    assert images.cwd == str(tmp_path / "a") and read_image_bytes(images, 0) == b"pixels"


def test_non_utf8_paths_round_trip(tmp_path: Path) -> None:
    images = parse_image_map(write(tmp_path / "m.txt", b"\xff.jpg\t0\nk\xe9y.zip@/\xfei\t0\n"), label_dim=1)
    assert images.paths[0] == "\udcff.jpg" and os.fsencode(images.paths[0]) == b"\xff.jpg"
    assert images.paths.raw(1) == b"\xfei" and os.fsencode(images.containers[0]) == b"k\xe9y.zip"


def test_small_blocks_and_long_lines(tmp_path: Path) -> None:
    lines = [f"{'d' * (i * 37 % 700)}/img{i}.jpg\t{i % 5}" for i in range(300)]
    path = write(tmp_path / "m.txt", "\n".join(lines))  # no final newline
    small, large = parse_image_map(path, label_dim=5, block=256), parse_image_map(path, label_dim=5)
    assert small.paths.tolist() == large.paths.tolist() == [line.split("\t")[0] for line in lines]
    assert small.labels.tolist() == large.labels.tolist() and small.offsets.tolist() == large.offsets.tolist()


def test_map_from_a_pipe(tmp_path: Path) -> None:
    fifo = tmp_path / "map.fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_bytes(b"a.jpg\t0\nb.jpg\t1\n"))
    writer.start()
    images = parse_image_map(fifo, label_dim=2)
    writer.join()
    assert images.paths.tolist() == ["a.jpg", "b.jpg"] and images.labels.tolist() == [0, 1]


def test_texts() -> None:
    texts = Texts(np.frombuffer(b"abcd", np.uint8), np.array([0, 1, 4], np.int64))
    assert len(texts) == 2 and texts[1] == "bcd" and texts[-1] == "bcd" and list(texts) == ["a", "bcd"]
    with pytest.raises(IndexError):
        texts.raw(2)


# ------------------------------------------------------------------------------------------ zip archives
def make_zip(path: Path, items: dict[str, bytes]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in items.items():
            archive.writestr(name, data)
    return path


def read_in_worker(archives: ZipArchives, item: str) -> tuple[bytes, int]:
    return archives.read(0, item), len(archives._open)


def test_zip_archives_pickle_and_workers(tmp_path: Path) -> None:
    make_zip(tmp_path / "z.zip", {"a/1.jpg": b"one", "a/2.jpg": b"two"})
    images = parse_image_map(write(tmp_path / "m.txt", ".../z.zip@/a/1.jpg\t0\n.../z.zip@/a/2.jpg\t1\n"), label_dim=2)
    archives = ZipArchives(images)
    assert read_image_bytes(images, 1, archives) == b"two" and len(archives._open) == 1
    copy = pickle.loads(pickle.dumps(archives))
    assert copy._open == {} and copy.paths == archives.paths and copy.read(0, "a/1.jpg") == b"one"
    assert set(archives.__getstate__()) == {"map_file", "names", "paths", "_identities"}  # no open handle
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=context) as pool:
        assert pool.submit(read_in_worker, archives, "a/2.jpg").result() == (b"two", 1)
    archives.close()
    assert archives._open == {} and read_image_bytes(images, 0, archives) == b"one"  # opened again


def test_zip_archives_after_fork(tmp_path: Path) -> None:
    make_zip(tmp_path / "z.zip", {"a": b"parent", "b": b"child"})
    images = parse_image_map(write(tmp_path / "m.txt", ".../z.zip@/a\t0\n.../z.zip@/b\t0\n"), label_dim=None)
    archives = ZipArchives(images)
    assert read_image_bytes(images, 0, archives) == b"parent"
    parent_handle = archives.archive(0)
    pid = os.fork()
    if pid == 0:  # the child opens its own handle (the parent's shares its file offset)
        ok = read_image_bytes(images, 1, archives) == b"child" and archives.archive(0) is not parent_handle
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0 and archives.archive(0) is parent_handle


def test_zip_archives_from_threads(tmp_path: Path) -> None:
    items = {f"i{k}.bin": bytes([k]) * (1000 + k) for k in range(40)}
    make_zip(tmp_path / "z.zip", items)
    images = parse_image_map(write(tmp_path / "m.txt", "".join(f"z.zip@/{n}\t0\n" for n in items)), label_dim=None)
    images = dataclasses.replace(images, cwd=str(tmp_path))
    archives = ZipArchives(images)
    results: dict[int, bytes] = {}

    def work(start: int) -> None:
        for row in range(start, len(images), 4):
            results[row] = read_image_bytes(images, row, archives)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [results[row] for row in range(len(images))] == list(items.values()) and len(archives._open) == 1


def test_zip_check_reports_the_first_bad_row(tmp_path: Path) -> None:
    make_zip(tmp_path / "z1.zip", {"a": b"a", "é.jpg": b"e", "dir/x": b"x"})
    make_zip(tmp_path / "z2.zip", {"b": b"b"})
    text = "k1\t.../z2.zip@/b\t0\nk2\t.../z1.zip@/é.jpg\t0\nk3\t.../z2.zip@/gone\t0\nk4\t.../z1.zip@/dir\t0\n"
    images = parse_image_map(write(tmp_path / "m.txt", text), label_dim=1)
    archives = ZipArchives(images)
    error = fatal(archives.check, images)
    assert (error.line, error.sequence_key) == (3, "k3") and "'gone' is not in zip archive" in error.reason
    assert read_image_bytes(images, 1, archives) == b"e"
    good = parse_image_map(
        write(tmp_path / "g.txt", text.replace("/gone", "/b").replace("/dir", "/dir/x")), label_dim=1
    )
    archives.check(good)
    assert [read_image_bytes(good, row, archives) for row in range(4)] == [b"b", b"e", b"b", b"x"]


def test_zip_missing_and_bad_archives(tmp_path: Path) -> None:
    write(tmp_path / "bad.zip", b"not a zip")
    make_zip(tmp_path / "ok.zip", {"x": b"x"})
    text = "k1\t.../ok.zip@/x\t0\nk2\t.../none.zip@/y\t0\nk3\t.../bad.zip@/z\t0\n"
    images = parse_image_map(write(tmp_path / "m.txt", text), label_dim=1)
    archives = ZipArchives(images)
    error = fatal(archives.check, images)
    assert error.line == 2 and error.sequence_key == "k2" and "cannot open zip archive" in error.reason
    assert f"{tmp_path}/none.zip" in error.reason and "No such file" in error.reason
    error = fatal(read_image_bytes, images, 2, archives)
    assert error.line == 3 and error.sequence_key == "k3" and "bad.zip" in error.reason
    assert read_image_bytes(images, 0, archives) == b"x"


# ------------------------------------------------------------------------------------------ base64 files
def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_base64_columns(tmp_path: Path) -> None:
    text = f"3\t{b64(b'abc')}\r\n\n1\t{b64(b'hello')}\n0\t\n"
    path = write(tmp_path / "b.txt", text)
    index = index_base64(path, label_dim=4)
    assert not index.has_keys and keys_of(index.keys) == [0, 2, 3] and index.lines.tolist() == [1, 3, 4]
    assert index.labels.tolist() == [3, 1, 0] and index.offsets.tolist() == [0, 9, 20]
    assert index.payload_offsets.tolist() == [2, 11, 22] and index.payload_lengths.tolist() == [5, 8, 0]  # '\r' kept
    with open(path, "rb") as file:
        fd = file.fileno()
        ranges = zip(index.payload_offsets.tolist(), index.payload_lengths.tolist())
        assert [decode_base64_image_bytes(fd, o, n) for o, n in ranges] == [b"abc", b"hello", b""]
        blob, offsets, ok = index.decode_rows(fd, np.array([2, 0, 1]))
        assert ok.tolist() == [1, 1, 1] and offsets.tolist() == [0, 0, 3, 8] and bytes(blob) == b"abchello"
    assert index.location(1).line == 3 and index.location(1).column == 3 and index.location(1).sequence_key == 2
    assert index_base64(path, label_dim=None).labels.tolist() == [-1, -1, -1]


def test_base64_keys(tmp_path: Path) -> None:
    numeric = index_base64(write(tmp_path / "n.txt", "10\t0\tQQ==\n007\t1\tQQ==\n10\t0\tQQ==\n"), label_dim=2)
    assert numeric.has_keys and isinstance(numeric.keys, NumericKeys) and numeric.keys.values.dtype == np.int64
    assert keys_of(numeric.keys) == [10, 7, 10]  # a repeat that is not on the next line is a duplicate key only
    big = index_base64(write(tmp_path / "u.txt", "18446744073709551615\t0\tQQ==\n1\t0\tQQ==\n"), label_dim=None)
    assert big.keys.values.dtype == np.uint64 and keys_of(big.keys) == [2**64 - 1, 1]  # type: ignore[attr-defined]
    lines = "1\t0\tQQ==\nx1\t0\tQQ==\n18446744073709551616\t0\tQQ==\n"
    text = index_base64(write(tmp_path / "t.txt", lines), label_dim=1)
    assert isinstance(text.keys, TextKeys) and keys_of(text.keys) == ["1", "x1", "18446744073709551616"]


@pytest.mark.parametrize(
    ("text", "line", "column", "key", "reason"),
    [
        ("QQ==\n", 1, 5, 0, "2 tab-separated fields (label, base64 data) or 3 (key, label, base64 data), found 1"),
        ("a\t0\tQQ==\tx\n", 1, 10, 0, "found 4"),  # the first line decides nothing: no key
        ("0\tQQ==\nk\t0\tQQ==\n", 2, 5, 1, "2 tab-separated fields (label, base64 data) as on the first line"),
        ("k\t0\tQQ==\n0\tQQ==\n", 2, 7, "0", "3 tab-separated fields (key, label, base64 data) as on the first"),
        ("\t0\tQQ==\n", 1, 1, "", "empty sequence key"),
        ("k\t\tQQ==\n", 1, 3, "k", "empty label"),
        ("\tQQ==\n", 1, 1, 0, "empty label"),
        ("k\tx\tQQ==\n", 1, 3, "k", "label 'x' is not an unsigned decimal integer"),
        ("5\tQQ==\n", 1, 1, 0, "class id 5 is not below label_dim 4"),
        ("a\t0\tQQ==\na\t1\tQQ==\n", 2, 1, "a", "sequence key 'a' is also the key of the line before (line 1)"),
        ("7\t0\tQQ==\n\n07\t1\tQQ==\n", 3, 1, "07", "is also the key of the line before (line 1)"),
    ],
)
def test_base64_errors(tmp_path: Path, text: str, line: int, column: int, key: Any, reason: str) -> None:
    path = write(tmp_path / "b.txt", text)
    error = fatal(index_base64, path, label_dim=4)
    assert reason in error.reason
    assert (error.file, error.line, error.column, error.sequence_key) == (str(path), line, column, key)


def test_base64_needs_a_regular_file(tmp_path: Path) -> None:
    fifo = tmp_path / "b.fifo"
    os.mkfifo(fifo)
    with pytest.raises(FormatError, match=r"Base64 image file '.*b\.fifo' is a FIFO, not a regular file"):
        index_base64(fifo, label_dim=None)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"", b""),
        (b"QUJD", b"ABC"),
        (b"QUI=", b"AB"),
        (b"QQ==", b"A"),
        (b"QQ==\r", b"A"),
        (b"QQ== \r\x00", b"A"),
        (b"QR==", b"A"),  # non-zero padding bits are accepted, as by Python
        (b"\r", b""),
        (b"QQ=", None),
        (b"QUJ", None),
        (b"Q===", None),
        (b"====", None),
        (b"QQ==QQ==", None),
        (b"QU=D", None),
        (b"QU\rJD", None),
        (b"Q UJD", None),
        (b"QUJD-_==", None),  # the URL-safe alphabet is not base64 here
    ],
)
def test_decode_base64(data: bytes, expected: bytes | None) -> None:
    assert decode_base64(data) == expected


def test_decode_file_ranges(tmp_path: Path) -> None:
    payloads = [b64(bytes([k]) * (k * 3)) for k in range(20)]
    text = "".join(f"0\t{p}\n" for p in payloads)
    path = write(tmp_path / "b.txt", text + "0\tnot base64!\n" + "0\t" + "QUJD" * 500_000 + "\n")
    index = index_base64(path, label_dim=1)
    with open(path, "rb") as file:
        fd = file.fileno()
        for rows in (np.arange(22), np.arange(22)[::-1], np.array([21, 0]), np.array([0, 21]), np.array([], np.int64)):
            blob, offsets, ok = index.decode_rows(fd, rows)
            assert len(offsets) == len(rows) + 1 and len(ok) == len(rows)
            for k, row in enumerate(rows.tolist()):
                expected = decode_base64(path.read_bytes()[index.payload_offsets[row] :][: index.payload_lengths[row]])
                assert ok[k] == (expected is not None)
                assert bytes(blob[offsets[k] : offsets[k + 1]]) == (expected or b"")
        assert decode_base64_image_bytes(fd, int(index.payload_offsets[20]), int(index.payload_lengths[20])) is None
        size = path.stat().st_size
        with pytest.raises(EOFError):
            decode_base64_image_bytes(fd, size - 2, 10)
        with pytest.raises(EOFError):
            decode_base64_batch(fd, np.array([0, size - 2]), np.array([4, 10]))
        with pytest.raises(ValueError, match=">= 0"):
            decode_base64_batch(fd, np.array([-1]), np.array([4]))
        with pytest.raises(ValueError, match="differ"):
            decode_base64_batch(fd, np.array([0, 1]), np.array([4]))
    assert _native.base64_decode_batch is not None


# ------------------------------------------------------------------------------------------ property tests
_text = st.text(st.sampled_from("ab/._-é@\\ 0"), min_size=1, max_size=12)


@st.composite
def map_files(draw: st.DrawFn) -> tuple[bool, list[tuple[str, str, int]], bool, bool]:
    keyed = draw(st.booleans())
    rows = draw(
        st.lists(
            st.tuples(
                st.text(st.sampled_from("kx19é "), min_size=1, max_size=6).filter(lambda k: k.strip() != ""),
                st.one_of(_text, st.builds(lambda p: ".../" + p, _text)),
                st.integers(0, 9),
            ),
            max_size=30,
        )
    )
    return keyed, rows, draw(st.booleans()), draw(st.booleans())


def expected_row(path: str, directory: str) -> tuple[str | None, str]:
    """(archive or None, path or item) by the rules of spec §1, written independently of the parser. CNTK works on
    bytes: the character dropped after '@' is one byte (of a UTF-8 character, possibly)."""
    raw = path.encode()
    at = raw.find(b"@")
    if at < 0:
        return None, directory + path[3:] if path.startswith("...") else path
    archive = raw[:at].decode()
    item = raw[at + 2 :].replace(b"\\", b"/").decode("utf-8", "surrogateescape")
    return (directory + archive[3:] if archive.startswith("...") else archive), item


def valid_zip_path(path: str) -> bool:
    raw = path.encode()
    at = raw.find(b"@")
    return at < 0 or (at > 0 and len(raw) - at > 2)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(map_files())
def test_map_round_trip(tmp_path: Path, drawn: tuple[bool, list[tuple[str, str, int]], bool, bool]) -> None:
    keyed, rows, crlf, blank = drawn
    rows = [row for row in rows if valid_zip_path(row[1])]
    lines: list[str] = []
    for key, path, label in rows:
        lines.append((f"{key}\t" if keyed else "") + f"{path}\t{label}" + ("\r" if crlf else ""))
        if blank:
            lines.append("")
    map_file = write(tmp_path / "maps" / "m.txt", "\n".join(lines) + "\n")
    images = parse_image_map(map_file, label_dim=10)
    assert len(images) == len(rows) and images.labels.tolist() == [label for _, _, label in rows]
    step = 2 if blank else 1
    assert images.lines.tolist() == [1 + step * i for i in range(len(rows))]
    if keyed and rows:
        assert keys_of(images.keys) == [key for key, _, _ in rows]
    else:
        assert keys_of(images.keys) == [step * i for i in range(len(rows))]
    directory = str(tmp_path / "maps")
    for i, (_, path, _) in enumerate(rows):
        archive, name = expected_row(path, directory)
        assert images.paths[int(images.path_ids[i])] == name
        if archive is None:
            assert images.container_ids[i] == -1
        else:
            assert images.containers[int(images.container_ids[i])] == archive
    assert len(set(images.paths.tolist())) == len(images.paths)  # distinct
    unlabelled = parse_image_map(map_file, label_dim=None, block=256)
    assert unlabelled.paths.tolist() == images.paths.tolist() and set(unlabelled.labels.tolist()) <= {-1}


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.sampled_from([b"", b"\r", b" \r", b"\x00"]))
def test_decode_round_trip(data: bytes, tail: bytes) -> None:
    assert decode_base64(base64.b64encode(data) + tail) == data


@settings(max_examples=500, deadline=None)
@given(st.text(st.sampled_from("QUJDabz019+/=\r -_"), max_size=24))
def test_decode_matches_python(text: str) -> None:
    """The same as Python's strict decoding, except that the length must be a multiple of 4 (spec §2: Python lets
    '=' padding run short or long, 'QUJD=' included)."""
    data = text.encode()
    trimmed = data.rstrip(bytes(c for c in range(256) if chr(c) not in base64_alphabet))
    try:
        expected: bytes | None = base64.b64decode(trimmed, validate=True)
    except binascii.Error:
        expected = None
    if len(trimmed) % 4 != 0:
        expected = None
    assert decode_base64(data) == expected


base64_alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/="
