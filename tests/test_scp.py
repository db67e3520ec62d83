"""The native SCP parser behind ``parse_scp`` (spec §1.2): ranges kept as written, error positions (byte offset,
line, column in characters), several files, reads in blocks, duplicates, and a property test against a small
pure-Python reference parser. The rules themselves are also tested in test_htk_io.py."""

from __future__ import annotations

import logging
import os
import re
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cntkio import _native
from cntkio._src.common.errors import FormatError
from cntkio._src.common.keys import TextKeys
from cntkio._src.formats.scp import parse_scp


def write(path: Path, data: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return path


def rows(index: Any) -> list[tuple[str, str, int, int]]:
    return [
        (index.keys[i], index.paths[index.path_ids[i]], int(index.starts[i]), int(index.ends[i]))
        for i in range(len(index))
    ]


# ------------------------------------------------------------------------------------------ behaviour
def test_start_after_end_is_kept_as_written(tmp_path: Path) -> None:
    """start > end is no longer an SCP error: the entry is kept, and the feature reader reports it."""
    index = parse_scp(write(tmp_path / "l.scp", "a.mfc=p[5,4]\nb.mfc=p[0,0]\nc.mfc=q[7,6]\n"))
    assert rows(index) == [("a", "p", 5, 4), ("b", "p", 0, 0), ("c", "q", 7, 6)]
    assert (index.starts > index.ends).tolist() == [True, False, True]


def test_columns_and_types(tmp_path: Path) -> None:
    index = parse_scp(write(tmp_path / "l.scp", "a.mfc=p[0,1]\nb=q\n"))
    assert isinstance(index.keys, TextKeys) and index.keys.blob.dtype == np.uint8
    assert index.keys.offsets.tolist() == [0, 1, 2]
    assert [index.path_ids.dtype, index.starts.dtype, index.ends.dtype] == [np.int32, np.int64, np.int64]
    assert [index.lines.dtype, index.source_ids.dtype] == [np.int32, np.int32]
    assert index.paths == ["p", "q"] and index.sources == [str(tmp_path / "l.scp")]


@pytest.mark.parametrize(
    ("text", "line", "column", "offset", "message"),
    [
        (b"ok.mfc=p[0,1]\n\na.mfc=p[0,1]x\n", 3, 13, 27, "unexpected 'x' after ']'"),
        (b"ok.mfc=p[0,1]\r\na.mfc=p[01]\r\n", 2, 8, 22, "no ','"),
        (b"\xef\xbb\xbfa.mfc=p[0,1", 1, 12, 14, "no ']'"),  # the BOM counts in the offset, not in the column
        ("ü日.mfc=p[0,1]é\n".encode(), 1, 14, 16, "unexpected 'é' after ']'"),  # columns count characters
        (b"\xff\xfe.mfc=p[z,1]\n", 1, 10, 9, "range start 'z' is not"),  # an invalid byte is one column
        (b"a.mfc=p[0,1]\xff\n", 1, 13, 12, r"unexpected '\\udcff' after"),
        (b"a.mfc=p[0,1234567890123456789]\n", 1, 11, 10, "range end '1234567890123456789' is not"),
        (b"a=p\n=q\n", 2, 1, 4, "empty logical name"),
        (b"a=p\n b.mfc=[1,2]\n", 2, 8, 11, "no physical path"),
    ],
)
def test_errors_name_offset_line_and_column(
    tmp_path: Path, text: bytes, line: int, column: int, offset: int, message: str
) -> None:
    path = write(tmp_path / "e.scp", text)
    with pytest.raises(FormatError, match=message) as error:
        parse_scp(path)
    assert (error.value.file, error.value.line, error.value.column, error.value.offset) == (
        str(path),
        line,
        column,
        offset,
    )


def test_an_error_in_a_later_file_names_that_file(tmp_path: Path) -> None:
    one = write(tmp_path / "1.scp", "a.mfc=p[0,1]\n")
    two = write(tmp_path / "2.scp", "b.mfc=p[0,1]\nc.mfc=p[0,1\n")
    with pytest.raises(FormatError, match="no ']'") as error:
        parse_scp([one, two])
    assert (error.value.file, error.value.line) == (str(two), 2)
    # files are read in order: an error stops before a later file is opened
    with pytest.raises(FormatError):
        parse_scp([two, tmp_path / "missing.scp"])
    with pytest.raises(FileNotFoundError):
        parse_scp([one, tmp_path / "missing.scp"])


def test_whitespace_lines_are_skipped_as_python_sees_whitespace(tmp_path: Path) -> None:
    text = " \u00a0\u3000\x0c\x1c\n\t\u2003\r\n\x0cx.mfc=p[0,0]\n a.mfc=q[1,1]\n"
    index = parse_scp(write(tmp_path / "w.scp", text))
    assert rows(index) == [("\x0cx", "p", 0, 0), (" a", "q", 1, 1)]  # only lines starting with ' ' or '\t' skip
    assert index.lines.tolist() == [3, 4]


def test_lines_crossing_read_blocks(tmp_path: Path) -> None:
    lines = [f"k{i}.mfc={'d/' * (i % 300)}f{i % 7}.ark[{i},{i + 9}]" for i in range(400)]
    lines[17] = "long" + "x" * 1000 + ".mfc=p"  # longer than a block of 256 bytes
    path = write(tmp_path / "blocks.scp", "\r\n".join(lines))  # and no final newline

    def columns(block: int) -> dict[str, Any]:
        """The parser's result (a ``_native.ScpParseResult``) as a dict of its properties."""
        parser = _native.ScpParser(None, block)
        with open(path, "rb") as file:
            assert parser.add(file.fileno(), os.fstat(file.fileno()).st_size, b".") is None
        result = parser.finish()
        return {
            name: getattr(result, name) for name, member in vars(type(result)).items() if isinstance(member, property)
        }

    small, large = columns(256), columns(1 << 20)
    assert len(large) == 12  # every property
    for name, value in large.items():
        assert np.array_equal(value, small[name]) if isinstance(value, np.ndarray) else value == small[name], name
    assert len(large["starts"]) == 400 and large["key_offsets"][18] - large["key_offsets"][17] == 1004


def test_the_parser_refuses_bad_arguments_and_reuse(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="block"):
        _native.ScpParser(None, 16)
    parser = _native.ScpParser(b"/x/")
    with pytest.raises(ValueError, match="file descriptor"):
        parser.add(-1, 0, b".")
    path = write(tmp_path / "bad.scp", "a=p[1]\n")
    with open(path, "rb") as file:
        assert parser.add(file.fileno(), 7, b".") is not None
        with pytest.raises(ValueError, match="stopped"):
            parser.add(file.fileno(), 7, b".")
    parser.finish()
    with pytest.raises(ValueError, match="finished"):
        parser.finish()


def test_many_duplicates_over_many_entries(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    rng = np.random.default_rng(3)
    keys = [f"utt{k}" for k in rng.integers(0, 15_000, size=20_000)]  # more entries than one partition holds
    path = write(tmp_path / "d.scp", "".join(f"{k}.mfc=a{i % 13}.ark[{i},{i + 1}]\n" for i, k in enumerate(keys)))
    with caplog.at_level(logging.WARNING, logger="cntkio"):
        index = parse_scp(path)
    counts = Counter(keys)
    kept = [i for i, k in enumerate(keys) if counts[k] == 1]
    repeated = [k for k, c in counts.items() if c > 1]
    assert index.keys.take(np.arange(len(index))) == [keys[i] for i in kept]
    assert index.lines.tolist() == [i + 1 for i in kept] and index.starts.tolist() == kept
    assert index.duplicates is not None
    assert index.duplicates.entries == sum(counts[k] for k in repeated) and index.duplicates.keys == len(repeated)
    assert index.duplicates.first_keys == tuple(repeated[:5])
    assert f"{index.duplicates.entries} SCP entries with {len(repeated)} duplicated key(s) dropped" in caplog.text
    assert str(index.duplicates).endswith(", ...")


def test_empty_and_bom_only_files(tmp_path: Path) -> None:
    index = parse_scp([write(tmp_path / "e.scp", b""), write(tmp_path / "b.scp", b"\xef\xbb\xbf")])
    assert len(index) == 0 and index.paths == [] and index.duplicates is None


# ------------------------------------------------------------------------------------------ property
# A writer of random SCP texts and a reference parser written from the spec with a regular expression.
NAME = st.text(alphabet="abz09_./-üé日", min_size=1, max_size=8)
ENTRY = re.compile(r"(?:(?P<logical>[^=]*)=)?(?P<physical>[^\[]*)(?:\[(?P<start>[0-9]+),(?P<end>[0-9]+)\])?")


@st.composite
def scp_lines(draw: st.DrawFn, pool: list[str]) -> str:
    """One line: an entry (logical=physical[start,end], logical=physical, bare, bare ranged) or a blank line."""
    form = draw(st.sampled_from(["ranged", "ranged", "named", "bare", "bare ranged", "blank"]))
    if form == "blank":
        return draw(st.sampled_from(["", " ", "\t", " \t "]))
    logical = draw(st.sampled_from(pool)) + draw(st.sampled_from([".mfc", ".x.y", "", "."]))
    physical = draw(NAME)
    if draw(st.integers(0, 4)) == 0:  # "..." somewhere
        if draw(st.booleans()):
            logical = "..." + logical
        else:
            physical = draw(st.sampled_from(["...", "x/...", "a...b"])) + physical
    if form.startswith("bare"):
        physical = logical.replace("=", "") or "p"
    elif draw(st.integers(0, 5)) == 0:
        physical += "=x"  # a '=' after the first one belongs to the path
    start, end = draw(st.integers(0, 10**6)), draw(st.integers(0, 10**6))  # start > end too
    text = physical if form.startswith("bare") else f"{logical}={physical}"
    return text + (f"[{start},{end}]" if form.endswith("ranged") else "")


@st.composite
def scp_files(draw: st.DrawFn) -> list[tuple[str, bytes]]:
    pool = draw(st.lists(NAME, min_size=1, max_size=30, unique=True))
    files = []
    for number in range(draw(st.integers(1, 3))):
        lines = draw(st.lists(scp_lines(pool), max_size=25))
        newline = draw(st.sampled_from(["\n", "\r\n"]))
        text = newline.join(lines) + draw(st.sampled_from(["", newline]))
        bom = b"\xef\xbb\xbf" if draw(st.integers(0, 4)) == 0 else b""
        files.append((draw(st.sampled_from(["", "sub/", "sub/deeper/"])) + f"f{number}.scp", bom + text.encode()))
    return files


def reference(files: list[tuple[str, bytes]], prefix: str | None) -> dict[str, Any]:
    prefix = prefix.replace("\\", "/").rstrip("/") + "/" if prefix else None
    keys: list[str] = []
    paths: dict[str, int] = {}
    path_ids, starts, ends, lines, sources = [], [], [], [], []
    for source, (name, data) in enumerate(files):
        directory = os.path.dirname(name) or "."
        for number, line in enumerate(data.decode("utf-8-sig").split("\n"), 1):
            line = line[:-1] if line.endswith("\r") else line
            if line.strip(" \t") == "":
                continue
            match = ENTRY.fullmatch(line)
            assert match is not None, line
            logical, physical = match["logical"], match["physical"]
            if prefix is not None:
                physical = prefix + physical
                logical = physical if logical is None else logical
            else:
                dots = line.find("...")
                in_logical = logical is not None and dots >= 0 and dots < len(logical)
                if dots >= 0 and not in_logical:
                    physical = physical.replace("...", directory, 1)
                if logical is None:
                    logical = physical
                elif in_logical:
                    logical = logical.replace("...", directory, 1)
            keys.append(logical.rsplit(".", 1)[0] if "." in logical else logical)
            path_ids.append(paths.setdefault(physical, len(paths)))
            ranged = match["start"] is not None
            starts.append(int(match["start"]) if ranged else -1)
            ends.append(int(match["end"]) if ranged else -1)
            lines.append(number)
            sources.append(source)
    counts = Counter(keys)
    keep = [counts[k] == 1 for k in keys]
    repeated = [k for k, c in counts.items() if c > 1]

    def kept(values: list[Any]) -> list[Any]:
        return [v for v, k in zip(values, keep) if k]

    return {
        "keys": kept(keys),
        "paths": list(paths),
        "path_ids": kept(path_ids),
        "starts": kept(starts),
        "ends": kept(ends),
        "lines": kept(lines),
        "source_ids": kept(sources),
        "duplicates": (sum(counts[k] for k in repeated), len(repeated), tuple(repeated[:5])) if repeated else None,
    }


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(files=scp_files(), prefix=st.sampled_from([None, "", "/data", "C:\\feats\\", "rel//"]))
def test_property_parse_scp_matches_a_reference_parser(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, files: list[tuple[str, bytes]], prefix: str | None
) -> None:
    directory = tmp_path / f"case{len(list(tmp_path.iterdir()))}"
    directory.mkdir()
    monkeypatch.chdir(directory)  # relative SCP names: "..." becomes their relative directory
    for name, data in files:
        write(directory / name, data)
    index = parse_scp([name for name, _ in files], prefix_path=prefix)
    expected = reference(files, prefix)
    got = {
        "keys": index.keys.take(np.arange(len(index))),
        "paths": index.paths,
        "path_ids": index.path_ids.tolist(),
        "starts": index.starts.tolist(),
        "ends": index.ends.tolist(),
        "lines": index.lines.tolist(),
        "source_ids": index.source_ids.tolist(),
        "duplicates": None
        if index.duplicates is None
        else (index.duplicates.entries, index.duplicates.keys, index.duplicates.first_keys),
    }
    assert got == expected
