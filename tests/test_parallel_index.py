"""The native CTF index of a large file is built in parts at once; the result must be exactly that of
one pass, whatever the content (ids, blank lines, errors, text ids, where the split falls)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cntkio import _native

ALIASES = [("a", False, 2), ("b", True, 9)]


ERROR_COLUMNS = ("offset", "kind", "stream", "sequence", "line", "column", "byte", "record", "end", "key_blob",
                 "key_offsets")  # fmt: skip


def index(path: Path, threads: int, **options: Any) -> dict[str, Any]:
    """The native index (a ``_native.CtfIndexResult``) as a dict of its properties, its errors (a
    ``_native.CtfErrors``) as a dict of columns."""
    fd = os.open(path, os.O_RDONLY)
    try:
        result = _native.ctf_index(
            fd, os.fstat(fd).st_size, options.get("line", False), ALIASES, options.get("defining", -1),
            options.get("count_lines", False), False, options.get("require_all", True), options.get("chunk", 64),
            threads=threads, parallel_min_bytes=0,
        )  # fmt: skip
    finally:
        os.close(fd)
    fields = {
        name: getattr(result, name) for name, member in vars(type(result)).items() if isinstance(member, property)
    }
    fields["errors"] = {column: getattr(result.errors, column) for column in ERROR_COLUMNS}
    return fields


def same(one: dict[str, Any], two: dict[str, Any]) -> None:
    assert one.keys() == two.keys()
    for key, value in one.items():
        if isinstance(value, np.ndarray):
            np.testing.assert_array_equal(value, two[key], err_msg=key)
        elif isinstance(value, dict):
            same(value, two[key])
        else:
            assert value == two[key], key


LINE = st.sampled_from(["|a 1 2", "|b 3:1", "|a 1 2 |b 4:2", "|a 7", "", "|# note", "|b 1:1 |a 0 0", "|a x"])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=st.lists(st.tuples(st.sampled_from(["", "1", "2", "3", "x", "y7", "10"]), LINE), min_size=1, max_size=60),
    mode=st.sampled_from(["numeric", "text", "line"]),
    options=st.fixed_dictionaries(
        {
            "count_lines": st.booleans(),
            "require_all": st.booleans(),
            "chunk": st.integers(1, 200),
            "defining": st.sampled_from([-1, 0]),
        }
    ),
)
def test_parts_index_like_one_pass(tmp_path, rows, mode, options):
    prefix = {"numeric": lambda i: i if i.isdigit() or not i else "", "text": lambda i: i, "line": lambda i: ""}[mode]
    first = {"numeric": "0 ", "text": "k ", "line": ""}[mode]
    text = first + "\n".join(f"{prefix(i)} {line}" if prefix(i) else line for i, line in rows) + "\n"
    path = tmp_path / "data.ctf"
    path.write_text(text)
    one = index(path, 1, line=mode == "line", **options)
    for threads in (2, 3, 5):
        same(one, index(path, threads, line=mode == "line", **options))


def test_a_large_file_is_split_and_indexed_the_same(tmp_path):
    path = tmp_path / "large.ctf"
    rng = np.random.default_rng(3)
    lengths = rng.integers(1, 6, size=3000)
    lines = [f"{i} |a {i} {t} |b {t}:1" for i, n in enumerate(lengths) for t in range(n)]
    path.write_text("\n".join(lines) + "\n")
    one, two = index(path, 1, chunk=5000), index(path, 2, chunk=5000)
    same(one, two)
    assert len(one["offsets"]) == 3000 and len(one["chunk_starts"]) > 3


def test_errors_before_a_fatal_error_in_the_second_half_are_kept(tmp_path):
    """Found by the fuzz target: when the part after the split ended in a fatal error, the errors the first
    part had counted (a sequence missing an input) were lost, so the error reported first depended on whether
    the file was big enough to be indexed in two halves."""
    path = tmp_path / "fatal.ctf"
    valid = b"".join(b"%d |a 5 6 |b 2:1\n" % k for k in range(3, 20))
    path.write_bytes(b"0 |a 1 2\n1 |a 3 4\n2 |b 1:1\n" + valid + b"99999999999999999999 |a 1 2 |b 1:1\n")
    one, two = index(path, 1), index(path, 2)
    assert one["fatal"] and len(one["errors"]["offset"]) == 3
    for key in ("fatal", "fatal_offset", "fatal_line", "errors"):  # the rest is moot after a fatal error
        same({key: one[key]}, {key: two[key]})


def reference_index(text: str, aliases: list[str]) -> tuple[list[int], list[int]]:
    """Numeric-id CTF indexing the plain way: a sequence per run of lines with the same id (an id-less line continues
    it), its length the most lines any configured stream appears on."""
    keys: list[int] = []
    counts: list[dict[str, int]] = []
    for line in text.split("\n"):
        if not line:
            continue
        digits = len(line) - len(line.lstrip("0123456789"))
        if digits and (not keys or int(line[:digits]) != keys[-1]):
            keys.append(int(line[:digits]))
            counts.append(dict.fromkeys(aliases, 0))
        names = {part.split(" ")[0] for part in line[digits:].split("|")[1:]}
        for name in names & set(aliases):
            counts[-1][name] += 1
    return keys, [max(c.values()) for c in counts]


ID = st.sampled_from(["", "", "7", "007", "70", "1234567", "12345678", "1234567890123", "0", "9999999"])
STREAM = st.sampled_from(["a 1", "ab 2", "b 3:1", "long_stream_name 4", "#note", "a"])


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=st.lists(st.tuples(ID, st.lists(STREAM, min_size=1, max_size=3)), min_size=1, max_size=40),
    long_names=st.booleans(),
    newline_at_end=st.booleans(),
    threads=st.sampled_from([1, 2, 3, 5]),
)
def test_numeric_ids_and_stream_names_are_read_exactly(tmp_path, rows, long_names, newline_at_end, threads):
    """The indexer compares an id with the open sequence's as bytes and stream names as words: ids that are equal as
    numbers but not as bytes (7, 007), ids sharing leading digits (7, 70; 1234567, 12345678), names that extend a
    configured one (a, ab), names of more than 8 bytes and names at the very end of the file index as a plain reading
    of the text does."""
    aliases = ["a", "long_stream_name"] if long_names else ["a", "b"]
    rows[0] = ("1", rows[0][1])
    text = "\n".join(f"{i} " * bool(i) + " ".join(f"|{s}" for s in streams) for i, streams in rows)
    text += "\n" if newline_at_end else ""
    path = tmp_path / "ids.ctf"
    path.write_text(text)
    fd = os.open(path, os.O_RDONLY)
    try:
        result = _native.ctf_index(
            fd, os.fstat(fd).st_size, False, [(a, False, 9) for a in aliases], -1, False, False, False, 1 << 20,
            threads=threads, parallel_min_bytes=0,
        )  # fmt: skip
    finally:
        os.close(fd)
    keys, lengths = reference_index(text, aliases)
    kept = [k for k, n in zip(keys, lengths, strict=True) if n > 0]
    assert not result.fatal
    np.testing.assert_array_equal(result.keys, kept)
    np.testing.assert_array_equal(result.lengths, [n for n in lengths if n > 0])
