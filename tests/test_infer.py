"""Stream inference (cntkio.infer): the vectorised scan against a line-by-line reference."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cntkio._src.formats.ctf_infer import (
    FIRST_SEEN,
    MAX_ALIAS_BYTES,
    MAX_SPARSE_DIM,
    Inference,
    InferredStream,
    Place,
    infer,
    infer_streams,
)

_TOKEN = re.compile(rb"[^\x00-\x20]+")


def reference(data: bytes) -> list[InferredStream]:
    """The inference rules written the slow, obvious way."""
    tallies: dict[bytes, list[int]] = {}  # samples, sparse, dense, max values, max index
    for line in data.split(b"\n"):
        for field in line.split(b"|")[1:]:
            name = _TOKEN.match(field)
            if name is None or name.start() != 0 or name.group().startswith(b"#"):
                continue
            alias = name.group()
            if len(alias) > MAX_ALIAS_BYTES:
                continue
            tokens = _TOKEN.findall(field[len(alias) :])
            tally = tallies.setdefault(alias, [0, 0, 0, 0, -1])
            sparse = any(b":" in t for t in tokens)
            tally[0] += 1
            tally[1] += sparse
            tally[2] += not sparse and bool(tokens)
            tally[3] = max(tally[3], len(tokens))
            for token in tokens:
                index = re.match(rb"([0-9]{1,10}):", token)
                if index and int(index.group(1)) < MAX_SPARSE_DIM:
                    tally[4] = max(tally[4], int(index.group(1)))
    streams = []
    for alias, (samples, sparse, dense, max_values, max_index) in tallies.items():
        is_sparse = sparse > 0 and sparse >= dense
        dim = max_index + 1 if is_sparse else max_values
        streams.append(InferredStream(alias.decode("utf-8", "backslashreplace"), is_sparse, max(dim, 1), samples))
    return streams


def infer_bytes(data: bytes, **kwargs) -> list[InferredStream]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "data.ctf"
        path.write_bytes(data)
        return infer_streams(path, **kwargs)


def inference_of(data: bytes, **kwargs) -> Inference:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "data.ctf"
        path.write_bytes(data)
        return infer(path, **kwargs)


def reference_places(data: bytes, alias: bytes) -> list[Place]:
    """Where the first FIRST_SEEN fields of ``alias`` are, found line by line."""
    places = []
    offset = 0
    for number, line in enumerate(data.split(b"\n"), start=1):
        for match in re.finditer(rb"\|([^\x00-\x20|]*)", line):
            if match.group(1) == alias and len(places) < FIRST_SEEN:
                column = len(line[: match.start()].decode("utf-8", "replace")) + 1
                places.append(Place(offset + match.start(), number, column))
        offset += len(line) + 1
    return places


def test_dense_and_sparse_streams():
    data = b"0 |x 1 2 3 |y 4:1\n0 |x 4 5\t6 |y\n1 |x 7 |y 0:1 9:2.5\n"
    assert infer_bytes(data) == [InferredStream("x", False, 3, 3), InferredStream("y", True, 10, 3)]


def test_comments_are_not_streams():
    data = b"|a 1 2 |# comment 99:1 x y z |b 1\n|#only a comment\n"
    assert infer_bytes(data) == [InferredStream("a", False, 2, 1), InferredStream("b", False, 1, 1)]


def test_names_and_odd_bytes():
    long_name = b"n" * 20
    data = b"|" + long_name + b" 1 2\r\n| 5\n|a:b 3:1\n|\xce\xa9 1\n|" + b"z" * (MAX_ALIAS_BYTES + 1) + b" 1\n"
    assert infer_bytes(data) == [
        InferredStream(long_name.decode(), False, 2, 1),
        InferredStream("a:b", True, 4, 1),
        InferredStream("\u03a9", False, 1, 1),
    ]


def test_bad_sparse_indices_do_not_count():
    data = b"|s 3:1 x:1 -7:1 1:2:3 12345678901:1 99999999999999:1 0007:1 :1\n"
    assert infer_bytes(data) == [InferredStream("s", True, 8, 1)]


def test_stream_kind_follows_the_majority():
    data = b"|s 1:1\n|s 2:1\n|s 5\n|s\n"  # two sparse samples, one dense, one empty
    assert infer_bytes(data) == [InferredStream("s", True, 3, 4)]


def test_last_line_without_newline_and_long_lines():
    data = b"|a 1\n|a " + b"1 " * 5000 + b"\n|b 7:1"
    expected = [InferredStream("a", False, 5000, 2), InferredStream("b", True, 8, 1)]
    assert infer_bytes(data) == expected
    assert infer_bytes(data, block_size=16) == expected


def test_order_of_first_appearance_across_blocks():
    data = b"|b 1\n" * 100 + b"|a 1\n"
    assert [s.alias for s in inference_of(data, block_size=64).inputs] == ["b", "a"]


def test_an_input_seen_in_a_handful_of_samples_is_a_likely_typo_not_a_stream():
    data = b"".join(b"%d |x 1 |y %d:1\n" % (i, i % 7) for i in range(1000))
    data = data.replace(b"17 |x 1 |y", b"17 |x 1 |z", 1).replace(b"900 |x 1 |y", b"900 |x 1 |z", 1)
    found = inference_of(data, block_size=4096)
    assert [s.alias for s in found.inputs] == ["x", "y", "z"]
    assert [s.alias for s in found.streams] == ["x", "y"] == [s.alias for s in infer_bytes(data)]
    (typo,) = found.rare
    assert (typo.alias, typo.samples, [p.line for p in typo.first_seen]) == ("z", 2, [18, 901])
    assert found.similar(typo) == "y"  # the sparse stream whose dimension holds its index, not the dense x
    assert found.similar(typo, [("features", False, 1), ("labels", True, 7)]) is None  # no name close enough
    small = b"0 |a 1 |b 1\n1 |a 2\n"  # 'b' in one of two lines: a stream (maybe optional), not a typo
    assert [s.alias for s in inference_of(small).streams] == ["a", "b"]


def test_places_of_the_first_fields_across_blocks():
    data = "".join(f"{i}\t|\u03a9 {i} |a 1\n" for i in range(30)).encode() + b"|late 3\n"
    for block_size in (16, 64, 1 << 20):
        found = {s.alias: s.first_seen for s in inference_of(data, block_size=block_size).inputs}
        assert found == {alias: tuple(reference_places(data, alias.encode())) for alias in ("\u03a9", "a", "late")}
    assert found["late"] == (Place(len(data) - 8, 31, 1),) and found["a"][1].column == 8  # characters, not bytes


def test_progress_reaches_the_file_size():
    calls = []
    infer_bytes(b"|a 1\n" * 1000, block_size=256, progress=lambda done, total: calls.append((done, total)))
    assert calls[-1] == (5000, 5000)
    assert [done for done, _ in calls] == sorted(done for done, _ in calls)


def test_no_streams():
    assert infer_bytes(b"no inputs here\n\n") == []
    assert infer_bytes(b"") == []


ALIASES = st.sampled_from([b"a", b"b", b"feat", b"x:y", b"\xce\xa9", b"#c", b"long_alias_name", b""])
TOKENS = st.sampled_from([b"1", b"-2.5", b"3:1", b"0:0.5", b"12:3", b"x:1", b"7:", b"::", b"abc", b"1e5", b"99999:1"])
SEPARATORS = st.sampled_from([b" ", b"\t", b"  ", b" \r"])


@st.composite
def ctf_text(draw) -> bytes:
    lines = []
    for _ in range(draw(st.integers(0, 12))):
        line = draw(st.sampled_from([b"", b"0 ", b"17", b"id ", b" "]))
        for _ in range(draw(st.integers(0, 3))):
            tokens = draw(st.lists(TOKENS, max_size=4))
            sep = draw(SEPARATORS)
            line += b"|" + draw(ALIASES) + b"".join(sep + t for t in tokens) + draw(st.sampled_from([b"", b" "]))
        lines.append(line + draw(st.sampled_from([b"", b"\r"])))
    return b"\n".join(lines) + draw(st.sampled_from([b"", b"\n"]))


@settings(max_examples=200, deadline=None)
@given(ctf_text(), st.sampled_from([1, 7, 64, 1 << 20]))
def test_matches_the_reference(data, block_size):
    expected = sorted(reference(data), key=lambda s: data.find(b"|" + s.alias.encode()))
    found = inference_of(data, block_size=block_size)
    assert found.inputs == expected
    for s in found.inputs:
        assert list(s.first_seen) == reference_places(data, s.alias.encode())


@pytest.mark.parametrize(
    ("text", "sequences"),
    [("abc", 1), ("x", 1), ("\n\n", 0), ("0|a 1", 1), ("0 |a 1\n0 |a 2\n1 |a 3", 2), ("|a 1\n|a 2\n", 2)],
)
def test_sequences_are_counted_by_their_ids(tmp_path: Path, text: str, sequences: int) -> None:
    """Sequence starts (an id other than the line before's, or no id) in any block, also a last line with no blank,
    '|' or newline (an IndexError before: CI's hypothesis draw)."""
    path = tmp_path / "data.ctf"
    path.write_text(text)
    assert infer(path, block_size=7).sequences == sequences
