"""Bad CTF input: structured FormatErrors, the max_errors budget, logging, and crash safety."""

from __future__ import annotations

import logging
import random
import subprocess
import sys
import textwrap

import pytest

from cntkio import ConfigError, CTFDeserializer, FormatError, MaxErrorsExceeded, MinibatchSource, StreamDef, StreamDefs

AB = StreamDefs(a=StreamDef(field="a", shape=2), b=StreamDef(field="b", shape=5, is_sparse=True))


def first_error(ctf, content: str | bytes, streams=AB, **options) -> FormatError:
    """The error raised (at construction or when parsing) with the default max_errors=0."""
    with pytest.raises(FormatError) as info:
        deserializer = ctf.deserializer(content, streams, **options)
        for chunk_id in range(deserializer.num_chunks()):
            deserializer.get_chunk(chunk_id)
    return info.value


def fields(error: FormatError) -> tuple:
    key = (
        error.sequence_key
        if error.sequence_key is None or isinstance(error.sequence_key, str)
        else int(error.sequence_key)
    )
    return error.line, error.column, error.offset, key, error.input


# ------------------------------------------------------------------------------------- locations
# (content, (line, column, offset, sequence key, input), reason fragment)
LOCATED = [
    ("1 |a 1 2 |b\n1 |a 3 x\n", (2, 8, 19, 1, "a"), "malformed number: unexpected 'x'"),
    ("|a 1 2 |b\n|a 1 2 3 |b\n", (2, 1, 10, 1, "a"), "more than dim=2 values"),
    ("|a 1 2 |b 9:1\n", (1, 11, 10, 0, "b"), "sparse index out of range"),
    ("|a 1 2 |b x:1\n", (1, 11, 10, 0, "b"), "non-negative integer sparse index"),
    ("|a 1 2 |b -1:1\n", (1, 11, 10, 0, "b"), "non-negative integer sparse index"),
    ("|a 1 2 |b 3 1\n", (1, 12, 11, 0, "b"), "expected ':'"),
    ("|a 1 2 |b 99999999999999999999999:1\n", (1, 11, 10, 0, "b"), "non-negative integer sparse index"),
    ("|a 1 2 |b 3:1e999\n", (1, 13, 12, 0, "b"), "out of range"),
    ("|a 1 2 |b |a 3 4\n", (1, 11, 10, 0, "a"), "more than once on the same line"),
    ("1 |a 1 2 |b\n1 | a 1\n", (2, 4, 15, 1, None), "must be followed by an input name"),
    ("1 |a 1 2 |b\n1 x|a 1 2\n", (2, 3, 14, 1, None), "unexpected 'x'"),
    ("abc |a 1 2 |b\nabc |a 1 2x\n", (2, 11, 24, "abc", "a"), "malformed number"),
    ("1 |a 1 2 |b\r\n1 |b 1:1\r\n2 |b |a 7 -\r\n", (3, 12, 34, 2, "a"), "malformed number: unexpected '\\r'"),
    (b"\xef\xbb\xbf|a 1 2 |b\n|a 3 4 |b 1:y\n", (2, 13, 25, 1, "b"), "malformed number: unexpected 'y'"),
    ("\n\n|a 1 2 |b\n\n|a 5 |b 5:0\n", (5, 9, 21, 4, "b"), "sparse index out of range"),
]


@pytest.mark.parametrize(("content", "where", "reason"), LOCATED)
def test_error_names_file_line_column_offset_key_and_input(ctf, content, where, reason):
    error = first_error(ctf, content)
    assert isinstance(error, MaxErrorsExceeded)
    assert error.file == str(ctf.directory / "data0.ctf")
    assert fields(error) == where
    assert reason in error.reason
    raw = content if isinstance(content, bytes) else content.encode()
    assert (
        raw[error.offset : error.offset + 1]
        == raw.splitlines(keepends=True)[error.line - 1][error.column - 1 : error.column]
    )
    assert f"{error.file}:{error.line}:{error.column}" in str(error)
    assert f"byte offset {error.offset}" in str(error)


def test_missing_input_is_reported_at_construction(ctf):
    error = first_error(ctf, "1 |a 1 2 |b\n2 |a 3 4\n")
    assert fields(error) == (2, 1, 12, 2, "b")
    assert "missing" in error.reason


def test_error_in_a_later_chunk_has_the_right_line(ctf):
    lines = [f"{i} |a {i} 0 |b\n" for i in range(50)]
    lines[37] = "37 |a 1 oops |b\n"
    text = "".join(lines)
    error = first_error(ctf, text, chunk_size_in_bytes=64)
    assert fields(error) == (38, 9, text.index("oops"), 37, "a")


def test_error_deep_in_a_multi_line_sequence_of_a_later_chunk(ctf):
    lines = [f"{i // 3} |a {i} 0 |b\n" for i in range(60)]  # sequences of 3 lines
    lines[40] = "13 |b\t\t|a 1 2 3\n"  # third line of sequence 13 (file line 41)
    text = "".join(lines)
    error = first_error(ctf, text, chunk_size_in_bytes=100)
    assert fields(error) == (41, 8, text.index("|a 1 2 3"), 13, "a")
    assert "more than dim=2 values" in error.reason


def test_format_error_is_a_value_error_with_a_location():
    assert issubclass(FormatError, ValueError)
    assert issubclass(MaxErrorsExceeded, FormatError)


def test_max_errors_exceeded_names_the_budget(ctf):
    error = first_error(ctf, "|a 1 2 |b 9:1\n")
    assert isinstance(error, MaxErrorsExceeded)
    assert error.max_errors == 0
    assert "Reached the maximum number of allowed errors" in str(error)
    assert error.file in str(error)


# ------------------------------------------------------------------------------------- fatal
@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"", "empty"),
        (b" \n\t\r\n  \n", "whitespace"),
        (b"\xef\xbb\xbf", "whitespace"),
        ("|a 1 2 |b\n".encode("utf-16"), "UTF-16"),
        (b"\xfe\xff\x00|\x00a", "UTF-16"),
        (b"99999999999999999999 |a 1 2 |b\n", "64-bit"),
        (b"|zz 1\n|yy 2\n", "no sequence"),
    ],
)
def test_fatal_errors_ignore_max_errors(ctf, content, reason):
    with pytest.raises(FormatError, match=reason) as info:
        ctf.deserializer(content, AB, max_errors=10**6)
    assert not isinstance(info.value, MaxErrorsExceeded)
    assert info.value.file.endswith(".ctf")


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        CTFDeserializer(tmp_path / "nope.ctf", AB)


def test_negative_max_errors_is_a_config_error(ctf):
    with pytest.raises(ConfigError):
        ctf.deserializer("|a 1 2 |b\n", AB, max_errors=-1)


# ------------------------------------------------------------------------------------- budget
# Three bad records, each costing exactly one error (the row keeps a valid sample).
THREE_BAD = "|a 1 2 |b 0:1\n|a 3 4 |b 9:1\n|a 5 6 |b 1:1\n|a 7 x |b 2:2\n|a 8 9 |b 3:3 3\n"


def test_max_errors_tolerates_exactly_n_errors(ctf):
    with pytest.raises(MaxErrorsExceeded) as info:
        ctf.read(THREE_BAD, AB, max_errors=2)
    assert info.value.line == 5
    parsed = ctf.read(THREE_BAD, AB, max_errors=3)
    assert parsed.deserializer.errors.count == 3
    assert [e.line for e in parsed.deserializer.errors.errors] == [2, 4, 5]


def test_bad_samples_are_skipped_and_the_rest_delivered(ctf):
    parsed = ctf.read(THREE_BAD, AB, max_errors=3)
    assert parsed.dense("a") == [[[1, 2]], [[3, 4]], [[5, 6]], [], [[8, 9]]]
    assert parsed.sparse("b") == [[[(0, 1.0)]], [], [[(1, 1.0)]], [[(2, 2.0)]], []]
    assert parsed.lengths == [1, 1, 1, 1, 1]


@pytest.mark.parametrize(
    ("row", "a", "b", "reason"),
    [
        ("|a 1 2 3 |b 1:1", [], [[(1, 1.0)]], "more than dim=2 values"),
        ("|a 1 x |b 1:1", [], [[(1, 1.0)]], "malformed number"),
        ("|a 1 2 |b 1:1 5:1", [[1, 2]], [], "out of range"),
        ("|a 1 2 |b 1 :1", [[1, 2]], [], "expected ':'"),
        ("|a 1 2 |b 1: 1", [[1, 2]], [], "malformed number"),
        ("|a 1 2 |b +1:1", [[1, 2]], [], "sparse index"),
        ("|a 1 2 |b 1.0:1", [[1, 2]], [], "expected ':'"),
        ("|a 1 2 |b 1:1 |a 3 4", [[1, 2]], [[(1, 1.0)]], "more than once"),
        ("|a 1 2 |b 1:1 junk", [[1, 2]], [], "sparse index"),
    ],
)
def test_bad_sample_is_dropped_and_the_rest_of_the_row_kept(ctf, row, a, b, reason):
    parsed = ctf.read(f"1 |a 9 9 |b\n2 {row}\n", AB, max_errors=1)
    assert parsed.dense("a") == [[[9, 9]], a]
    assert parsed.sparse("b") == [[[]], b]
    assert [reason in e.reason for e in parsed.deserializer.errors.errors] == [True]


def test_row_without_a_valid_sample_costs_a_second_error(ctf):
    # spec §5.4: one error for the sample, one for the row
    parsed = ctf.read("1 |a 1 2 |b\n1 |a 1 x\n", AB, max_errors=2)
    reasons = [e.reason for e in parsed.deserializer.errors.errors]
    assert len(reasons) == 2
    assert "malformed number" in reasons[0]
    assert reasons[1] == "line has no valid sample"
    assert fields(parsed.deserializer.errors.errors[1]) == (2, 1, 12, 1, None)


def test_errors_are_logged_once_each(ctf, caplog):
    with caplog.at_level(logging.WARNING, logger="cntkio"):
        parsed = ctf.read(THREE_BAD, AB, max_errors=3)
        for chunk_id in range(parsed.deserializer.num_chunks()):
            parsed.deserializer.get_chunk(chunk_id)  # parsing again finds the same errors
    messages = [r.getMessage() for r in caplog.records if "skipped bad record" in r.getMessage()]
    assert len(messages) == 3
    assert [f":{line}:" in m for line, m in zip((2, 4, 5), messages)] == [True] * 3
    assert all(r.levelno == logging.WARNING for r in caplog.records if "skipped bad record" in r.getMessage())


def test_trace_level_zero_counts_without_logging(ctf, caplog):
    with caplog.at_level(logging.DEBUG, logger="cntkio"):
        parsed = ctf.read(THREE_BAD, AB, max_errors=3, trace_level=0)
    assert parsed.deserializer.errors.count == 3
    assert not [r for r in caplog.records if "skipped bad record" in r.getMessage()]
    assert len([r for r in caplog.records if "trace_level" in r.getMessage()]) == 1  # spec §8: one notice


def test_source_trace_level_overrides_the_deserializer(ctf, caplog):
    with caplog.at_level(logging.DEBUG, logger="cntkio"):
        source = ctf.source(THREE_BAD, AB, ctf_options={"max_errors": 3, "trace_level": 2}, trace_level=0, max_sweeps=1)
        assert len(source.next_minibatch(100)["a"].sequence_lengths) == 5
    assert not [r for r in caplog.records if "skipped bad record" in r.getMessage()]


def bad_every_few_lines(n: int = 12) -> str:
    """Sequences of one line; those with key % 4 == 2 hold a bad sparse index (one error each)."""
    return "".join(f"{i} |a {i} 0 |b {9 if i % 4 == 2 else 0}:1\n" for i in range(n))


def read_sweeps(ctf, compat: bool, prefetch: bool = False, sweeps: int = 3):
    """Reads `sweeps` sweeps through a MinibatchSource over many small chunks; returns (deserializer, parses)."""
    deserializer = ctf.deserializer(bad_every_few_lines(), AB, max_errors=100, chunk_size_in_bytes=20, compat=compat)
    calls = []
    original = deserializer.get_chunk
    deserializer.get_chunk = lambda chunk_id: calls.append(chunk_id) or original(chunk_id)
    source = MinibatchSource(deserializer, max_sweeps=sweeps, randomize=False, prefetch=prefetch)
    batches = 0
    while source.next_minibatch(2):
        batches += 1
    source.close()
    assert batches == 6 * sweeps
    return deserializer, calls


@pytest.mark.parametrize("prefetch", [False, True])
def test_errors_are_counted_once_across_sweeps(ctf, caplog, prefetch):
    with caplog.at_level(logging.WARNING, logger="cntkio"):
        deserializer, calls = read_sweeps(ctf, compat=False, prefetch=prefetch)
    assert deserializer.num_chunks() == 12
    assert len(calls) > deserializer.num_chunks()  # chunks were parsed again in later sweeps
    assert deserializer.errors.count == 3
    assert sorted(int(e.sequence_key) for e in deserializer.errors.errors) == [2, 6, 10]
    assert len([r for r in caplog.records if "skipped bad record" in r.getMessage()]) == 3


def test_compat_counts_errors_on_every_read(ctf):
    deserializer, calls = read_sweeps(ctf, compat=True)
    bad_parses = sum(1 for chunk_id in calls if chunk_id % 4 == 2)
    assert bad_parses > 3  # some bad chunks were parsed again in later sweeps
    assert deserializer.errors.count == bad_parses


def test_compat_budget_runs_out_in_a_later_sweep(ctf):
    source = ctf.source(
        bad_every_few_lines(),
        AB,
        ctf_options={"max_errors": 4, "chunk_size_in_bytes": 20, "compat": True, "trace_level": 0},
        max_sweeps=3,
        prefetch=False,
    )
    read = 0
    with pytest.raises(MaxErrorsExceeded):
        while source.next_minibatch(2):
            read += 1
    assert 6 <= read < 12  # the first sweep (3 errors) passes, the second one breaks the budget


def test_max_errors_exceeded_surfaces_from_next_minibatch(ctf):
    source = ctf.source("|a 1 2 |b\n|a 3 4 |b 7:1\n", AB)
    with pytest.raises(MaxErrorsExceeded) as info:
        source.next_minibatch(10)
    assert fields(info.value) == (2, 11, 20, 1, "b")


@pytest.mark.parametrize("prefetch", [False, True])
def test_error_in_a_prefetched_chunk_surfaces_when_it_is_read(ctf, prefetch):
    text = "".join(f"{i} |a {i} 0 |b\n" for i in range(20)) + "20 |a 1 2 |b 0:x\n"
    source = ctf.source(text, AB, ctf_options={"chunk_size_in_bytes": 40}, max_sweeps=1, prefetch=prefetch)
    keys = []
    with pytest.raises(MaxErrorsExceeded) as info:
        while True:
            keys += source.next_minibatch(3)["a"].values[:, 0].tolist()
    assert keys == list(range(18))
    assert fields(info.value) == (21, 16, len(text) - 2, 20, "b")


def test_unread_chunks_do_not_raise(ctf):
    text = "".join(f"{i} |a {i} 0 |b\n" for i in range(20)) + "20 |a 1 2 |b 0:x\n"
    source = ctf.source(text, AB, ctf_options={"chunk_size_in_bytes": 40}, max_samples=6)
    assert sum(mb["a"].num_samples for mb in iter(lambda: source.next_minibatch(2), {})) == 6


# ------------------------------------------------------------------------------------- crash safety
CHILD = textwrap.dedent(
    """
    import sys
    from cntkio import CTFDeserializer, MinibatchSource, StreamDef, StreamDefs

    def run(path, max_errors):
        streams = StreamDefs(a=StreamDef(field="a", shape=3), b=StreamDef(field="b", shape=5, is_sparse=True))
        deserializer = CTFDeserializer(path, streams, max_errors=max_errors, optional_inputs=True,
                                       chunk_size_in_bytes=4096, trace_level=0)
        source = MinibatchSource(deserializer, randomize=False, max_sweeps=2)
        for count in range(10**9):
            minibatch = source.next_minibatch(64)
            if not minibatch:
                break
            if count < 20:  # the views are slow-ish (a CSR per sequence): check the first minibatches
                for name in ("a", "b"):
                    minibatch[name].asarray(), minibatch[name].mask, minibatch[name].as_sequences()
        source.close()

    try:
        run(sys.argv[1], 0)
        print("strict ok")
    except Exception as error:
        print("strict", type(error).__name__)
    run(sys.argv[1], 10**9)
    """
)


def run_child(path) -> tuple[str, str]:
    """Reads `path` in a fresh interpreter strictly, then tolerantly; returns both outcomes."""
    result = subprocess.run([sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True, check=False)
    assert result.returncode >= 0, f"interpreter killed by signal {-result.returncode}: {result.stderr[-2000:]}"
    assert result.returncode in (0, 1), result.stderr[-2000:]
    strict = result.stdout.split()[1] if result.stdout.startswith("strict") else "?"
    if result.returncode == 0:
        return strict, "ok"
    last = result.stderr.strip().splitlines()[-1]
    return strict, last.split(":")[0].rsplit(".", 1)[-1]


def garbage(seed: int, size: int = 1 << 16) -> bytes:
    return random.Random(seed).randbytes(size)


CRASH_CASES = {
    "truncated_mid_number": (b"|a 1 2 3\n|a 4 5.2", ("ok", "ok")),
    "truncated_mid_exponent": (b"|a 1 2 3\n|a 4 5e", ("MaxErrorsExceeded", "ok")),
    "truncated_mid_exponent_sign": (b"|a 1 2 3\n|a 4 5e-", ("MaxErrorsExceeded", "ok")),
    "truncated_mid_name": (b"1 |a 1 2 3\n1 |", ("MaxErrorsExceeded", "ok")),
    "truncated_mid_alias": (b"1 |a 1 2 3\n1 |bb", ("ok", "ok")),
    "truncated_mid_sparse_index": (b"|b 1:1 2", ("MaxErrorsExceeded", "ok")),
    "truncated_after_colon": (b"|b 1:", ("MaxErrorsExceeded", "ok")),
    "truncated_mid_id": (b"12345", ("MaxErrorsExceeded", "FormatError")),
    "nul_bytes": (b"|a 1\x002 3\n|a\x00 3\n\x00\x00\n|b 1:\x00\n", ("MaxErrorsExceeded", "ok")),
    "non_utf8_names": (b"|a\xff 1 2\n|\xc3\x28 1\n|a 1 2 3 |b 1:1\n", ("ok", "ok")),
    "non_utf8_values": (b"|a 1 \xff2\n|b 1:\xc3\x28\n", ("MaxErrorsExceeded", "ok")),
    "non_utf8_ids": (b"k\xc3\x28 |a 1 2\n\x80\x80 |a 3\n\xc3 |b 1:1\n", ("ok", "ok")),
    "sparse_index_past_dim": (b"|b 5:1\n", ("MaxErrorsExceeded", "ok")),
    "sparse_index_past_int32": (b"|b 4294967297:1\n|b 2147483648:1\n", ("MaxErrorsExceeded", "ok")),
    "sparse_index_past_uint64": (b"|b 184467440737095516160:1\n", ("MaxErrorsExceeded", "ok")),
    "negative_sparse_index": (b"|b -1:1\n|b -0:1\n", ("MaxErrorsExceeded", "ok")),
    "huge_exponents": (b"|a 1e99999999999999999999999 |b 1:1e999\n|a -1e400\n", ("MaxErrorsExceeded", "ok")),
    "tiny_exponents": (b"|a 1e-99999999999999999999999 |b 1:1e-999\n", ("ok", "ok")),
    "empty_file": (b"", ("FormatError", "FormatError")),
    "whitespace_only": (b"\n \t\r\n\x0b\x0c\n", ("FormatError", "FormatError")),
    "utf16_le_bom": (b"\xff\xfe" + "|a 1 2 3\n".encode("utf-16-le"), ("FormatError", "FormatError")),
    "utf16_be_bom": (b"\xfe\xff" + "|a 1 2 3\n".encode("utf-16-be"), ("FormatError", "FormatError")),
    "lone_bar": (b"|", ("FormatError", "FormatError")),
    "bars_only": (b"||||\n|\n| |\n", ("FormatError", "FormatError")),
    "cr_only_line_ends": (b"|a 1\r|a 2\r", ("MaxErrorsExceeded", "ok")),
    "ten_mb_dense_line": (b"|a " + b"1 " * 5_000_000 + b"\n", ("MaxErrorsExceeded", "ok")),
    "ten_mb_sparse_line": (b"|b " + b"4:1 " * 2_500_000 + b"\n", ("ok", "ok")),
    "ten_mb_number": (b"|a 1" + b"7" * 10_000_000 + b"\n", ("MaxErrorsExceeded", "ok")),
    "ten_mb_fraction": (b"|a 0." + b"0" * 10_000_000 + b"1\n", ("ok", "ok")),
    "ten_mb_text_id": (b"k" * 10_000_000 + b" |a 1\n", ("ok", "ok")),
    "ten_mb_numeric_id": (b"1" * 10_000_000 + b" |a 1\n", ("FormatError", "FormatError")),
    "ten_mb_comment": (b"|a 1 |#" + b"x" * 10_000_000, ("ok", "ok")),
    "million_blank_lines": (b"\n" * 1_000_000 + b"|a 1\n" + b"\n" * 1_000_000 + b"|a 2", ("ok", "ok")),
    "many_tiny_sequences": (b"|b\n" * 100_000, ("ok", "ok")),
}


@pytest.mark.parametrize("name", CRASH_CASES)
def test_bad_input_never_crashes_the_interpreter(tmp_path, name):
    content, expected = CRASH_CASES[name]
    path = tmp_path / f"{name}.ctf"
    path.write_bytes(content)
    assert run_child(path) == expected


@pytest.mark.parametrize("seed", range(4))
def test_binary_garbage_never_crashes_the_interpreter(tmp_path, seed):
    content = garbage(seed)
    assert b"\x00" in content
    path = tmp_path / "garbage.ctf"
    path.write_bytes(content if seed % 2 else b"|a 1 2 3 |b 1:1\n" + content)
    strict, tolerant = run_child(path)
    assert strict in ("ok", "FormatError", "MaxErrorsExceeded")
    assert tolerant in ("ok", "FormatError")


def test_missing_file_raises_file_not_found_in_a_child(tmp_path):
    assert run_child(tmp_path / "missing.ctf") == ("FileNotFoundError", "FileNotFoundError")


FUZZ_CHILD = textwrap.dedent(
    """
    import random, sys
    from cntkio import CTFDeserializer, CNTKIOError, MinibatchSource, StreamDef, StreamDefs

    TOKENS = [b"|a", b"|b", b"|", b"|#", b" ", b"\\t", b"\\n", b"\\r\\n", b"1", b"-2.5", b"3e", b"e", b".", b":",
              b"4:", b"9:1", b"0:7", b"1e308", b"1e-330", b"x", b"\\x00", b"\\xff", b"\\xef\\xbb\\xbf", b"12 ",
              b"18446744073709551616", b"99999999999:", b"-", b"+", b"abc "]
    rng = random.Random(int(sys.argv[2]))
    streams = StreamDefs(a=StreamDef(field="a", shape=2), b=StreamDef(field="b", shape=5, is_sparse=True))
    outcomes = {}
    for case in range(int(sys.argv[3])):
        content = b"".join(rng.choice(TOKENS) for _ in range(rng.randrange(1, 80)))
        with open(sys.argv[1], "wb") as f:
            f.write(content)
        try:
            deserializer = CTFDeserializer(sys.argv[1], streams, max_errors=rng.choice([0, 5, 10**6]),
                                           optional_inputs=rng.random() < 0.5, compat=rng.random() < 0.2,
                                           chunk_size_in_bytes=rng.choice([1, 16, 1 << 20]), trace_level=0,
                                           precision=rng.choice(["float", "double"]))
            source = MinibatchSource(deserializer, randomize=False, max_sweeps=2, prefetch=False)
            while True:
                minibatch = source.next_minibatch(rng.randrange(1, 6))
                if not minibatch:
                    break
                minibatch["a"].asarray(), minibatch["b"].asarray(), minibatch["b"].as_sequences()
            outcome = "ok"
        except CNTKIOError as error:
            outcome = type(error).__name__
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    print(sorted(outcomes.items()))
    """
)


@pytest.mark.parametrize("seed", range(3))
def test_token_soup_never_crashes(tmp_path, seed):
    """Random mixes of CTF tokens: only cntkio errors (any other exception fails the child)."""
    result = subprocess.run(
        [sys.executable, "-c", FUZZ_CHILD, str(tmp_path / "soup.ctf"), str(seed), "400"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, f"return code {result.returncode}: {result.stderr[-3000:]}"
    assert "ok" in result.stdout


CHANGED_CHILD = textwrap.dedent(
    """
    import os, random, sys
    from cntkio import CTFDeserializer, MinibatchSource, StreamDef, StreamDefs

    path, change = sys.argv[1], sys.argv[2]
    streams = StreamDefs(a=StreamDef(field="a", shape=3), b=StreamDef(field="b", shape=5, is_sparse=True))
    with open(path, "wb") as f:
        f.write(b"".join(b"%d |a 1 2 3 |b 1:1\\n%d |a 4 5 6\\n" % (i, i) for i in range(300)))
    deserializer = CTFDeserializer(path, streams, max_errors=10**9, chunk_size_in_bytes=1000, trace_level=0)
    size = os.path.getsize(path)
    if change == "truncate":
        os.truncate(path, size // 2)
    else:
        content = {"digits": b"7" * size, "bars": b"|" * size, "random": random.Random(0).randbytes(size)}[change]
        with open(path, "r+b") as f:
            f.write(content)
    source = MinibatchSource(deserializer, randomize=False, max_sweeps=1)
    while source.next_minibatch(100):
        pass
    print("ok")
    """
)


@pytest.mark.parametrize(
    ("change", "outcome"),
    [(change, "changed since it was indexed") for change in ("digits", "bars", "random", "truncate")],
)
def test_file_changed_after_indexing_never_crashes(tmp_path, change, outcome):
    """A file rewritten behind the reader's back is an error naming it, never other data or a crash."""
    result = subprocess.run(
        [sys.executable, "-c", CHANGED_CHILD, str(tmp_path / "changed.ctf"), change],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode in (0, 1), f"return code {result.returncode}: {result.stderr[-3000:]}"
    assert outcome in (result.stdout if result.returncode == 0 else result.stderr.strip().splitlines()[-1])
