"""KaldiDeserializer: binary Kaldi archives written by kaldiio (float, double, the three compressed kinds) read by
offset through feats.scp or scanned directly, values equal to kaldiio's; joined with MLF labels in sequence, frame
and truncated-BPTT modes; bad input named (archive, byte offset, key) or skipped and counted; changed archives."""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cntkio import (
    ConfigError,
    FormatError,
    HTKMLFDeserializer,
    KaldiDeserializer,
    MaxErrorsExceeded,
    MinibatchSource,
    StreamDef,
    StreamDefs,
    _native,
)
from cntkio.htk import write_mlf
from order_helpers import keys_of, read, snapshot

kaldiio = pytest.importorskip("kaldiio")
# kaldiio's compression of few rows divides by zero percentile spans (its own warnings, while writing)
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning:kaldiio")

DIM = 5
STATES = [f"s{i}" for i in range(7)]
# kaldiio's compression_method: 1 automatic (CM for > 8 rows, else CM2), 2 CM (speech features: per-column
# percentiles), 3/4 CM2 (two bytes), 5/6/7 CM3 (one byte)
METHODS = [None, 1, 2, 3, 4, 5, 6, 7]


def frames_of(utterance: int, count: int, dim: int = DIM) -> np.ndarray:
    """Values that encode (utterance, frame, dim): any misalignment changes them."""
    t = np.arange(count)[:, None]
    d = np.arange(dim)[None, :]
    return (utterance * 1000 + t * 10 + d).astype(np.float32)


def make_utterances(count: int, seed: int = 0, dim: int = DIM) -> dict[str, np.ndarray]:
    lengths = np.random.default_rng(seed).integers(1, 30, size=count).tolist()
    return {f"spk_utt{i:03d}": frames_of(i, n, dim) for i, n in enumerate(lengths)}


def write(tmp_path: Path, utterances: dict[str, np.ndarray], name: str = "feats", **options: Any) -> Path:
    """An archive and its scp, written by kaldiio (paths absolute, as Kaldi's scripts write them)."""
    ark, scp = tmp_path / f"{name}.ark", tmp_path / f"{name}.scp"
    kaldiio.save_ark(str(ark), utterances, scp=str(scp), **options)
    return scp


def deserializer(scp: Any, shape: int = DIM, **options: Any) -> KaldiDeserializer:
    stream = {k: options.pop(k) for k in ("context", "max_sequence_length", "broadcast") if k in options}
    return KaldiDeserializer(StreamDefs(feats=StreamDef(shape=shape, scp=scp, **stream)), **options)


def read_all(reader: KaldiDeserializer) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for c in range(reader.num_chunks()):
        data = reader.get_chunk(c)["feats"]
        for key, a, b in zip(reader.chunk_index(c).keys, data.seq_offsets[:-1].tolist(), data.seq_offsets[1:].tolist()):
            out[key] = data.values[a:b]
    return out


def kaldiio_of(scp: Path, dtype: Any = np.float32) -> dict[str, np.ndarray]:
    return {k: np.asarray(v).astype(dtype) for k, v in kaldiio.load_scp(str(scp)).items()}


def assert_same(got: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> None:
    assert list(got) == list(expected)
    for key in expected:
        assert got[key].dtype == expected[key].dtype
        np.testing.assert_array_equal(got[key], expected[key], err_msg=key)


# ------------------------------------------------------------------------------------------ values
@pytest.mark.parametrize("method", METHODS)
def test_every_matrix_kind_reads_as_kaldiio_loads_it(tmp_path: Path, method: int | None) -> None:
    rng = np.random.default_rng(method or 0)
    utterances = {f"u{i}": (rng.normal(size=(int(rng.integers(1, 40)), DIM)) * 7).astype(np.float32) for i in range(9)}
    scp = write(tmp_path, utterances, compression_method=method)
    reader = deserializer(scp, chunk_frames=50)
    assert reader.num_chunks() > 1
    assert_same(read_all(reader), kaldiio_of(scp))
    if method is None:  # float32 matrices are read as stored
        assert_same(read_all(reader), utterances)
    assert_same(read_all(deserializer(scp, precision="double")), kaldiio_of(scp, np.float64))


def test_compressed_kinds_are_all_found(tmp_path: Path) -> None:
    utterances = make_utterances(6)
    kinds = {}
    for method in (2, 3, 5):
        scp = write(tmp_path, utterances, name=f"m{method}", compression_method=method)
        kinds[method] = deserializer(scp).describe()["matrices"]
    assert kinds == {2: {"CM": 6}, 3: {"CM2": 6}, 5: {"CM3": 6}}


def test_double_matrices_are_rounded_to_float_or_kept(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    utterances = {f"u{i}": rng.normal(size=(i + 3, DIM)) for i in range(5)}  # float64: DM
    scp = write(tmp_path, utterances)
    assert deserializer(scp).describe()["matrices"] == {"DM": 5}
    assert_same(read_all(deserializer(scp)), {k: v.astype(np.float32) for k, v in utterances.items()})
    assert_same(read_all(deserializer(scp, precision="double")), utterances)


def test_an_archive_is_read_directly_as_its_scp_reads_it(tmp_path: Path) -> None:
    utterances = make_utterances(20)
    scp = write(tmp_path, utterances, compression_method=2)
    direct = deserializer(tmp_path / "feats.ark", chunk_frames=40)
    assert direct.num_chunks() > 1
    assert_same(read_all(direct), read_all(deserializer(scp)))


def test_an_archive_read_directly_with_keys_short_and_long(tmp_path: Path) -> None:
    utterances = {("k" * n if n else "x"): frames_of(i, 3 + i) for i, n in enumerate([1, 250, 600, 4096, 2])}
    ark = tmp_path / "long.ark"
    kaldiio.save_ark(str(ark), utterances)
    assert_same(read_all(deserializer(ark)), {k: v.astype(np.float32) for k, v in utterances.items()})
    kaldiio.save_ark(str(ark), {**utterances, "y" * 4097: frames_of(9, 2)})  # longer than a key may be: no key
    with pytest.raises(FormatError, match="no 'key ' where a matrix"):
        deserializer(ark)


def test_several_scp_files_a_single_matrix_file_and_prefix_path(tmp_path: Path) -> None:
    first = write(tmp_path, make_utterances(3), name="a")
    kaldiio.save_mat(str(tmp_path / "one.mat"), frames_of(77, 4))
    (tmp_path / "b.scp").write_text("spk_utt077 one.mat\n")
    reader = deserializer([first, tmp_path / "b.scp"], prefix_path=str(tmp_path))
    got = read_all(reader)
    assert list(got) == [*make_utterances(3), "spk_utt077"]
    np.testing.assert_array_equal(got["spk_utt077"], frames_of(77, 4))


def test_scp_lines_with_tabs_crlf_spaces_in_paths_and_archives_shared_across_scp_files(tmp_path: Path) -> None:
    utterances = make_utterances(6)
    folder = tmp_path / "my data"
    folder.mkdir()
    scp = write(folder, utterances)
    lines = scp.read_text().splitlines()
    tabbed = [f"  {line.replace(' ', chr(9), 1)}" for line in lines[:4]]
    (tmp_path / "a.scp").write_bytes(("\r\n".join(tabbed) + "\r\n").encode())
    (tmp_path / "b.scp").write_bytes(("\n\n".join(lines[4:]) + "\n \t\n").encode())
    reader = deserializer([tmp_path / "a.scp", tmp_path / "b.scp"])
    assert_same(read_all(reader), kaldiio_of(scp))
    assert reader.describe()["files"] == 1  # (one archive, opened once whichever scp file names it)


def _scp_model(data: bytes) -> tuple[list[tuple[bytes, bytes, int, int]], list[tuple[int, int]]]:
    """What the scp parser should find: entries (key, path, offset, checked) and problems (why, line)."""
    entries, problems = [], []
    for number, line in enumerate(data.split(b"\n"), 1):
        words = line.split(None, 1)
        if not words:
            continue
        if len(words) == 1:
            problems.append((1, number))
            break
        key, target = words[0], words[1].strip()
        if target.endswith((b"|", b"]")):
            problems.append((2 if target.endswith(b"|") else 3, number))
            break
        archive, colon, tail = target.rpartition(b":")
        if colon and archive and tail and all(48 <= c <= 57 for c in tail):
            if int(tail) >= 1 << 63:
                problems.append((4, number))
                continue
            entries.append((key, archive, int(tail), 1))
        else:
            entries.append((key, target, 0, 0))
    return entries, problems


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["", " ", "\t", " \t"]),
            st.text("ab:\u00e9 ", min_size=0, max_size=4),
            st.sampled_from([" ", "\t", "  ", ""]),
            st.text("xy/. :\t", min_size=0, max_size=6),
            st.sampled_from(["", ":0", ":12", ":007", ":9223372036854775807", ":9223372036854775808", " |", "]"]),
            st.sampled_from(["", " ", "\r", "\t\r"]),
        ),
        max_size=8,
    )
)
def test_the_native_scp_parser_agrees_with_a_model(lines: list[tuple[str, ...]]) -> None:
    data = "\n".join("".join(parts) for parts in lines).encode()
    scp = _native.kaldi_scp(data)
    entries, problems = _scp_model(data)
    keys = [bytes(scp.key_blob[a:b]) for a, b in zip(scp.key_offsets[:-1], scp.key_offsets[1:])]
    paths = [scp.paths[i].encode("utf-8", "surrogateescape") for i in scp.path_ids]
    got = list(zip(keys, paths, scp.offsets.tolist(), scp.checked_keys.tolist()))
    assert got == entries
    assert list(zip(scp.problems.tolist(), scp.problem_lines.tolist())) == problems
    assert len(set(scp.paths)) == len(scp.paths)


def test_context_windows_repeat_the_edge_frames(tmp_path: Path) -> None:
    utterances = make_utterances(4)
    scp = write(tmp_path, utterances)
    for options in ({"context": (2, 1)}, {"shape": 3 * DIM}):
        reader = deserializer(scp, **options)
        left, right = reader.context
        for key, values in read_all(reader).items():
            frames = utterances[key]
            n = len(frames)
            expected = np.concatenate(
                [frames[np.clip(np.arange(n) + j, 0, n - 1)] for j in range(-left, right + 1)], axis=1
            )
            np.testing.assert_array_equal(values, expected)


def test_one_file_per_utterance_reads_in_groups_of_files(tmp_path: Path) -> None:
    utterances = make_utterances(70)
    lines = []
    for key, values in utterances.items():
        kaldiio.save_ark(str(tmp_path / f"{key}.ark"), {key: values}, scp=str(tmp_path / f"{key}.scp"))
        lines.append((tmp_path / f"{key}.scp").read_text())
    (tmp_path / "all.scp").write_text("".join(lines))
    reader = deserializer(tmp_path / "all.scp", context=(1, 1), chunk_frames=10**6)
    assert reader.num_chunks() == 1
    got = read_all(reader)
    assert list(got) == list(utterances)
    for key, frames in utterances.items():
        np.testing.assert_array_equal(got[key][:, DIM : 2 * DIM], frames)


# ------------------------------------------------------------------------------------------ with MLF labels
def corpus_with_labels(tmp_path: Path, count: int = 12) -> tuple[Path, str, dict[str, np.ndarray]]:
    utterances = make_utterances(count)
    scp = write(tmp_path, utterances, compression_method=None)
    labels = {key: [(t, t + 1, STATES[(i + t) % len(STATES)]) for t in range(len(f))]
              for i, (key, f) in enumerate(utterances.items())}  # fmt: skip
    write_mlf(tmp_path / "labels.mlf", labels)
    (tmp_path / "states.list").write_text("\n".join(STATES) + "\n")
    return scp, str(tmp_path / "states.list"), utterances


def labels_reader(tmp_path: Path) -> HTKMLFDeserializer:
    streams = StreamDefs(labels=StreamDef(shape=len(STATES), mlf=str(tmp_path / "labels.mlf")))
    return HTKMLFDeserializer(str(tmp_path / "states.list"), streams)


def check_alignment(minibatches: list[Any]) -> int:
    """Every frame's label is the one its features encode; returns the frames seen."""
    frames = 0
    for minibatch in minibatches:
        feats = [np.asarray(s) for s in minibatch["feats"].as_sequences()]
        labels = minibatch["labels"].as_sequences()
        for f, lab in zip(feats, labels):
            dense = lab.toarray() if hasattr(lab, "toarray") else np.asarray(lab)
            f = f.reshape(-1, DIM)
            if not len(f):  # (an empty slot of truncated BPTT)
                continue
            utterance, t = f[:, 0] // 1000, (f[:, 0] % 1000) // 10
            assert dense.reshape(len(f), -1).argmax(axis=1).tolist() == ((utterance + t) % len(STATES)).tolist()
            frames += len(f)
    return frames


@pytest.mark.parametrize("mode", [{}, {"frame_mode": True}, {"truncation_length": 4}])
def test_a_composite_joins_mlf_labels_by_key(tmp_path: Path, mode: dict[str, Any]) -> None:
    scp, _, utterances = corpus_with_labels(tmp_path)
    source = MinibatchSource(
        [deserializer(scp, chunk_frames=30), labels_reader(tmp_path)], max_sweeps=1, randomization_window_in_chunks=2,
        **mode,
    )  # fmt: skip
    minibatches = read(source, 16)
    assert check_alignment(minibatches) == sum(len(f) for f in utterances.values())
    if mode == {"frame_mode": True}:
        seen = sorted(k for m in minibatches for k in keys_of(m))
        assert seen == sorted((k, t) for k, f in utterances.items() for t in range(len(f)))


def test_sequence_mode_gives_each_utterance_whole(tmp_path: Path) -> None:
    scp, _, utterances = corpus_with_labels(tmp_path)
    source = MinibatchSource([deserializer(scp), labels_reader(tmp_path)], randomize=False, max_sweeps=1)
    minibatch = source.next_minibatch(10_000)
    assert keys_of(minibatch) == list(utterances)
    for key, values in zip(keys_of(minibatch), minibatch["feats"].as_sequences()):
        np.testing.assert_array_equal(np.asarray(values).reshape(-1, DIM), utterances[key])


@pytest.mark.parametrize("mode", [{}, {"frame_mode": True}, {"truncation_length": 3}])
def test_a_checkpoint_restores_exactly(tmp_path: Path, mode: dict[str, Any]) -> None:
    scp = write(tmp_path, make_utterances(30), compression_method=2)

    def source() -> MinibatchSource:
        return MinibatchSource(deserializer(scp, chunk_frames=40), randomization_window_in_chunks=2, **mode)

    first = source()
    read(first, 6, limit=5)
    state = first.get_checkpoint_state()
    rest = [snapshot(m) for m in read(first, 6, limit=12)]
    again = source()
    again.restore_from_checkpoint(state)
    assert [snapshot(m) for m in read(again, 6, limit=12)] == rest


def test_a_pickled_copy_reads_the_same(tmp_path: Path) -> None:
    scp = write(tmp_path, make_utterances(10))
    reader = deserializer(scp, context=(1, 0), chunk_frames=20)
    copy = pickle.loads(pickle.dumps(reader))
    assert copy.fingerprint() == reader.fingerprint()
    assert_same(read_all(copy), read_all(reader))


# ------------------------------------------------------------------------------------------ bad input
def patch(path: Path, offset: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def scp_offsets(scp: Path) -> dict[str, int]:
    return {k: int(p.rsplit(":", 1)[1]) for k, p in (line.split() for line in scp.read_text().splitlines())}


def test_a_truncated_archive_names_the_archive_offset_and_key(tmp_path: Path) -> None:
    utterances = make_utterances(5)
    scp = write(tmp_path, utterances)
    ark = tmp_path / "feats.ark"
    os.truncate(ark, ark.stat().st_size - 3)
    last = list(utterances)[-1]
    with pytest.raises(FormatError, match="past the end of the archive") as error:
        deserializer(scp)
    where = error.value.location
    assert (where.file, where.offset, where.sequence_key) == (str(ark), scp_offsets(scp)[last], last)
    reader = deserializer(scp, max_errors=1)
    assert reader.errors.count == 1 and list(read_all(reader)) == list(utterances)[:-1]
    with pytest.raises(FormatError, match="past the end"):  # scanned directly: the same
        deserializer(ark)
    assert list(read_all(deserializer(ark, max_errors=1))) == list(utterances)[:-1]


@pytest.mark.parametrize(
    ("data", "at", "message"),
    [
        (b"XM ", 2, "unknown Kaldi matrix type 'XM'"),
        (b"\0C", 0, "no binary marker"),
        (b"\x05", 5, "size markers"),
        (b"\xff\xff\xff\x7f", 6, "past the end of the archive"),  # rows
        (b"\xff\xff\xff\xff", 6, "negative dimensions"),
    ],
)
def test_damaged_headers_are_named_or_skipped(tmp_path: Path, data: bytes, at: int, message: str) -> None:
    utterances = make_utterances(4)
    scp = write(tmp_path, utterances)
    second = list(utterances)[1]
    offset = scp_offsets(scp)[second]
    patch(tmp_path / "feats.ark", offset + at, data)
    with pytest.raises(FormatError, match=message) as error:
        deserializer(scp)
    assert (error.value.location.offset, error.value.location.sequence_key) == (offset, second)
    reader = deserializer(scp, max_errors=1)
    assert list(read_all(reader)) == [k for k in utterances if k != second]
    with pytest.raises(MaxErrorsExceeded):
        patch(tmp_path / "feats.ark", scp_offsets(scp)[list(utterances)[2]], b"\0C")
        deserializer(scp, max_errors=1)


def test_a_key_mismatch_between_scp_and_archive(tmp_path: Path) -> None:
    scp = write(tmp_path, make_utterances(3))
    scp.write_text(scp.read_text().replace("spk_utt001 ", "spk_utt009 "))
    with pytest.raises(FormatError, match=r"key mismatch.*'spk_utt009'.*'spk_utt001 '") as error:
        deserializer(scp)
    assert error.value.location.sequence_key == "spk_utt009"
    assert list(read_all(deserializer(scp, max_errors=1))) == ["spk_utt000", "spk_utt002"]


def test_a_dimension_differing_from_the_first_or_the_stream(tmp_path: Path) -> None:
    first = write(tmp_path, make_utterances(2), name="a")
    other = write(tmp_path, {"wide": frames_of(9, 3, DIM + 1)}, name="b")
    with pytest.raises(FormatError, match=r"6 columns, the stream's matrices 5 .*'spk_utt000'") as error:
        deserializer([first, other])
    assert error.value.location.sequence_key == "wide"
    assert len(read_all(deserializer([first, other], max_errors=1))) == 2
    with pytest.raises(ConfigError, match="shape 4 differs from the feature dimension 5"):
        deserializer(first, shape=4)
    with pytest.raises(ConfigError, match="shape 5 differs from the feature dimension 6"):
        deserializer(other, context=(1, 1), shape=5)


@pytest.mark.parametrize("empty", [(0, 0), (0, DIM), (3, 0)])
def test_an_empty_matrix_first_is_a_bad_record_not_the_dimension(tmp_path: Path, empty: tuple[int, int]) -> None:
    utterances = {"empty": np.zeros(empty, np.float32), **make_utterances(2)}  # Kaldi writes an empty one 0 x 0
    scp = write(tmp_path, utterances)
    ark = tmp_path / "feats.ark"
    message = "no row" if empty[0] == 0 else "no column"
    for source in (scp, ark):  # listed by the scp file, or scanned
        with pytest.raises(FormatError, match=message) as error:
            deserializer(source)
        where = error.value.location
        assert (where.file, where.offset, where.sequence_key) == (str(ark), scp_offsets(scp)["empty"], "empty")
        reader = deserializer(source, max_errors=5)
        assert reader.errors.count == 1 and reader.frame_dim == DIM
        assert_same(read_all(reader), {k: v for k, v in utterances.items() if k != "empty"})
    only_empty = write(tmp_path, {"a": np.zeros((0, 0), np.float32), "b": np.zeros(empty, np.float32)}, name="e")
    with pytest.raises(ConfigError, match="no usable utterance"):
        deserializer(only_empty, max_errors=5)


def test_a_first_matrix_of_another_dimension_is_a_bad_record(tmp_path: Path) -> None:
    utterances = {"wide": frames_of(9, 2, 3 * DIM), **make_utterances(3)}
    scp = write(tmp_path, utterances)
    with pytest.raises(FormatError, match=rf"{3 * DIM} columns, the stream's matrices {DIM} .*'spk_utt000'") as e:
        deserializer(scp)
    assert (e.value.location.offset, e.value.location.sequence_key) == (scp_offsets(scp)["wide"], "wide")
    reader = deserializer(scp, max_errors=5)
    assert reader.errors.count == 1 and reader.context == (0, 0)
    assert_same(read_all(reader), {k: v for k, v in utterances.items() if k != "wide"})
    # shape 3 * DIM with no context: the first matrix fits it exactly (the others, of DIM, are the bad ones) ...
    assert list(read_all(deserializer(scp, shape=3 * DIM, max_errors=5))) == ["wide"]
    # ... a first matrix fitting no window is skipped for one whose window is inferred (DIM x 3 frames)
    odd = {"odd": frames_of(8, 2, DIM + 1), **make_utterances(3)}
    reader = deserializer(write(tmp_path, odd, name="odd"), shape=3 * DIM, max_errors=5)
    assert reader.context == (1, 1) and reader.errors.count == 1 and "odd" not in read_all(reader)
    with pytest.raises(ConfigError, match="not an odd multiple"):  # no matrix fits: the shape is wrong
        deserializer(scp, shape=DIM + 1, max_errors=5)


@pytest.mark.parametrize(
    ("offset", "message", "in_scp"),
    [
        ("9223372036854775800", "past the end of the archive", False),
        ("9223372036854775807", "past the end of the archive", False),
        ("9223372036854775808", "not below 2\\*\\*63", True),
        ("99999999999999999999", "not below 2\\*\\*63", True),
    ],
)
def test_a_huge_scp_offset_is_a_bad_entry(tmp_path: Path, offset: str, message: str, in_scp: bool) -> None:
    scp = write(tmp_path, make_utterances(2))
    ark = tmp_path / "feats.ark"
    bad = tmp_path / "bad.scp"
    bad.write_text(scp.read_text() + f"huge {ark}:{offset}\n")
    with pytest.raises(FormatError, match=message) as error:
        deserializer(bad)
    where = error.value.location
    assert where.sequence_key == "huge"
    assert (where.file, where.line) == ((str(bad), 3) if in_scp else (str(ark), None))
    reader = deserializer(bad, max_errors=1)
    assert reader.errors.count == 1 and list(read_all(reader)) == ["spk_utt000", "spk_utt001"]


def test_a_header_read_failing_is_reported_for_its_entry(tmp_path: Path) -> None:
    """The native header reader: a read that fails (here an offset the system refuses) is the entry's error."""
    scp = write(tmp_path, make_utterances(1))
    fd = os.open(tmp_path / "feats.ark", os.O_RDONLY)
    try:
        keys = np.frombuffer(b"hugespk_utt000", dtype=np.uint8)
        found = _native.kaldi_headers(
            fd, np.array([2**63 - 8, scp_offsets(scp)["spk_utt000"]], dtype=np.int64), keys,
            np.array([0, 4, 14], dtype=np.int64), np.ones(2, dtype=np.uint8),
        )  # fmt: skip
    finally:
        os.close(fd)
    kinds, rows, cols, _, errors = found
    assert kinds.tolist()[0] == -1 and (rows[1], cols[1]) == (len(make_utterances(1)["spk_utt000"]), DIM)
    assert [j for j, _ in errors] == [0]
    assert "cannot read the matrix header at offset 9223372036854775800" in errors[0][1]


def test_text_archives_vectors_pipes_and_ranges_are_refused(tmp_path: Path) -> None:
    kaldiio.save_ark(str(tmp_path / "t.ark"), {"u": frames_of(1, 2)}, scp=str(tmp_path / "t.scp"), text=True)
    with pytest.raises(FormatError, match="text-mode"):
        deserializer(tmp_path / "t.scp")
    kaldiio.save_ark(str(tmp_path / "v.ark"), {"u": np.ones(3, np.float32)}, scp=str(tmp_path / "v.scp"))
    with pytest.raises(FormatError, match="vector"):
        deserializer(tmp_path / "v.scp")
    (tmp_path / "p.scp").write_text("u copy-feats ark:a.ark ark:- |\n")
    with pytest.raises(FormatError, match="pipe") as error:
        deserializer(tmp_path / "p.scp")
    assert error.value.location.line == 1
    (tmp_path / "r.scp").write_text("\nu a.ark:12[0:3]\n")
    with pytest.raises(FormatError, match=r"\[\.\.\.\]") as error:
        deserializer(tmp_path / "r.scp")
    assert error.value.location.line == 2


def test_a_missing_archive_and_duplicate_keys(tmp_path: Path) -> None:
    scp = write(tmp_path, make_utterances(3))
    text = scp.read_text()
    (tmp_path / "x.scp").write_text(text + text.splitlines()[0] + "\n" + "gone /nonexistent/x.ark:9\n")
    with pytest.raises(FormatError, match="listed again"):
        deserializer(tmp_path / "x.scp")
    reader = deserializer(tmp_path / "x.scp", max_errors=2)
    assert reader.errors.count == 2 and len(read_all(reader)) == 3
    with pytest.raises(FormatError, match="cannot read Kaldi archive"):
        deserializer(tmp_path / "x.scp", max_errors=1)


def test_an_archive_changed_in_place_is_detected(tmp_path: Path) -> None:
    scp = write(tmp_path, make_utterances(4))
    reader = deserializer(scp)
    patch(tmp_path / "feats.ark", scp_offsets(scp)["spk_utt000"] + 20, b"\1\2\3\4")
    with pytest.raises(FormatError, match="changed") as error:
        reader.get_chunk(0)
    assert error.value.location.file == str(tmp_path / "feats.ark")
    assert error.value.location.sequence_key == "spk_utt000"


def test_configuration_errors(tmp_path: Path) -> None:
    scp = write(tmp_path, make_utterances(2))
    with pytest.raises(ConfigError, match="scp"):
        KaldiDeserializer(StreamDefs(feats=StreamDef(shape=DIM)))
    with pytest.raises(ConfigError, match="one stream"):
        KaldiDeserializer(StreamDefs(a=StreamDef(shape=DIM, scp=str(scp)), b=StreamDef(shape=DIM, scp=str(scp))))
    group = KaldiDeserializer.per_stream(
        StreamDefs(a=StreamDef(shape=DIM, scp=str(scp)), b=StreamDef(shape=DIM, scp=str(scp)))
    )
    assert len(group) == 2


# ------------------------------------------------------------------------------------------ property
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    shapes=st.lists(st.tuples(st.integers(1, 40), st.integers(1, 9)), min_size=1, max_size=5),
    method=st.sampled_from(METHODS),
    seed=st.integers(0, 2**16),
)
def test_random_matrices_round_trip(
    tmp_path: Path, shapes: list[tuple[int, int]], method: int | None, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    cols = shapes[0][1]
    utterances = {f"k{i}": (rng.normal(size=(rows, cols)) * rng.uniform(0.1, 100)).astype(np.float32)
                  for i, (rows, _) in enumerate(shapes)}  # fmt: skip
    scp = write(tmp_path, utterances, name=f"h{seed}_{method}", compression_method=method)
    assert_same(read_all(deserializer(scp, shape=cols, chunk_frames=17)), kaldiio_of(scp))


# ------------------------------------------------------------------------------------------ options
@pytest.mark.parametrize("mode", [{}, {"frame_mode": True}, {"truncation_length": 3}])
def test_a_broadcast_stream_repeats_its_row_over_the_utterance(tmp_path: Path, mode: dict[str, Any]) -> None:
    utterances = make_utterances(12)
    keys = list(utterances)
    feats = write(tmp_path, utterances)
    ivectors = {key: (100.0 + i + np.arange(3, dtype=np.float32))[None, :] for i, key in enumerate(keys)}
    ivec = write(tmp_path, ivectors, name="ivec", compression_method=3)
    expected_rows = {k: np.asarray(v)[0] for k, v in kaldiio.load_scp(str(ivec)).items()}
    group = KaldiDeserializer.per_stream(
        StreamDefs(feats=StreamDef(shape=DIM, scp=str(feats)), ivec=StreamDef(shape=3, scp=str(ivec), broadcast=True)),
        chunk_frames=30,
    )
    source = MinibatchSource(group, randomization_window_in_chunks=2, max_sweeps=1, **mode)
    frames = 0
    for minibatch in read(source, 7):
        f, iv = minibatch["feats"], minibatch["ivec"]
        valid = f.mask.astype(bool)
        frame_keys = [f"spk_utt{int(v) // 1000:03d}" for v in f.asarray()[..., 0][valid]]
        np.testing.assert_array_equal(iv.asarray()[valid], np.array([expected_rows[k] for k in frame_keys]))
        frames += len(frame_keys)
    assert frames == sum(len(f) for f in utterances.values())
    with pytest.raises(FormatError, match="exactly one row"):
        deserializer(feats, broadcast=True)


def test_long_utterances_are_skipped(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    utterances = make_utterances(10)
    scp = write(tmp_path, utterances)
    reader = deserializer(scp, max_sequence_length=10)
    assert list(read_all(reader)) == [k for k, f in utterances.items() if len(f) <= 10]
    assert reader.skipped_too_long == sum(len(f) > 10 for f in utterances.values()) > 0
    assert "longer than max_sequence_length=10" in caplog.text


def test_an_offset_past_the_end_or_before_the_key(tmp_path: Path) -> None:
    scp = write(tmp_path, make_utterances(2))
    ark = tmp_path / "feats.ark"
    (tmp_path / "x.scp").write_text(f"far {ark}:{ark.stat().st_size + 10}\nnear {ark}:2\n")
    with pytest.raises(FormatError, match="past the end of the archive") as error:
        deserializer(tmp_path / "x.scp")
    assert (error.value.location.file, error.value.location.sequence_key) == (str(ark), "far")
    with pytest.raises(FormatError, match="too close to the start"):
        deserializer(tmp_path / "x.scp", max_errors=1)
    assert scp.exists()


def test_without_a_shape_the_dimension_is_the_matrices_and_the_command_line_knows_kaldi(tmp_path: Path) -> None:
    import subprocess
    import sys

    from cntkio._src.formats.sniff import detect_bytes

    utterances = make_utterances(5)
    scp = write(tmp_path, utterances)
    reader = KaldiDeserializer(StreamDefs(feats=StreamDef(scp=str(scp))))
    assert reader.frame_dim == DIM and reader.stream_infos()[0].shape == (DIM,)
    assert_same(read_all(reader), utterances)
    windowed = KaldiDeserializer(StreamDefs(feats=StreamDef(scp=str(scp), context=(1, 1))))
    assert windowed.stream_infos()[0].shape == (3 * DIM,)
    ark = next(tmp_path.glob("*.ark"))
    assert detect_bytes(ark.read_bytes()[:4096], str(ark)).format == "kaldi"
    assert detect_bytes(scp.read_bytes(), str(scp)).format == "kaldi"
    for path in (scp, ark):
        out = subprocess.run([sys.executable, "-m", "cntkio", "inspect", str(path)], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        assert "utterances 5" in out.stdout and f"dim        {DIM}" in out.stdout
