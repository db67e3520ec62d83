"""HTKMLFDeserializer: MLF labels as one-hot sparse frames (spec/htk-and-mlf.md §2, §3, §4)."""

from __future__ import annotations

import itertools
import logging
import os
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cntkio import CTFDeserializer, MinibatchSource, StreamDef, StreamDefs
from cntkio._src.common.errors import ConfigError, FormatError, MaxErrorsExceeded
from cntkio._src.formats.htk_labels import HTKMLFDeserializer
from cntkio._src.formats.mlf import parse_mlf, read_state_list
from cntkio._src.formats.protocol import SparseStream
from order_helpers import assert_exactly_once, keys_of, read, snapshot, split_sweeps, unit_stream
from test_mlf import SPEC_EXAMPLE, STATES

AN4 = Path(os.environ.get("CNTKIO_CONFORMANCE_DIR", "../shared/conformance/cntk")) / "External" / "AN4"


def write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def state_list(tmp_path: Path, states: list[str] = STATES) -> str:
    return write(tmp_path / "states.list", "\n".join(states) + "\n")


def labels_of(mlf: Any, *, dim: int = 5) -> Any:
    return StreamDefs(labels=StreamDef(shape=dim, mlf=mlf))


def reader(tmp_path: Path, text: str = SPEC_EXAMPLE, **options: Any) -> HTKMLFDeserializer:
    mlf = write(tmp_path / "labels.mlf", text)
    phone_boundaries = options.pop("phone_boundaries", False)
    return HTKMLFDeserializer(state_list(tmp_path), labels_of(mlf), phone_boundaries, **options)


def chunk(d: HTKMLFDeserializer, chunk_id: int) -> SparseStream:
    stream = d.get_chunk(chunk_id)["labels"]
    assert isinstance(stream, SparseStream)
    return stream


def dense_chunks(d: HTKMLFDeserializer) -> np.ndarray:
    return np.concatenate([chunk(d, c).csr().toarray() for c in range(d.num_chunks())])


def one_hot(states: list[int], dim: int = 5) -> np.ndarray:
    out = np.zeros((len(states), dim), dtype=np.float32)
    out[np.arange(len(states)), states] = 1.0
    return out


def frame_mlf(entries: dict[str, list[tuple[str, int]]]) -> str:
    """An MLF in frame units from key -> [(state name, frames)]."""
    lines = ["#!MLF!#"]
    for key, runs in entries.items():
        lines.append(f'"*/{key}.lab"')
        t = 0
        for name, count in runs:
            lines.append(f"{t} {t + count} {name}")
            t += count
        lines.append(".")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------------ format
def test_spec_example_keys_lengths_and_one_hot_rows(tmp_path: Path) -> None:
    d = reader(tmp_path)
    assert d.num_chunks() == 1
    index = d.chunk_index(0)
    assert list(index.keys) == ["spk1_utt7", "other/path/utt8"]
    assert index.lengths.tolist() == [26, 5]
    assert d.sequence_index().keys.is_text
    info = d.stream_infos()[0]
    assert (info.name, info.is_sparse, info.shape, info.dtype) == ("labels", True, (5,), np.float32)
    stream = chunk(d, 0)
    assert stream.seq_offsets.tolist() == [0, 26, 31]
    assert stream.indices.dtype == np.int32 and stream.indptr.dtype == np.int64
    assert stream.indptr.tolist() == list(range(32))
    # 100 ns units (utt7: 0-12, 12-25, 25-26 frames, rounded) and frame units (utt8), decided per line
    expected = one_hot([0] * 12 + [1] * 13 + [2] * 1 + [0] * 3 + [3] * 2)
    np.testing.assert_array_equal(stream.csr().toarray(), expected)
    assert d.source_name.endswith("labels.mlf") and d.report().startswith("2 utterances, 5 label runs")


def test_phone_boundaries_mark_the_first_frame_of_every_label_line(tmp_path: Path) -> None:
    text = SPEC_EXAMPLE + '"rep.lab"\n0 2 a\n2 4 a\n4 5 b\n.\n'  # two lines of the same state: two segments
    values = dense_chunks(reader(tmp_path, text, phone_boundaries=True)).max(axis=1)
    boundaries = np.flatnonzero(values == 2.0).tolist()
    assert boundaries == [0, 12, 25, 26, 29, 31, 33, 35]
    assert set(values.tolist()) == {1.0, 2.0}
    plain = dense_chunks(reader(tmp_path, text))
    np.testing.assert_array_equal(plain != 0, dense_chunks(reader(tmp_path, text, phone_boundaries=True)) != 0)
    assert set(plain[plain != 0].tolist()) == {1.0}


def test_class_id_form_without_a_state_list(tmp_path: Path) -> None:
    mlf = write(tmp_path / "ids.mlf", '#!MLF!#\n"u1.lab"\n0 2 x 3\n2 3 y 0\n.\n"u2.lab"\n0 1 z 6\n.\n')
    d = HTKMLFDeserializer(None, labels_of(mlf, dim=7), False)
    assert d.sequence_index().keys.take(np.arange(2)) == ["u1", "u2"]
    np.testing.assert_array_equal(dense_chunks(d), one_hot([3, 3, 0, 6], 7))
    with pytest.raises(FormatError, match="exceeds the model output dimension 6"):
        HTKMLFDeserializer(None, labels_of(mlf, dim=6))


def test_double_precision(tmp_path: Path) -> None:
    d = reader(tmp_path, precision="double")
    assert chunk(d, 0).values.dtype == np.float64 and d.stream_infos()[0].dtype == np.float64
    np.testing.assert_array_equal(dense_chunks(d), dense_chunks(reader(tmp_path)))


def test_configuration_errors(tmp_path: Path) -> None:
    mlf = write(tmp_path / "labels.mlf", SPEC_EXAMPLE)
    states = state_list(tmp_path)
    with pytest.raises(ConfigError, match=r"shape=6, but the state list .* has 5 states"):
        HTKMLFDeserializer(states, labels_of(mlf, dim=6))
    with pytest.raises(ConfigError, match=r"shape=4, but the state list .* has 5 states"):
        HTKMLFDeserializer(states, labels_of(mlf, dim=4))
    two = StreamDefs(a=StreamDef(shape=5, mlf=mlf), b=StreamDef(shape=5, mlf=mlf))
    with pytest.raises(ConfigError, match="exactly one stream, got 2"):
        HTKMLFDeserializer(states, two)
    with pytest.raises(ConfigError, match="needs mlf="):
        HTKMLFDeserializer(states, StreamDefs(labels=StreamDef(shape=5)))
    with pytest.raises(ConfigError, match="needs shape="):
        HTKMLFDeserializer(states, StreamDefs(labels=StreamDef(mlf=mlf)))
    with pytest.raises(ConfigError, match="must not set field"):
        HTKMLFDeserializer(states, StreamDefs(labels=StreamDef(field="l", shape=5, mlf=mlf)))
    with pytest.raises(ConfigError, match="precision"):
        HTKMLFDeserializer(states, labels_of(mlf), precision="half")
    with pytest.raises(ConfigError, match="chunk_size_in_bytes"):
        HTKMLFDeserializer(states, labels_of(mlf), chunk_size_in_bytes=0)
    with pytest.raises(ConfigError, match="class ids are 16-bit"):
        HTKMLFDeserializer(None, labels_of(mlf, dim=70000))
    with pytest.raises(FileNotFoundError, match=r"missing\.mlf"):
        HTKMLFDeserializer(states, labels_of(str(tmp_path / "missing.mlf")))
    with pytest.raises(FormatError, match="'zz'"):
        HTKMLFDeserializer(states, labels_of(write(tmp_path / "bad.mlf", '#!MLF!#\n"u.lab"\n0 1 zz\n.\n')))


def test_several_mlf_files_and_paths_with_colons(tmp_path: Path) -> None:
    first = write(tmp_path / "a:1.mlf", SPEC_EXAMPLE)  # a ':' in a path is never a separator (fix #15)
    second = write(tmp_path / "b.mlf", frame_mlf({"u3": [("b", 2)], "spk1_utt7": [("a", 1)]}))
    one = HTKMLFDeserializer(state_list(tmp_path), labels_of(first))
    assert len(one.sequence_index().lengths) == 2
    both = HTKMLFDeserializer(state_list(tmp_path), labels_of([first, Path(second)]))
    assert both.sequence_index().keys.take(np.arange(3)) == ["spk1_utt7", "other/path/utt8", "u3"]
    assert both.duplicates == 1 and both.duplicate_keys == ["spk1_utt7"]  # the first file's entry is kept
    assert both.sequence_index().lengths.tolist() == [26, 5, 2]
    assert both.source_name == first
    fingerprint = both.fingerprint()
    assert fingerprint[:4] == ["HTKMLFDeserializer", "a:1.mlf", os.path.getsize(first), os.stat(first).st_mtime_ns]
    assert "b.mlf" in fingerprint and "states.list" in fingerprint


def test_invalid_entries_and_duplicates_are_skipped_and_reported_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    text = (
        SPEC_EXAMPLE
        + '"gap.lab"\n0 2 a\n3 4 b\n.\n'  # not contiguous
        + '"late.lab"\n1 2 a\n.\n'  # does not start at frame 0
        + '"empty.lab"\n0 0 a\n.\n'  # zero frames
        + '"other/path/utt8.lab"\n0 9 b\n.\n'  # a duplicate key
        + '"ok.lab"\n0 2 b\n.\n'
    )
    with caplog.at_level(logging.WARNING, logger="cntkio"):
        d = reader(tmp_path, text, max_errors=3)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    message = warnings[0].getMessage()
    assert "3 invalid entries" in message and "1 duplicate keys" in message and "gap" in message
    assert [e.key for e in d.invalid] == ["gap", "late", "empty"]
    assert "not contiguous" in d.invalid[0].reason and d.invalid[0].line == 13  # the line that breaks the entry
    assert d.invalid[2].line == 18 and "0 frames" in d.invalid[2].reason  # the entry's header line
    assert d.duplicates == 1 and d.duplicate_keys == ["other/path/utt8"]
    assert d.sequence_index().keys.take(np.arange(3)) == ["spk1_utt7", "other/path/utt8", "ok"]
    assert d.sequence_index().lengths.tolist() == [26, 5, 2]
    np.testing.assert_array_equal(dense_chunks(d)[-7:], one_hot([0, 0, 0, 3, 3, 4, 4]))
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="cntkio"):
        reader(tmp_path, text, max_errors=3, trace_level=0)
    assert not caplog.records


def test_no_usable_entries_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(FormatError, match="no usable label entries"):
        reader(tmp_path, '#!MLF!#\n"gap.lab"\n0 2 a\n3 4 b\n.\n', max_errors=1)
    with pytest.raises(FormatError, match="not contiguous") as e:  # max_errors=0: the invalid entry itself
        reader(tmp_path, '#!MLF!#\n"gap.lab"\n0 2 a\n3 4 b\n.\n')
    assert (e.value.line, e.value.sequence_key) == (4, "gap")


# Each kind of invalid entry appended to the spec example (10 lines): the text, the line reported, the key and
# a phrase of the reason.
INVALID_KINDS = {
    "not contiguous": ('"gap.lab"\n0 2 a\n3 4 b\n.\n', 13, "gap", "not contiguous"),
    "first range not at frame 0": ('"late.lab"\n1 2 a\n.\n', 12, "late", "not 0"),
    "no label lines": ('"none.lab"\n.\n', 11, "none", "no label lines"),
    "zero frames": ('"zero.lab"\n0 0 a\n0 0 b\n.\n', 11, "zero", "0 frames"),
    "unquoted header": ("*/bare.lab\n0 2 a\n.\n", 11, "*/bare.lab", "not a quoted name"),
    "no '.' before the next entry": ('"open.lab"\n0 2 a\n"next.lab"\n0 1 b\n.\n', 11, "open", "not terminated"),
    "cut after a label line": ('"cut.lab"\n0 2 a\n2 4 b\n', 13, "cut", "truncated"),
    "cut in a label line": ('"cut.lab"\n0 2 a\n2 4', 13, "cut", "in the middle of label line 13"),
    "cut in a header": ('"*/cut.l', 11, '"*/cut.l', "cut by the end of the file"),
}


@pytest.mark.parametrize("kind", list(INVALID_KINDS))
def test_each_invalid_kind_raises_with_file_line_and_key(tmp_path: Path, kind: str) -> None:
    tail, line, key, phrase = INVALID_KINDS[kind]
    path = str(tmp_path / "labels.mlf")
    with pytest.raises(FormatError) as e:
        reader(tmp_path, SPEC_EXAMPLE + tail)
    assert not isinstance(e.value, MaxErrorsExceeded)
    assert (e.value.file, e.value.line, e.value.sequence_key) == (path, line, key)
    assert phrase in e.value.reason
    assert f"{path}:{line} " in str(e.value) and f"sequence {key}" in str(e.value)
    with open(path, "rb") as f:  # the offset is that of the line
        assert e.value.offset == sum(len(x) + 1 for x in f.read().split(b"\n")[: line - 1])
    d = reader(tmp_path, SPEC_EXAMPLE + tail, max_errors=1)  # tolerated: skipped, counted, reported
    assert [(i.file, i.line, i.key) for i in d.invalid] == [(path, line, key)]
    assert list(d.sequence_index().keys)[:2] == ["spk1_utt7", "other/path/utt8"]
    assert "1 invalid entries skipped" in d.report() and f"{path}:{line}" in d.report()


def test_invalid_entries_are_in_the_sources_error_report(tmp_path: Path) -> None:
    """The MLF's tolerated invalid entries (reported in one summary when it is read) go through the error ledger:
    MinibatchSource.error_report() counts and locates them, and they survive a checkpoint and restore."""
    text = SPEC_EXAMPLE + "".join(tail for tail, *_ in list(INVALID_KINDS.values())[:3]) + '"ok.lab"\n0 2 b\n.\n'
    source = MinibatchSource(reader(tmp_path, text, max_errors=3), max_sweeps=1)
    report = source.error_report()
    assert report.total == 3 and report.by_kind == {"invalid MLF entry": 3}
    assert [e.sequence_key for e in report.errors] == ["gap", "late", "none"]
    state = source.get_checkpoint_state()
    restored = MinibatchSource(reader(tmp_path, text, max_errors=3), max_sweeps=1)
    restored.restore_from_checkpoint(state)
    assert [str(e) for e in restored.error_report().errors] == [str(e) for e in report.errors]


def test_max_errors_budget_skips_counts_and_overflows(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    text = SPEC_EXAMPLE + "".join(tail for tail, *_ in list(INVALID_KINDS.values())[:6]) + '"ok.lab"\n0 2 b\n.\n'
    with caplog.at_level(logging.WARNING, logger="cntkio"):
        d = reader(tmp_path, text, max_errors=6)
    assert [r.levelno for r in caplog.records] == [logging.WARNING]  # one summary, not one per entry
    assert "6 invalid entries skipped" in caplog.records[0].getMessage()
    assert [e.key for e in d.invalid] == ["gap", "late", "none", "zero", "*/bare.lab", "open"]
    assert d.describe()["invalid"] == 6 and d.max_errors == 6
    assert list(d.sequence_index().keys) == ["spk1_utt7", "other/path/utt8", "next", "ok"]
    copy = pickle.loads(pickle.dumps(d))
    assert copy.max_errors == 6 and len(copy.invalid) == 6
    with pytest.raises(MaxErrorsExceeded, match="max_errors=5") as e:
        reader(tmp_path, text, max_errors=5)
    assert isinstance(e.value, FormatError) and e.value.max_errors == 5
    assert (e.value.line, e.value.sequence_key) == (27, "open")  # the 6th invalid entry breaks a budget of 5
    assert e.value.file == str(tmp_path / "labels.mlf") and "not terminated" in e.value.reason
    with pytest.raises(FormatError, match="not contiguous") as e:
        reader(tmp_path, text)
    assert e.value.line == 13
    with pytest.raises(ConfigError, match="max_errors"):
        reader(tmp_path, text, max_errors=-1)


def test_truncated_mlf_names_file_line_and_utterance(tmp_path: Path) -> None:
    """A copy cut short: in the middle of an entry (after a complete label line), and in the middle of a
    label line. Both name the file, the line where it ends and the utterance; a budget skips the entry."""
    entries = random_entries(6, 9)
    full = frame_mlf(entries)
    lines = full.split("\n")
    last_key = list(entries)[-1]
    header = lines.index(f'"*/{last_key}.lab"') + 1  # 1-based
    path = str(tmp_path / "labels.mlf")
    for cut, line, phrase in [
        ("\n".join(lines[: header + 1]) + "\n", header + 1, f"ends after label line {header + 1}"),
        ("\n".join(lines[: header + 1])[:-1], header + 1, f"in the middle of label line {header + 1}"),
    ]:
        with pytest.raises(FormatError) as e:
            reader(tmp_path, cut)
        message = str(e.value)
        assert (e.value.file, e.value.line, e.value.sequence_key) == (path, line, last_key)
        assert f"{path}:{line}" in message and f"sequence {last_key}" in message and "truncated" in message
        assert phrase in message
        d = reader(tmp_path, cut, max_errors=1)
        assert list(d.sequence_index().keys) == list(entries)[:-1] and d.invalid[0].key == last_key


def test_chunks_group_whole_entries_by_parsed_bytes(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    entries = {f"u{i}": [(STATES[int(s)], int(n)) for s, n in rng.integers([0, 1], [5, 9], (rng.integers(1, 5), 2))]
               for i in range(40)}  # fmt: skip
    text = frame_mlf(entries)
    whole = reader(tmp_path, text)
    small = reader(tmp_path, text, chunk_size_in_bytes=16 * 20)  # about 20 frames of float32 labels
    assert whole.num_chunks() == 1 and small.num_chunks() > 5
    np.testing.assert_array_equal(dense_chunks(small), dense_chunks(whole))
    starts = small.sequence_index().chunk_starts
    frames = [int(small.sequence_index().lengths[a:b].sum()) for a, b in itertools.pairwise(starts)]
    longest = int(small.sequence_index().lengths.max())
    assert all(f <= 20 + longest for f in frames)
    for c in range(small.num_chunks()):
        index, parsed = small.chunk_index(c), chunk(small, c)
        assert np.diff(parsed.seq_offsets).tolist() == index.lengths.tolist()
        assert list(index.keys) == [f"u{i}" for i in range(starts[c], starts[c + 1])]
        assert not parsed.values.flags.writeable


def test_label_memory_is_runs_only(tmp_path: Path) -> None:
    d = reader(tmp_path, frame_mlf({f"u{i}": [("a", 90000), ("b", 50000)] for i in range(20)}))
    held = d.labels.run_states.nbytes + d.labels.run_counts.nbytes
    assert held == 6 * 40 and int(d.sequence_index().lengths.sum()) == 2_800_000


# ------------------------------------------------------------------------------------------------ source
def random_entries(count: int, seed: int) -> dict[str, list[tuple[str, int]]]:
    rng = np.random.default_rng(seed)
    return {
        f"utt{i:03d}": [(STATES[int(rng.integers(5))], int(rng.integers(1, 6))) for _ in range(int(rng.integers(1, 5)))]
        for i in range(count)
    }


def expected_frames(entries: dict[str, list[tuple[str, int]]]) -> dict[str, list[int]]:
    return {key: [STATES.index(name) for name, n in runs for _ in range(n)] for key, runs in entries.items()}


def test_minibatch_source_file_order_and_rows(tmp_path: Path) -> None:
    entries = random_entries(30, 1)
    frames = expected_frames(entries)
    d = reader(tmp_path, frame_mlf(entries), chunk_size_in_bytes=16 * 25)
    with MinibatchSource(d, randomize=False, max_sweeps=1) as source:
        minibatches = read(source, 40)
        keys = [k for mb in minibatches for k in keys_of(mb)]
        assert keys == list(entries)
        rows = [s.toarray() for mb in minibatches for s in mb["labels"].as_sequences()]
    for key, sequence in zip(keys, rows):
        np.testing.assert_array_equal(sequence, one_hot(frames[key]))


def test_minibatch_source_randomizes_every_utterance_once_per_sweep(tmp_path: Path) -> None:
    entries = random_entries(50, 2)
    d = reader(tmp_path, frame_mlf(entries), chunk_size_in_bytes=16 * 20)
    assert d.num_chunks() > 5
    options: dict[str, Any] = {"randomization_window_in_chunks": 3, "randomization_seed": 5, "max_sweeps": 3}
    with MinibatchSource(d, **options) as source:
        stream = unit_stream(source, 17)
    sweeps = split_sweeps(stream, 50)
    for sweep in sweeps:
        assert_exactly_once(sweep, entries)
    assert sweeps[0] != list(entries) and sweeps[0] != sweeps[1]


def test_frame_mode_frame_k_is_the_kth_label_and_checkpoints_are_exact(tmp_path: Path) -> None:
    entries = random_entries(25, 3)
    frames = expected_frames(entries)
    total = sum(map(len, frames.values()))
    d = reader(tmp_path, frame_mlf(entries), chunk_size_in_bytes=16 * 30)
    options: dict[str, Any] = {
        "frame_mode": True,
        "randomization_window_in_chunks": 0,
        "randomization_window_in_samples": 60,
        "max_sweeps": 2,
    }
    with MinibatchSource(d, **options) as source:
        minibatches = read(source, 13)
    seen = []
    for mb in minibatches:
        rows = mb["labels"].as_sequences()
        for (key, k), row in zip(keys_of(mb), rows):
            assert row.shape == (1, 5) and row.nnz == 1 and row.indices[0] == frames[key][k] and row.data[0] == 1.0
            seen.append((key, k))
    units = [(key, k) for key, states in frames.items() for k in range(len(states))]
    for sweep in split_sweeps(seen, total):
        assert_exactly_once(sweep, units)

    with MinibatchSource(d, **options) as source:
        read(source, 13, limit=7)
        state = source.get_checkpoint_state()
        rest = [snapshot(mb) for mb in read(source, 13)]
    copy = pickle.loads(pickle.dumps(d))
    with MinibatchSource(copy, **options) as resumed:
        resumed.restore_from_checkpoint(state)
        assert [snapshot(mb) for mb in read(resumed, 13)] == rest


def test_pickles_as_its_arguments(tmp_path: Path) -> None:
    d = reader(tmp_path, phone_boundaries=True, chunk_size_in_bytes=64, precision="double")
    copy = pickle.loads(pickle.dumps(d))
    assert isinstance(copy, HTKMLFDeserializer) and copy.phone_boundaries
    assert copy.num_chunks() == d.num_chunks() == 2 and copy.fingerprint() == d.fingerprint()
    np.testing.assert_array_equal(dense_chunks(copy), dense_chunks(d))
    data = pickle.dumps(d)
    path = tmp_path / "labels.mlf"
    path.write_text(SPEC_EXAMPLE + '"new.lab"\n0 1 a\n.\n')
    with pytest.raises(FormatError, match="changed since the deserializer was pickled"):
        pickle.loads(data)


# ------------------------------------------------------------------------------------------------ joins
def features_ctf(path: Path, lengths: dict[str, int]) -> CTFDeserializer:
    """Frame t of utterance number u holds the value 1000 u + t, so a row names its utterance and frame."""
    lines = [f"{key} |f {1000 * u + t}" for u, (key, n) in enumerate(lengths.items()) for t in range(n)]
    path.write_text("\n".join(lines) + "\n")
    return CTFDeserializer(path, StreamDefs(f=StreamDef(field="f", shape=1)), chunk_size_in_bytes=200)


def test_joined_with_features_by_utterance_name_frame_aligned(tmp_path: Path) -> None:
    entries = random_entries(20, 4)
    frames = expected_frames(entries)
    keys = list(entries)
    shuffled = dict(reversed(list(entries.items())))  # the labels in another order than the features
    labels = reader(tmp_path, frame_mlf(shuffled), chunk_size_in_bytes=16 * 15)
    features = features_ctf(tmp_path / "f.ctf", {k: len(v) for k, v in frames.items()})
    with MinibatchSource([features, labels], frame_mode=True, randomization_seed=2, max_sweeps=1) as source:
        assert source.join_report is not None and source.join_report.clean
        count = 0
        for mb in read(source, 11):
            values = mb["f"].asarray().reshape(-1).astype(int).tolist()
            for value, row in zip(values, mb["labels"].as_sequences()):
                u, t = divmod(value, 1000)
                assert row.indices.tolist() == [frames[keys[u]][t]]
                count += 1
    assert count == sum(map(len, frames.values()))


def test_join_reports_length_mismatches_and_missing_labels(tmp_path: Path) -> None:
    entries = random_entries(8, 5)
    lengths = {k: sum(n for _, n in runs) for k, runs in entries.items()}
    lengths["utt002"] += 1  # features one frame longer than the labels
    lengths["utt005"] -= 1 if lengths["utt005"] > 1 else -2
    lengths["extra"] = 3  # no labels
    features = features_ctf(tmp_path / "f.ctf", lengths)
    labels = reader(tmp_path, frame_mlf(entries))
    with MinibatchSource([features, labels], randomize=False, max_sweeps=1) as source:
        report = source.join_report
        assert report is not None and report.dropped == 1
        assert report.deserializers[1].missing.keys == ("extra",)
        mismatches = report.deserializers[1].length_mismatches
        assert mismatches.count == 2 and mismatches.keys == ("utt002", "utt005")
        assert keys_of(source.next_minibatch(10_000)) == list(entries)
    with pytest.raises(Exception, match="utt002"):
        MinibatchSource([features, labels], length_mismatch="error", max_sweeps=1)


# ------------------------------------------------------------------------------------------------ AN4
@pytest.mark.skipif(not (AN4 / "glob_0000.mlf").exists(), reason="AN4 conformance files absent")
def test_an4_labels() -> None:
    states = read_state_list(AN4 / "state.list")
    streams = StreamDefs(labels=StreamDef(shape=len(states), mlf=str(AN4 / "glob_0000.mlf")))
    d = HTKMLFDeserializer(AN4 / "state.list", streams)
    index = d.sequence_index()
    assert len(index.lengths) == 948 and not d.invalid and d.duplicates == 0
    assert index.keys[0] == "An4/71/71/cen5-fjam-b"
    # the first entry's runs, read from the file text independently of the native parser
    lines = (AN4 / "glob_0000.mlf").read_text().splitlines()
    end = lines.index(".")
    runs = []
    for line in lines[2:end]:
        start, stop, name = line.split(" ")[:3]
        runs.append((states.index(name), int(int(stop) / 100000 + 0.5) - int(int(start) / 100000 + 0.5)))
    first = chunk(d, 0)
    n = int(index.lengths[0])
    assert n == sum(c for _, c in runs) and int(first.seq_offsets[1]) == n
    assert first.indices[:n].tolist() == [s for s, c in runs for _ in range(c)]
    assert parse_mlf(str(AN4 / "glob_0000.mlf"), states, len(states)).num_runs == d.labels.num_runs
    with MinibatchSource(d, frame_mode=True, max_sweeps=1) as source:
        total = sum(mb["labels"].num_samples for mb in read(source, 4096))
    assert total == int(index.lengths.sum())
