"""The native MLF parser and state lists (spec/htk-and-mlf.md §2.1, §2.2)."""

from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np
import pytest

from cntkio import _native
from cntkio._src.common.errors import ConfigError, FormatError, MaxErrorsExceeded
from cntkio._src.formats.mlf import MAX_REPORTED_KEYS, MlfIndex, parse_mlf, read_mlf_file_list, read_state_list

STATES = ["s1", "s2", "sil", "a", "b"]

SPEC_EXAMPLE = """#!MLF!#
"*/spk1_utt7.lab"
0 1200000 s1
1200000 2500000 s2
2500000 2600000 sil
.
"other/path/utt8.rec"
0 3 s1
3 5 a
.
"""


def write(tmp_path: Path, text: str | bytes, name: str = "labels.mlf") -> str:
    path = tmp_path / name
    if isinstance(text, str):
        text = text.encode("utf-8")
    path.write_bytes(text)
    return str(path)


def entries(index: MlfIndex) -> dict[str, list[tuple[int, int]]]:
    """key -> [(state, count)]"""
    keys = index.keys.take(np.arange(len(index)))
    out = {}
    for i, key in enumerate(keys):
        states, counts = index.runs(i)
        out[key] = list(zip(states.tolist(), counts.tolist()))
    return out


def test_spec_example(tmp_path):
    index = parse_mlf(write(tmp_path, SPEC_EXAMPLE), STATES, 5)
    assert entries(index) == {"spk1_utt7": [(0, 12), (1, 13), (2, 1)], "other/path/utt8": [(0, 3), (3, 2)]}
    assert index.lengths.tolist() == [26, 5]
    assert index.run_states.dtype == np.uint16 and index.run_counts.dtype == np.uint32
    assert index.run_offsets.tolist() == [0, 3, 5]
    assert index.first_frames().tolist() == [0, 12, 25, 0, 3]
    assert not index.invalid and index.duplicates == 0


def test_units_decided_per_line_and_rounding(tmp_path):
    text = (
        "#!MLF!#\n"
        '"u.lab"\n'
        "0 149999 s1\n"  # 100 ns: 0 .. round(1.49999) = 1
        "1 2 s2\n"  # frames
        "150000 350000 a\n"  # 100 ns: round(1.5) = 2 .. round(3.5) = 4
        "4 100004 b\n"  # 100004 - 4 >= 99999: 100 ns, 0 .. 1: not contiguous (the last ended at 4)
        ".\n"
        '"v.lab"\n'
        "0 99998 s1\n"  # 99998 < 99999: frame indices 0 .. 99998
        "99998 100000 s2\n"  # frames again
        ".\n"
        '"w.lab"\n'
        "0.0 2.9 s1\n"  # frames, truncated
        "2 250000.0 s2\n"  # 100 ns: 0 .. round(2.5) = 3; starts at frame 0, not 2: invalid
        ".\n"
    )
    index = parse_mlf(write(tmp_path, text), STATES, 5, max_errors=None)
    assert entries(index) == {"v": [(0, 99998), (1, 2)]}
    reasons = {e.key: (e.line, e.reason) for e in index.invalid}
    assert reasons["u"][0] == 6 and "not contiguous" in reasons["u"][1]
    assert reasons["w"][0] == 14 and "not contiguous" in reasons["w"][1]


def test_rounding_and_zero_length_lines(tmp_path):
    text = "#!MLF!#\n" + '"u.lab"\n0 149999 s1\n149999 350000 s2\n4 4 a\n350000 449999 b\n.\n'
    index = parse_mlf(write(tmp_path, text), STATES, 5)
    # 0..1, 1..4, a zero-frame line (no run), 4..4 (rounded: 0 frames, no run)
    assert entries(index) == {"u": [(0, 1), (1, 3)]}
    assert index.lengths.tolist() == [4]


def test_crlf_blank_lines_and_concatenated(tmp_path):
    text = SPEC_EXAMPLE.replace("\n", "\r\n\r\n  \r\n") + "#!MLF!#\r\n\r\n" + '"third.lab"  \t\r\n0 4 b\r\n.\r\n'
    index = parse_mlf(write(tmp_path, text), STATES, 5)
    assert entries(index) == {
        "spk1_utt7": [(0, 12), (1, 13), (2, 1)],
        "other/path/utt8": [(0, 3), (3, 2)],
        "third": [(4, 4)],
    }


def test_keys_star_extension_directories_colons(tmp_path):
    text = (
        "#!MLF!#\n"
        '"*/a/b/c.lab"\n0 1 s1\n.\n'
        '"a.b/c"\n0 1 s1\n.\n'  # everything from the last '.' on goes, even across a '/'
        '"C:/data/x.y/utt9.rec"\n0 1 s1\n.\n'
        '"noext"\n0 1 s1\n.\n'
        '"d/e.f.lab"\n0 1 s1\n.\n'
        '"*/x"\n0 1 s1\n.\n'
    )
    index = parse_mlf(write(tmp_path, text), STATES, 5)
    assert list(entries(index)) == ["a/b/c", "a", "C:/data/x.y/utt9", "noext", "d/e.f", "x"]


def test_class_id_form_without_state_list(tmp_path):
    text = '#!MLF!#\n"u.lab"\n0 2 anything 7\n2 5 other 0\n.\n'
    index = parse_mlf(write(tmp_path, text), None, 8)
    assert entries(index) == {"u": [(7, 2), (0, 3)]}
    with pytest.raises(FormatError, match="exceeds the model output dimension 7") as e:
        parse_mlf(write(tmp_path, text), None, 7)
    assert e.value.line == 3 and e.value.column == 14 and e.value.sequence_key == "u"
    with pytest.raises(FormatError, match="exactly 4 columns") as e:
        parse_mlf(write(tmp_path, '#!MLF!#\n"u.lab"\n0 2 x 1 extra\n.\n'), None, 8)
    assert e.value.line == 3
    with pytest.raises(FormatError, match="exactly 4 columns"):
        parse_mlf(write(tmp_path, '#!MLF!#\n"u.lab"\n0 2 x\n.\n'), None, 8)
    with pytest.raises(FormatError, match="not a non-negative integer"):
        parse_mlf(write(tmp_path, '#!MLF!#\n"u.lab"\n0 2 x 1.5\n.\n'), None, 8)


def test_state_list_extra_columns_and_mapping(tmp_path):
    text = '#!MLF!#\n"u.lab"\n0 100000 sil -3.25 SIL\n100000 300000 s2 -1 word extra\n.\n'
    index = parse_mlf(write(tmp_path, text), STATES, 5)
    assert entries(index) == {"u": [(2, 1), (1, 2)]}
    with pytest.raises(FormatError, match="exceeds the model output dimension 2") as e:
        parse_mlf(write(tmp_path, text), STATES, 2)
    assert e.value.line == 3


def test_read_state_list(tmp_path):
    path = tmp_path / "states.list"
    path.write_bytes(b"s1\r\n\r\ns2\rsil\n\n  \nb")
    assert read_state_list(path) == ["s1", "s2", "sil", "b"]
    path.write_bytes(b"s1\ns2\n\ns1\n")
    with pytest.raises(FormatError, match="duplicate state name 's1'") as e:
        read_state_list(path)
    assert e.value.file == str(path) and e.value.line == 4
    path.write_bytes(b"\n \r\n")
    with pytest.raises(FormatError, match="empty") as e:
        read_state_list(path)
    assert e.value.file == str(path)


@pytest.mark.parametrize(
    ("text", "match", "line", "column"),
    [
        ('"u.lab"\n0 1 s1\n.\n', "first non-blank line must be #!MLF!#", 1, 1),
        ("\n\n  \n", "no #!MLF!# line", 4, 1),
        ("", "no #!MLF!# line", 1, 1),
        ('#!MLF!#\n"u.lab"\n0 1  s1\n.\n', "empty column", 3, 5),
        ('#!MLF!#\n"u.lab"\n0 1 s1 \t\n1  2 s1\n.\n', "empty column", 4, 3),
        ('#!MLF!#\n"u.lab"\n5 3 s1\n.\n', "end time 3 is before start time 5", 3, 3),
        ('#!MLF!#\n"u.lab"\n0 x s1\n.\n', "end time 'x' is not a number", 3, 3),
        ('#!MLF!#\n"u.lab"\n-1 3 s1\n.\n', "negative", 3, 1),
        ('#!MLF!#\n"u.lab"\n0 3 zz\n.\n', "state 'zz' is not in the state list", 3, 5),
        ('#!MLF!#\n"u.lab"\n0 3\n.\n', "needs the columns", 3, 1),
        ('#!MLF!#\n"u.lab"\n0 1 s1\n1 2 b\n.\n', "exceeds the model output dimension 4", 4, 5),
    ],
)
def test_fatal_errors_name_file_line_column(tmp_path, text, match, line, column):
    path = write(tmp_path, text)
    with pytest.raises(FormatError, match=match) as e:
        parse_mlf(path, STATES, 4)
    assert e.value.file == path and e.value.line == line and e.value.column == column
    assert f"{path}:{line}:{column}" in str(e.value)
    if text.startswith("#!MLF!#\n") and line >= 3:
        assert e.value.sequence_key == "u" and "sequence u" in str(e.value)


def test_invalid_entries_are_skipped_and_reported(tmp_path):
    text = (
        "#!MLF!#\n"
        '"good1.lab"\n0 2 s1\n.\n'
        "unquoted.lab\n0 1 s1\n.\n"  # header not quoted: skipped
        '"gap.lab"\n0 2 s1\n3 4 s2\n.\n'  # not contiguous
        '"late.lab"\n1 2 s1\n.\n'  # does not start at 0
        '"empty.lab"\n.\n'  # no label lines
        '""\n0 1 s1\n.\n'  # too short
        '"*/.lab"\n0 1 s1\n.\n'  # empty key
        ".\n"  # a stray '.'
        '"unterminated.lab"\n0 1 s1\n'  # the next entry starts before its '.'
        '"good2.lab"\n0 1 s2\n.\n'
        '"truncated.lab"\n0 1 s1\n'  # the file ends (reported on the entry's last line, where it was cut)
    )
    path = write(tmp_path, text)
    index = parse_mlf(path, STATES, 5, max_errors=None)
    assert list(entries(index)) == ["good1", "good2"]
    found = [(e.key, e.line) for e in index.invalid]
    assert found == [
        ("unquoted.lab", 5),
        ("gap", 10),
        ("late", 13),
        ("empty", 15),
        ('""', 17),
        ('"*/.lab"', 20),
        ("", 23),
        ("unterminated", 24),
        ("truncated", 30),
    ]
    assert all(e.file == path for e in index.invalid)
    data = text.encode()
    assert all(e.offset == sum(len(x) + 1 for x in data.split(b"\n")[: e.line - 1]) for e in index.invalid)
    assert "not contiguous" in index.invalid[1].reason and "not 0" in index.invalid[2].reason
    assert "no label lines" in index.invalid[3].reason and "truncated" in index.invalid[-1].reason
    report = index.report()
    assert "9 invalid entries" in report and f"{path}:10" in report


def test_an_entry_is_reported_for_its_first_problem(tmp_path):
    text = '#!MLF!#\n"gap.lab"\n0 2 s1\n3 4 s2\n5 4 s1\n.\n'
    with pytest.raises(FormatError, match="not contiguous") as e:
        parse_mlf(write(tmp_path, text), STATES, 5)
    assert e.value.line == 4
    index = parse_mlf(write(tmp_path, text + '"ok.lab"\n0 1 s1\n.\n'), STATES, 5, max_errors=1)
    assert list(entries(index)) == ["ok"] and len(index.invalid) == 1


def test_dim_limits(tmp_path):
    path = write(tmp_path, SPEC_EXAMPLE)
    with pytest.raises(ConfigError, match="65535"):
        parse_mlf(path, STATES, 65536)
    with pytest.raises(ConfigError):
        parse_mlf(path, STATES, 0)
    assert len(parse_mlf(path, STATES, 65535)) == 2


def test_several_files_and_duplicate_keys(tmp_path):
    first = write(tmp_path, SPEC_EXAMPLE + '"dup.lab"\n0 1 s1\n.\n"dup.x"\n0 9 s2\n.\n', "a.mlf")
    second = write(
        tmp_path, '#!MLF!#\n"*/spk1_utt7.rec"\n0 1 b\n.\n"new.lab"\n0 2 a\n1 2 a\n.\n"z.lab"\n0 3 b\n.\n', "b.mlf"
    )
    index = parse_mlf([first, second], STATES, 5, max_errors=None)
    assert entries(index) == {
        "spk1_utt7": [(0, 12), (1, 13), (2, 1)],
        "other/path/utt8": [(0, 3), (3, 2)],
        "dup": [(0, 1)],
        "z": [(4, 3)],
    }
    assert index.lengths.tolist() == [26, 5, 1, 3]
    assert index.run_offsets.tolist() == [0, 3, 5, 6, 7]
    assert index.duplicates == 2 and index.duplicate_keys == ["dup", "spk1_utt7"]
    assert [(e.file, e.key, e.line) for e in index.invalid] == [(second, "new", 7)]
    assert index.files == [first, second]
    assert "2 duplicate keys" in index.report()
    with pytest.raises(FormatError) as e:
        parse_mlf([first, write(tmp_path, '#!MLF!#\n"q.lab"\n0 1 nope\n.\n', "c.mlf")], STATES, 5)
    assert e.value.file.endswith("c.mlf") and e.value.line == 3


def test_long_lines_cross_blocks(tmp_path):
    extra = " w" * 5000
    text = "#!MLF!#\n" + "".join(f'"u{i}.lab"\n0 1 s1{extra}\n1 3 s2\n.\n' for i in range(50))
    path = write(tmp_path, text)
    fd = os.open(path, os.O_RDONLY)
    try:
        result = _native.mlf_parse(fd, os.fstat(fd).st_size, STATES, 5, 256)
    finally:
        os.close(fd)
    assert result.fatal is None and len(result.lengths) == 50
    assert result.run_counts.tolist() == [1, 2] * 50


def naive_parse(text: str, states: list[str]) -> dict[str, tuple[list[int], list[int]]]:
    """A plain Python reading of well-formed, valid MLF text: key -> (state ids, counts)."""
    ids = {s: i for i, s in enumerate(states)}
    out: dict[str, tuple[list[int], list[int]]] = {}
    key = None
    for line in text.splitlines():
        line = line.rstrip()
        if not line or line == "#!MLF!#":
            continue
        if line.startswith('"'):
            name = line[1:-1].removeprefix("*/")
            key = name[: name.rfind(".")] if "." in name else name
            out[key] = ([], [])
        elif line == ".":
            key = None
        else:
            assert key is not None
            cols = line.split(" ")
            start, end = float(cols[0]), float(cols[1])
            if end - start >= 99999:
                first, last = int(start / 100000 + 0.5), int(end / 100000 + 0.5)
            else:
                first, last = int(start), int(end)
            if last > first:
                out[key][0].append(ids[cols[2]])
                out[key][1].append(last - first)
    return out


def generate(entries_count: int, lines_per_entry: int, states: list[str], seed: int = 7) -> str:
    rng = random.Random(seed)
    parts = ["#!MLF!#\n"]
    for i in range(entries_count):
        parts.append(f'"*/spk{i % 97}/utt{i}.lab"\n')
        t = 0
        for _ in range(lines_per_entry):
            d = rng.randint(1, 30)
            if rng.random() < 0.5:
                parts.append(f"{t * 100000} {(t + d) * 100000} {states[rng.randrange(len(states))]} -{d}.5\n")
            else:
                parts.append(f"{t} {t + d} {states[rng.randrange(len(states))]}\n")
            t += d
        parts.append(".\n")
    return "".join(parts)


def test_large_generated_mlf(tmp_path):
    states = [f"st{i}" for i in range(3000)]
    text = generate(100_000, 10, states)
    path = write(tmp_path, text)
    index = parse_mlf(path, states, len(states))
    assert len(index) == 100_000 and index.num_runs == 1_000_000 and not index.invalid
    expected = naive_parse(text, states)
    keys = index.keys.take(np.arange(len(index)))
    for i in [0, 1, 777, 50_000, 99_999]:
        states_i, counts_i = index.runs(i)
        assert keys[i] == f"spk{i % 97}/utt{i}"
        assert (states_i.tolist(), counts_i.tolist()) == expected[keys[i]]
        assert int(index.lengths[i]) == sum(expected[keys[i]][1])
    assert int(index.lengths.sum()) == int(index.run_counts.sum(dtype=np.int64))


def test_same_state_lines_stay_separate_runs(tmp_path):
    """Consecutive label lines of one state are never merged: each line's first frame is a phone boundary."""
    text = (
        '#!MLF!#\n"u.lab"\n0 2 a\n2 4 a\n4 4 b\n4 7 a\n7 8 s1\n'
        "800000 1000000 s1\n1000000 1149999 s1\n.\n"  # 100 ns: 8..10, 10..11
    )
    index = parse_mlf(write(tmp_path, text), STATES, 5)
    assert entries(index) == {"u": [(3, 2), (3, 2), (3, 3), (0, 1), (0, 2), (0, 1)]}
    assert index.first_frames().tolist() == [0, 2, 4, 7, 8, 10]
    assert index.lengths.tolist() == [11]


def test_zero_frame_entries_are_invalid(tmp_path):
    text = '#!MLF!#\n"a.lab"\n0 0 s1\n0 0 s2\n.\n"b.lab"\n0 1 s1\n.\n"a.lab"\n0 2 s2\n.\n'
    path = write(tmp_path, text)
    index = parse_mlf(path, STATES, 5, max_errors=None)
    # the empty entry is left out before duplicates are looked for: the later "a" is kept, not a duplicate
    assert entries(index) == {"b": [(0, 1)], "a": [(1, 2)]} and index.duplicates == 0
    assert [(e.key, e.line) for e in index.invalid] == [("a", 2)] and "0 frames" in index.invalid[0].reason
    with pytest.raises(FormatError, match="0 frames") as e:
        parse_mlf(path, STATES, 5, max_errors=0)
    assert (e.value.file, e.value.line, e.value.sequence_key, e.value.offset) == (path, 2, "a", 8)


def test_max_errors_counts_invalid_entries_in_file_order(tmp_path):
    first = write(tmp_path, SPEC_EXAMPLE + '"gap.lab"\n0 2 s1\n3 4 s2\n.\n"late.lab"\n1 2 s1\n.\n', "a.mlf")
    second = write(tmp_path, '#!MLF!#\n"none.lab"\n.\n"ok.lab"\n0 1 b\n.\n', "b.mlf")
    with pytest.raises(FormatError, match="not contiguous") as e:
        parse_mlf([first, second], STATES, 5, max_errors=0)
    assert not isinstance(e.value, MaxErrorsExceeded)
    assert (e.value.file, e.value.line, e.value.sequence_key) == (first, 13, "gap")
    assert f"{first}:13" in str(e.value) and "sequence gap" in str(e.value)
    with pytest.raises(MaxErrorsExceeded, match="max_errors=2") as e:
        parse_mlf([first, second], STATES, 5, max_errors=2)
    assert (e.value.file, e.value.line, e.value.sequence_key) == (second, 2, "none")
    assert "no label lines" in e.value.reason
    index = parse_mlf([first, second], STATES, 5, max_errors=3)
    assert [(e.key, e.line) for e in index.invalid] == [("gap", 13), ("late", 16), ("none", 2)]
    assert list(entries(index)) == ["spk1_utt7", "other/path/utt8", "ok"]
    assert parse_mlf([first, second], STATES, 5, max_errors=None).invalid == index.invalid  # None: no limit
    # the budget is spent as soon as the first file is parsed: the second (fatal) one is never read
    fatal = write(tmp_path, '#!MLF!#\n"q.lab"\n0 1 nope\n.\n', "c.mlf")
    with pytest.raises(MaxErrorsExceeded) as e:
        parse_mlf([first, fatal], STATES, 5, max_errors=1)
    assert e.value.sequence_key == "late"
    stray = write(tmp_path, SPEC_EXAMPLE + ".\n", "d.mlf")  # not inside an entry: no utterance to name
    with pytest.raises(FormatError, match="outside an entry") as e:
        parse_mlf(stray, STATES, 5, max_errors=0)
    assert (e.value.file, e.value.line, e.value.sequence_key) == (stray, 11, None)
    for bad in (-1, 1.5, True, "2"):
        with pytest.raises(ConfigError, match="max_errors"):
            parse_mlf(first, STATES, 5, max_errors=bad)  # type: ignore[arg-type]


def expected_cut(prefix: str) -> tuple[str, int] | None:
    """(key, 1-based line) of the entry a cut MLF ends inside, or None when it ends between entries."""
    lines = prefix.split("\n")
    key, last = None, 0
    for number, line in enumerate(lines, start=1):
        text = line.rstrip("\r")
        if not text.strip():
            continue
        if key is None and text.startswith('"'):
            if number == len(lines) and (len(text) < 2 or not text.endswith('"')):
                return text, number  # the header itself is cut: the key is the header text
            name = text[1:-1].removeprefix("*/")
            key, last = name[: name.rfind(".")], number
        elif key is not None and text == ".":
            key = None
        elif key is not None:
            last = number
    return None if key is None else (key, last)


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_every_truncation_names_file_line_and_utterance(tmp_path, newline):
    """An MLF cut at any byte (inside a header, between lines, in the middle of a label line) either ends
    between entries or gives one invalid entry, reported on the line where the file ends, with its key."""
    text = SPEC_EXAMPLE.replace("\n", newline)
    path = str(tmp_path / "cut.mlf")
    start = len("#!MLF!#" + newline)
    for cut in range(start, len(text) + 1):
        prefix = text[:cut]
        Path(path).write_bytes(prefix.encode())
        expected = expected_cut(prefix)
        if expected is None:
            assert not parse_mlf(path, STATES, 5, max_errors=0).invalid, prefix
            continue
        with pytest.raises(FormatError) as e:
            parse_mlf(path, STATES, 5, max_errors=0)
        assert (e.value.file, e.value.sequence_key, e.value.line) == (path, *expected), (prefix, str(e.value))
        assert "truncated" in e.value.reason or "cut by the end of the file" in e.value.reason, str(e.value)
        assert f"{path}:{expected[1]}" in str(e.value)
        index = parse_mlf(path, STATES, 5, max_errors=1)  # the complete entries before the cut are kept
        assert len(index.invalid) == 1 and len(index) == prefix.count(newline + "." + newline)


def test_cut_in_the_middle_of_a_label_line_explains_itself(tmp_path):
    path = write(tmp_path, SPEC_EXAMPLE + '"last.lab"\n0 3 s1\n3 5')
    with pytest.raises(FormatError) as e:
        parse_mlf(path, STATES, 5, max_errors=0)
    assert (e.value.line, e.value.sequence_key) == (13, "last")
    assert "file ends in the middle of label line 13" in str(e.value) and "starts on line 11" in str(e.value)
    path = write(tmp_path, SPEC_EXAMPLE + '"last.lab"\n0 3 s1\n3 5 s')  # a state name cut short
    with pytest.raises(FormatError, match="'s' is not in the state list") as e:
        parse_mlf(path, STATES, 5, max_errors=0)
    assert (e.value.line, e.value.sequence_key) == (13, "last") and "truncated" in e.value.reason
    path = write(tmp_path, SPEC_EXAMPLE + '"last.lab"\n0 3 s1\n')  # cut after a complete line
    with pytest.raises(FormatError, match=r"ends after label line 12, before the entry's '\.' line") as e:
        parse_mlf(path, STATES, 5, max_errors=0)
    assert (e.value.line, e.value.sequence_key) == (12, "last")
    # the same malformed line when the file goes on after it: an invalid entry, not truncated
    with pytest.raises(FormatError, match="needs the columns") as e:
        parse_mlf(write(tmp_path, SPEC_EXAMPLE + '"last.lab"\n0 3 s1\n3 5\n.\n'), STATES, 5, max_errors=0)
    assert e.value.line == 13 and e.value.column == 1 and "truncated" not in e.value.reason
    # a file whose last '.' has no end of line is complete
    assert len(parse_mlf(write(tmp_path, SPEC_EXAMPLE.rstrip("\n")), STATES, 5, max_errors=0)) == 2


def test_duplicates_first_kept_count_and_first_keys(tmp_path):
    """Duplicates are found natively; the first entry of a key is kept, every later one dropped, and the
    first MAX_REPORTED_KEYS dropped keys are listed in order."""
    first = "#!MLF!#\n" + "".join(f'"k{i}.lab"\n0 {i + 1} s1\n.\n' for i in range(30))
    second = "#!MLF!#\n" + "".join(f'"*/k{i}.rec"\n0 2 b\n.\n' for i in reversed(range(0, 30, 2)))
    second += '"new.lab"\n0 1 a\n.\n"k29.lab"\n0 4 a\n.\n'
    index = parse_mlf([write(tmp_path, first, "a.mlf"), write(tmp_path, second, "b.mlf")], STATES, 5)
    assert index.duplicates == 16
    assert index.duplicate_keys == [f"k{i}" for i in reversed(range(10, 30, 2))][:MAX_REPORTED_KEYS]
    assert len(index.duplicate_keys) == MAX_REPORTED_KEYS
    got = entries(index)
    assert list(got) == [f"k{i}" for i in range(30)] + ["new"]
    assert all(got[f"k{i}"] == [(0, i + 1)] for i in range(30))  # the first file's runs
    assert index.lengths.tolist() == [*range(1, 31), 1]
    assert index.run_offsets.tolist() == list(range(32)) and index.num_runs == 31
    assert "16 duplicate keys" in index.report()


def test_read_mlf_file_list(tmp_path, monkeypatch):
    a = write(tmp_path, SPEC_EXAMPLE, "a.mlf")
    (tmp_path / "sub dir").mkdir()
    write(tmp_path / "sub dir", '#!MLF!#\n"x.lab"\n0 2 b\n.\n', "b:1.mlf")
    listing = tmp_path / "lists" / "mlf.list"
    listing.parent.mkdir()
    listing.write_bytes(f"\ufeff{a}\r\n\r\n   \r\n  sub dir/b:1.mlf \t\r\n\n".encode())
    paths = read_mlf_file_list(listing)
    assert paths == [a, "sub dir/b:1.mlf"]  # relative paths as written (not resolved against the list's dir)
    monkeypatch.chdir(tmp_path)
    assert list(entries(parse_mlf(paths, STATES, 5))) == ["spk1_utt7", "other/path/utt8", "x"]
    listing.write_bytes(b"one.mlf\rtwo.mlf")  # a lone \r ends a line too; no end of line at the end
    assert read_mlf_file_list(str(listing)) == ["one.mlf", "two.mlf"]
    listing.write_bytes(b"\r\n \n")
    with pytest.raises(ConfigError, match="names no MLF file"):
        read_mlf_file_list(listing)
    listing.write_bytes(b"ok.mlf\nbad\xff.mlf\n")
    with pytest.raises(FormatError, match="not UTF-8") as e:
        read_mlf_file_list(listing)
    assert e.value.line == 2
    with pytest.raises(FileNotFoundError):
        read_mlf_file_list(tmp_path / "missing.list")


LONG_UTF8 = "é" * 45  # the parser quotes at most 80 bytes of a field: it cuts this one inside a character


@pytest.mark.parametrize(
    ("text", "line", "column", "message"),
    [
        (b'#!MLF!#\n"u.lab"\n0 1 s\xe91\n.\n', 3, 5, r"state 's\\xe91' is not in the state list \(the line is not UTF"),
        (b'#!ML\xe9F!#\n"u.lab"\n0 1 s1\n.\n', 1, 1, r"must be #!MLF!#, found '#!ML\\xe9F!#' \(the line is not UTF-8"),
        (b'#!MLF!#\n"u.lab"\n0 x\xe9 s1\n.\n', 3, 3, r"end time 'x\\xe9' is not a number \(the line is not UTF-8"),
        (
            f'#!MLF!#\n"u.lab"\n0 1 s1 {LONG_UTF8}\n1 x{LONG_UTF8} s1\n.\n'.encode(),
            4,
            3,
            rf"^[^(]*\(byte offset \d+\): end time 'x{'é' * 39}\.\.\.' is not a number$",
        ),
    ],
    ids=["latin-1 state", "latin-1 header", "latin-1 time", "UTF-8 cut by the parser"],
)
def test_text_the_parser_cannot_quote_is_a_format_error_at_its_line(
    tmp_path: Path, text: bytes, line: int, column: int, message: str
) -> None:
    # The native parser's message quoted bytes that are not UTF-8: a bare UnicodeDecodeError, no file, no line.
    path = write(tmp_path, text)
    for max_errors in (0, None):
        with pytest.raises(FormatError, match=message) as error:
            parse_mlf(path, STATES, 5, max_errors=max_errors)
        assert (error.value.file, error.value.line, error.value.column) == (path, line, column)


def test_an_mlf_that_is_not_utf8_through_the_deserializer(tmp_path: Path) -> None:
    from cntkio import HTKMLFDeserializer, StreamDef, StreamDefs

    path = write(tmp_path, b'#!MLF!#\n"caf\xe9.lab"\n0 1 a\n.\n"u.lab"\n0 1 \xe9t\xe9\n.\n')
    states = write(tmp_path, "\n".join(STATES), "states.list")
    with pytest.raises(FormatError, match=r"state '\\xe9t\\xe9' is not in the state list") as error:
        HTKMLFDeserializer(states, StreamDefs(l=StreamDef(shape=len(STATES), mlf=path)), max_errors=5)
    assert (error.value.file, error.value.line) == (path, 6)
