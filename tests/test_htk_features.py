"""HTKFeatureDeserializer: SCP + HTK archives read by offset, context windows, the kind and dimension rules, bad
entries (errors naming the SCP file, line and utterance, or skipped with max_errors), and the reader's modes."""

from __future__ import annotations

import logging
import pickle
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cntkio import (
    ConfigError,
    CTFDeserializer,
    DeserializerGroup,
    FormatError,
    HTKFeatureDeserializer,
    MaxErrorsExceeded,
    MinibatchSource,
    StreamDef,
    StreamDefs,
)
from cntkio.htk import ScpEntry, write_archive, write_features, write_scp
from order_helpers import assert_exactly_once, keys_of, read, snapshot

DIM = 4


def frames_of(utterance: int, count: int, dim: int = DIM) -> np.ndarray:
    """Values that encode (utterance, frame, dim): any misalignment changes them."""
    t = np.arange(count)[:, None]
    d = np.arange(dim)[None, :]
    return (utterance * 1000 + t * 10 + d).astype(np.float32)


def make_utterances(count: int, seed: int = 0, first: int = 0) -> dict[str, np.ndarray]:
    lengths = np.random.default_rng(seed).integers(1, 9, size=count).tolist()
    return {f"spk_utt{first + i:03d}": frames_of(first + i, n) for i, n in enumerate(lengths)}


def deserializer(scp: Any, shape: int = DIM, **options: Any) -> HTKFeatureDeserializer:
    stream_options = {k: options.pop(k) for k in ("context", "max_sequence_length") if k in options}
    return HTKFeatureDeserializer(StreamDefs(feats=StreamDef(shape=shape, scp=scp, **stream_options)), **options)


def corpus(tmp_path: Path, count: int = 12, archives: int = 1, **write: Any) -> tuple[Path, dict[str, np.ndarray]]:
    """``archives`` archives of ``count`` utterances in all, one SCP listing them."""
    utterances = make_utterances(count)
    names = list(utterances)
    entries: list[ScpEntry] = []
    for a in range(archives):
        part = {k: utterances[k] for k in names[a::archives]}
        entries += write_archive(tmp_path / f"part{a}.ark", part, **write)
    scp = tmp_path / "all.scp"
    write_scp(scp, entries)
    return scp, {e.key: utterances[e.key] for e in entries}


def read_all(reader: HTKFeatureDeserializer) -> dict[str, np.ndarray]:
    """Every utterance through get_chunk, in index order."""
    out: dict[str, np.ndarray] = {}
    for c in range(reader.num_chunks()):
        data = reader.get_chunk(c)["feats"]
        keys = reader.chunk_index(c).keys
        for key, a, b in zip(keys, data.seq_offsets[:-1].tolist(), data.seq_offsets[1:].tolist()):
            out[key] = data.values[a:b]
    return out


# ------------------------------------------------------------------------------------------ reading
@pytest.mark.parametrize("big_endian", [True, False])
@pytest.mark.parametrize("archives", [1, 3])
def test_every_utterance_is_read_exactly(tmp_path: Path, big_endian: bool, archives: int) -> None:
    scp, utterances = corpus(tmp_path, 20, archives, big_endian=big_endian)
    reader = deserializer(scp, chunk_frames=10)
    assert reader.num_chunks() > 2
    got = read_all(reader)
    assert list(got) == list(utterances)
    for key, frames in utterances.items():
        assert got[key].dtype == np.float32
        np.testing.assert_array_equal(got[key], frames)
    source = MinibatchSource(reader, randomize=False, max_sweeps=1)
    minibatch = source.next_minibatch(10_000)
    assert keys_of(minibatch) == list(utterances)
    rows = minibatch["feats"].asarray()
    for row, frames in zip(rows, utterances.values()):
        np.testing.assert_array_equal(row[: len(frames)], frames)


def test_double_precision_and_the_kind_are_kept(tmp_path: Path) -> None:
    scp, utterances = corpus(tmp_path, 5, kind="MFCC", qualifiers="_E_D")
    reader = deserializer(scp, precision="double")
    assert reader.stream_infos()[0].dtype == np.float64
    assert reader.header.base_kind == "MFCC" and reader.header.qualifiers == "_E_D"
    got = read_all(reader)
    for key, frames in utterances.items():
        np.testing.assert_array_equal(got[key], frames.astype(np.float64))


@pytest.mark.parametrize("big_endian", [True, False])
def test_compressed_archives_decode_within_the_quantisation_error(tmp_path: Path, big_endian: bool) -> None:
    scp, utterances = corpus(tmp_path, 10, compressed=True, big_endian=big_endian)
    got = read_all(deserializer(scp))
    everything = np.concatenate(list(utterances.values()))
    step = (everything.max(axis=0) - everything.min(axis=0)) / 65534
    for key, frames in utterances.items():
        assert np.all(np.abs(got[key] - frames) <= step * 1.01 + 1e-6)


def test_the_guid_of_kind_12_is_skipped(tmp_path: Path) -> None:
    scp, utterances = corpus(tmp_path, 4, kind="ANON", guid=bytes(range(16)))
    got = read_all(deserializer(scp))
    for key, frames in utterances.items():
        np.testing.assert_array_equal(got[key], frames)


def test_unranged_entries_read_the_whole_file(tmp_path: Path) -> None:
    utterances = make_utterances(5)
    entries = []
    for key, frames in utterances.items():
        write_features(tmp_path / f"{key}.mfc", frames, big_endian=key.endswith("1"))
        entries.append(ScpEntry(key, f"{tmp_path}/{key}.mfc"))
    write_scp(tmp_path / "whole.scp", entries)
    reader = deserializer(tmp_path / "whole.scp")
    assert reader.describe()["files"] == 5
    got = read_all(reader)
    assert list(got) == list(utterances)
    for key, frames in utterances.items():
        np.testing.assert_array_equal(got[key], frames)


def test_several_scp_files_and_prefix_path(tmp_path: Path) -> None:
    first = make_utterances(4, seed=1)
    second = make_utterances(3, seed=2, first=10)
    (tmp_path / "feats").mkdir()
    entries1 = write_archive(tmp_path / "feats" / "a.ark", first)
    entries2 = write_archive(tmp_path / "feats" / "b.ark", second)
    write_scp(tmp_path / "one.scp", [ScpEntry(e.key, "a.ark", e.start, e.end) for e in entries1])
    write_scp(tmp_path / "two.scp", [ScpEntry(e.key, "b.ark", e.start, e.end) for e in entries2])
    reader = deserializer([tmp_path / "one.scp", str(tmp_path / "two.scp")], prefix_path=str(tmp_path / "feats"))
    got = read_all(reader)
    assert list(got) == [*first, *second]
    for key, frames in {**first, **second}.items():
        np.testing.assert_array_equal(got[key], frames)
    assert reader.source_name == str(tmp_path / "one.scp")


def test_chunks_follow_the_scp_order_and_the_frame_limit(tmp_path: Path) -> None:
    scp, utterances = corpus(tmp_path, 30)
    lengths = [len(f) for f in utterances.values()]
    reader = deserializer(scp, chunk_frames=12)
    expected, filled = [[]], 0  # type: ignore[var-annotated]
    for key, n in zip(utterances, lengths):
        if filled > 12:
            expected.append([])
            filled = 0
        expected[-1].append(key)
        filled += n
    assert [reader.chunk_index(c).keys for c in range(reader.num_chunks())] == expected


# ------------------------------------------------------------------------------------------ context
def test_context_windows_repeat_the_edge_frames(tmp_path: Path) -> None:
    scp, utterances = corpus(tmp_path, 8)
    reader = deserializer(scp, context=(2, 1), chunk_frames=5)
    assert reader.stream_infos()[0].shape == (DIM * 4,)
    got = read_all(reader)
    for key, frames in utterances.items():
        n = len(frames)
        expected = np.concatenate([frames[np.clip(np.arange(n) + j, 0, n - 1)] for j in (-2, -1, 0, 1)], axis=1)
        np.testing.assert_array_equal(got[key], expected)


def test_an_odd_multiple_of_the_file_dim_infers_the_window(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    scp, _ = corpus(tmp_path, 4)
    with caplog.at_level(logging.INFO, logger="cntkio"):
        reader = deserializer(scp, shape=DIM * 3)
    assert reader.context == (1, 1) and "inferred" in caplog.text
    explicit = read_all(deserializer(scp, context=(1, 1)))
    for key, values in read_all(reader).items():
        np.testing.assert_array_equal(values, explicit[key])


@pytest.mark.parametrize(("shape", "context"), [(DIM * 3, (1, 1)), (DIM * 2, None), (DIM + 1, None), (3, (0, 0))])
def test_a_dimension_other_than_the_files_is_an_error(tmp_path: Path, shape: int, context: Any) -> None:
    scp, _ = corpus(tmp_path, 3)
    with pytest.raises(ConfigError, match=f"dimension {DIM}"):
        deserializer(scp, shape=shape, context=context)


# ------------------------------------------------------------------------------------------ configuration
def test_configuration_errors(tmp_path: Path) -> None:
    scp, _ = corpus(tmp_path, 3)
    with pytest.raises(ConfigError, match="scp"):
        HTKFeatureDeserializer(StreamDefs(a=StreamDef(shape=DIM)))
    with pytest.raises(ConfigError, match="precision"):
        deserializer(scp, precision="half")
    with pytest.raises(ConfigError, match="odd"):
        deserializer(scp, context=4)  # type: ignore[arg-type]


def test_files_of_another_kind_are_refused_naming_both(tmp_path: Path) -> None:
    a = write_archive(tmp_path / "a.ark", make_utterances(2), kind="MFCC")
    b = write_archive(tmp_path / "b.ark", make_utterances(2, first=5), kind="FBANK")
    write_scp(tmp_path / "mixed.scp", a + b)
    with pytest.raises(FormatError, match=r"a\.ark") as error:
        deserializer(tmp_path / "mixed.scp")
    assert error.value.file.endswith("b.ark")
    c = write_archive(tmp_path / "c.ark", make_utterances(2, first=9), sample_period=50000)
    write_scp(tmp_path / "period.scp", write_archive(tmp_path / "d.ark", make_utterances(2)) + c)
    with pytest.raises(FormatError, match="period"):
        deserializer(tmp_path / "period.scp")


# ------------------------------------------------------------------------------------------ bad entries
def bad_scp(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    """Line 2 runs past the end of the archive, line 4 names a missing archive."""
    utterances = make_utterances(4)
    entries = write_archive(tmp_path / "a.ark", utterances)
    total = sum(len(f) for f in utterances.values())
    lines = [
        f"{entries[0].key}.mfc={entries[0].path}[{entries[0].start},{entries[0].end}]",
        f"past.mfc={entries[1].path}[{total - 2},{total + 3}]",
        f"{entries[2].key}.mfc={entries[2].path}[{entries[2].start},{entries[2].end}]",
        f"lost.mfc={tmp_path}/missing.ark[0,3]",
        f"{entries[3].key}.mfc={entries[3].path}[{entries[3].start},{entries[3].end}]",
    ]
    scp = tmp_path / "bad.scp"
    scp.write_text("\n".join(lines) + "\n")
    return scp, {k: utterances[k] for k in (entries[0].key, entries[2].key, entries[3].key)}


def test_a_range_past_the_end_names_the_scp_line_and_utterance(tmp_path: Path) -> None:
    scp, _ = bad_scp(tmp_path)
    with pytest.raises(FormatError, match="past the end") as error:
        deserializer(scp)
    assert (error.value.file, error.value.line, error.value.sequence_key) == (str(scp), 2, "past")


def test_a_missing_archive_names_the_scp_line(tmp_path: Path) -> None:
    scp, _ = bad_scp(tmp_path)
    lines = scp.read_text().splitlines()
    scp.write_text("\n".join(lines[:1] + lines[2:]) + "\n")
    with pytest.raises(FormatError, match=r"missing\.ark") as error:
        deserializer(scp)
    assert (error.value.file, error.value.line, error.value.sequence_key) == (str(scp), 3, "lost")


def test_start_after_end_names_the_scp_line(tmp_path: Path) -> None:
    entries = write_archive(tmp_path / "a.ark", make_utterances(2))
    scp = tmp_path / "rev.scp"
    scp.write_text(f"ok.mfc={entries[0].path}[0,0]\nrev.mfc={entries[0].path}[3,1]\n")
    with pytest.raises(FormatError, match="start > end") as error:
        deserializer(scp)
    assert (error.value.file, error.value.line) == (str(scp), 2)


def test_max_errors_skips_and_counts_bad_utterances(tmp_path: Path) -> None:
    scp, good = bad_scp(tmp_path)
    reader = deserializer(scp, max_errors=2)
    assert reader.errors.count == 2
    got = read_all(reader)
    assert list(got) == list(good)
    for key, frames in good.items():
        np.testing.assert_array_equal(got[key], frames)
    with pytest.raises(MaxErrorsExceeded):
        deserializer(scp, max_errors=1)


def test_a_truncated_archive_is_caught_at_index_time(tmp_path: Path) -> None:
    scp, utterances = corpus(tmp_path, 3)
    archive = tmp_path / "part0.ark"
    archive.write_bytes(archive.read_bytes()[:-4])
    with pytest.raises(FormatError, match="truncated") as error:
        deserializer(scp)
    assert error.value.sequence_key == list(utterances)[-1]


@pytest.mark.parametrize("big_endian", [True, False])
def test_a_whole_file_longer_than_its_header_says_is_refused(tmp_path: Path, big_endian: bool) -> None:
    """A file listed without a range is read by its header's nSamples: a header claiming fewer frames than the file
    holds must not cut the utterance short without a word (nSamples x sampleSize is checked against the size)."""
    frames = {"a": frames_of(0, 6), "b": frames_of(1, 5)}
    for key, values in frames.items():
        write_features(tmp_path / f"{key}.mfc", values, big_endian=big_endian)
    damaged = tmp_path / "b.mfc"
    data = bytearray(damaged.read_bytes())
    data[0:4] = (3).to_bytes(4, "big" if big_endian else "little")  # nSamples 5 -> 3
    damaged.write_bytes(bytes(data))
    write_scp(tmp_path / "whole.scp", [ScpEntry(key, str(tmp_path / f"{key}.mfc")) for key in frames])
    with pytest.raises(FormatError, match=r"more than its header gives \(nSamples 3 x sampleSize 16") as error:
        deserializer(tmp_path / "whole.scp")
    assert error.value.sequence_key == "b" and "b.mfc" in str(error.value)
    reader = deserializer(tmp_path / "whole.scp", max_errors=1)  # skipped and counted, never read cut short
    assert reader.errors.count == 1
    got = read_all(reader)
    assert list(got) == ["a"]
    np.testing.assert_array_equal(got["a"], frames["a"])
    write_scp(tmp_path / "ranged.scp", [ScpEntry("b", str(damaged), 0, 2)])  # a range inside the header's frames
    np.testing.assert_array_equal(read_all(deserializer(tmp_path / "ranged.scp"))["b"], frames["b"][:3])


def test_long_utterances_are_skipped_and_reported(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    scp, utterances = corpus(tmp_path, 20)
    with caplog.at_level(logging.WARNING, logger="cntkio"):
        reader = deserializer(scp, max_sequence_length=4)
    kept = [k for k, f in utterances.items() if len(f) <= 4]
    assert list(read_all(reader)) == kept
    assert reader.skipped_too_long == len(utterances) - len(kept) > 0
    assert "max_sequence_length=4" in caplog.text


def test_duplicate_keys_are_dropped_and_reported(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    utterances = make_utterances(4)
    entries = write_archive(tmp_path / "a.ark", utterances)
    write_scp(tmp_path / "dup.scp", [*entries, ScpEntry(entries[1].key, entries[1].path, 0, 0)])
    with caplog.at_level(logging.WARNING, logger="cntkio"):
        reader = deserializer(tmp_path / "dup.scp")
    assert list(read_all(reader)) == [e.key for e in entries if e.key != entries[1].key]
    assert reader.duplicates is not None and reader.duplicates.entries == 2
    assert "duplicated" in caplog.text


# ------------------------------------------------------------------------------------------ reader modes
def test_frame_mode_gives_every_frame_with_its_context(tmp_path: Path) -> None:
    scp, utterances = corpus(tmp_path, 10)
    source = MinibatchSource(deserializer(scp, context=(1, 1)), randomize=False, max_sweeps=1, frame_mode=True)
    minibatches = read(source, 7)
    keys = [k for m in minibatches for k in keys_of(m)]
    assert keys == [(key, t) for key, f in utterances.items() for t in range(len(f))]
    values = np.concatenate([m["feats"].asarray().reshape(-1, 3 * DIM) for m in minibatches])
    centre = values[:, DIM : 2 * DIM]
    np.testing.assert_array_equal(centre, np.concatenate(list(utterances.values())))


@pytest.mark.parametrize("frame_mode", [False, True])
def test_randomized_sweeps_give_every_unit_once(tmp_path: Path, frame_mode: bool) -> None:
    scp, utterances = corpus(tmp_path, 40, archives=2)
    reader = deserializer(scp, chunk_frames=15)
    source = MinibatchSource(
        reader, max_sweeps=2, frame_mode=frame_mode, randomization_window_in_chunks=3, randomization_seed=3
    )
    keys = [k for m in read(source, 9) for k in keys_of(m)]
    expected = [(k, t) for k, f in utterances.items() for t in range(len(f))] if frame_mode else list(utterances)
    assert_exactly_once(keys, expected, times=2)
    half = len(keys) // 2
    assert Counter(keys[:half]) == Counter(expected) and keys[:half] != expected


@pytest.mark.parametrize("mode", [{}, {"frame_mode": True}, {"truncation_length": 3}])
def test_a_checkpoint_restores_exactly(tmp_path: Path, mode: dict[str, Any]) -> None:
    scp, _ = corpus(tmp_path, 30)

    def source() -> MinibatchSource:
        return MinibatchSource(deserializer(scp, chunk_frames=10), randomization_window_in_chunks=2, **mode)

    first = source()
    read(first, 6, limit=5)
    state = first.get_checkpoint_state()
    rest = [snapshot(m) for m in read(first, 6, limit=12)]
    again = source()
    again.restore_from_checkpoint(state)
    assert [snapshot(m) for m in read(again, 6, limit=12)] == rest


def test_a_pickled_copy_reads_the_same(tmp_path: Path) -> None:
    scp, _ = corpus(tmp_path, 10, archives=2)
    reader = deserializer(scp, context=(1, 0), chunk_frames=8)
    copy = pickle.loads(pickle.dumps(reader))
    assert copy.fingerprint() == reader.fingerprint()
    for c in range(reader.num_chunks()):
        assert copy.chunk_index(c).keys == reader.chunk_index(c).keys
        np.testing.assert_array_equal(copy.get_chunk(c)["feats"].values, reader.get_chunk(c)["feats"].values)


def test_an_archive_rewritten_in_place_is_detected(tmp_path: Path) -> None:
    scp, _ = corpus(tmp_path, 4)
    reader = deserializer(scp)
    with open(tmp_path / "part0.ark", "ab") as file:
        file.write(b"\0" * 8)
    with pytest.raises(FormatError, match="changed"):
        reader.get_chunk(0)


def test_a_composite_joins_ctf_labels_by_utterance_name(tmp_path: Path) -> None:
    scp, utterances = corpus(tmp_path, 12)
    names = list(utterances)
    shuffled = np.random.default_rng(4).permutation(len(names)).tolist()
    lines = [f"{names[i]} |y {i} {t}" for i in shuffled for t in range(len(utterances[names[i]]))]
    (tmp_path / "labels.ctf").write_text("\n".join(lines) + "\n")
    labels = CTFDeserializer(tmp_path / "labels.ctf", StreamDefs(y=StreamDef(field="y", shape=2)))
    source = MinibatchSource([deserializer(scp), labels], randomize=False, max_sweeps=1, frame_mode=True)
    minibatch = source.next_minibatch(10_000)
    keys = keys_of(minibatch)
    assert keys == [(k, t) for k, f in utterances.items() for t in range(len(f))]
    y = minibatch["y"].asarray().reshape(-1, 2)
    assert y.tolist() == [[names.index(k), t] for k, t in keys]
    feats = minibatch["feats"].asarray().reshape(-1, DIM)
    np.testing.assert_array_equal(feats, np.concatenate(list(utterances.values())))
    assert source.join_report is not None and source.join_report.clean


# ------------------------------------------------------------------------------------------ several streams, broadcast
def ivectors(tmp_path: Path, keys: list[str], dim: int = 3, name: str = "iv") -> Path:
    """One frame per utterance (an i-vector) whose values encode the utterance's position."""
    vectors = {key: np.full((1, dim), 100.0 + i, dtype=np.float32) + np.arange(dim) for i, key in enumerate(keys)}
    scp = tmp_path / f"{name}.scp"
    write_scp(scp, write_archive(tmp_path / f"{name}.ark", vectors))
    return scp


def test_several_streams_give_one_deserializer_each(tmp_path: Path) -> None:
    scp, utterances = corpus(tmp_path, 12)
    keys = list(utterances)
    other = {key: frames_of(7 + i, len(f), 2) for i, (key, f) in enumerate(utterances.items())}
    other_scp = tmp_path / "other.scp"
    write_scp(other_scp, write_archive(tmp_path / "other.ark", dict(reversed(list(other.items())))))
    group = HTKFeatureDeserializer(
        StreamDefs(feats=StreamDef(shape=DIM, scp=str(scp)), deltas=StreamDef(shape=2, scp=str(other_scp))),
        chunk_frames=9,
    )
    assert isinstance(group, DeserializerGroup) and len(group) == 2
    assert [d.stream_infos()[0].name for d in group] == ["feats", "deltas"]
    assert all(isinstance(d, HTKFeatureDeserializer) and d.chunk_frames == 9 for d in group)
    for given in (group, [group]):
        source = MinibatchSource(given, randomize=False, max_sweeps=1)
        minibatch = source.next_minibatch(10_000)
        assert keys_of(minibatch) == keys
        for row, key in enumerate(keys):
            n = len(utterances[key])
            np.testing.assert_array_equal(minibatch["feats"].asarray()[row, :n], utterances[key])
            np.testing.assert_array_equal(minibatch["deltas"].asarray()[row, :n], other[key])


@pytest.mark.parametrize("mode", [{}, {"frame_mode": True}, {"truncation_length": 3}])
def test_a_broadcast_stream_repeats_its_frame_over_the_utterance(tmp_path: Path, mode: dict[str, Any]) -> None:
    scp, utterances = corpus(tmp_path, 15, archives=2)
    keys = list(utterances)
    group = HTKFeatureDeserializer(
        StreamDefs(
            feats=StreamDef(shape=DIM, scp=str(scp)),
            ivec=StreamDef(shape=3, scp=str(ivectors(tmp_path, keys)), broadcast=True),
        ),
        chunk_frames=10,
    )
    source = MinibatchSource(group, randomization_window_in_chunks=2, max_sweeps=1, **mode)
    seen: Counter[str] = Counter()
    for minibatch in read(source, 5):
        feats, ivec = minibatch["feats"], minibatch["ivec"]
        assert ivec.sequence_lengths.tolist() == feats.sequence_lengths.tolist()
        valid = feats.mask.astype(bool)
        assert (ivec.mask.astype(bool) == valid).all()
        # every frame's utterance from its feature values (rows of truncated BPTT continue into the next one)
        frame_keys = [f"spk_utt{int(v) // 1000:03d}" for v in feats.asarray()[..., 0][valid]]
        expected = np.array([100.0 + keys.index(k) + np.arange(3) for k in frame_keys])
        np.testing.assert_array_equal(ivec.asarray()[valid], expected)
        seen.update(frame_keys)
    assert seen == {key: len(f) for key, f in utterances.items()}


def test_broadcast_rules(tmp_path: Path) -> None:
    scp, utterances = corpus(tmp_path, 4)
    keys = list(utterances)
    iv = ivectors(tmp_path, keys)
    broadcast = HTKFeatureDeserializer(StreamDefs(ivec=StreamDef(shape=3, scp=str(iv), broadcast=True)))
    with pytest.raises(ConfigError, match="cannot be the primary"):
        MinibatchSource([broadcast, deserializer(scp)])
    with pytest.raises(FormatError, match="exactly one frame") as error:
        HTKFeatureDeserializer(StreamDefs(f=StreamDef(shape=DIM, scp=str(scp), broadcast=True)))
    assert error.value.file == str(scp) and error.value.sequence_key is not None


def test_a_missing_ivector_drops_the_utterance_and_is_reported(tmp_path: Path) -> None:
    scp, utterances = corpus(tmp_path, 6)
    keys = list(utterances)
    iv = ivectors(tmp_path, keys[1:])
    source = MinibatchSource(
        [deserializer(scp), HTKFeatureDeserializer(StreamDefs(ivec=StreamDef(shape=3, scp=str(iv), broadcast=True)))],
        randomize=False,
        max_sweeps=1,
    )
    assert keys_of(source.next_minibatch(10_000)) == keys[1:]
    assert source.join_report is not None and source.join_report.deserializers[1].missing.count == 1


# ------------------------------------------------------------------------------------------ many files
ONE_FILE_PER_UTTERANCE = """
import resource, sys
import numpy as np
sys.path.insert(0, {tests!r})
resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
from cntkio import MinibatchSource, StreamDef, StreamDefs
from cntkio import HTKFeatureDeserializer
from cntkio.htk import write_features
from order_helpers import keys_of, read
root = {root!r}
lines = []
for i in range(300):
    write_features(f"{{root}}/u{{i}}.htk", np.full((1 + i % 3, 2), i, dtype=np.float32))
    lines.append(f"u{{i}}=u{{i}}.htk" if i % 2 else f"u{{i}}.mfc={{root}}/u{{i}}.htk[0,{{i % 3}}]")
open(f"{{root}}/all.scp", "w").write("\\n".join(lines) + "\\n")
import os
os.chdir(root)
reader = HTKFeatureDeserializer(StreamDefs(x=StreamDef(shape=2, scp=f"{{root}}/all.scp")), chunk_frames=20)
source = MinibatchSource(reader, max_sweeps=2, randomization_window_in_chunks=4, num_parse_threads=2)
frames = {{}}
for mb in read(source, 16):
    for row, key in enumerate(keys_of(mb)):
        n = int(mb["x"].sequence_lengths[row])
        assert (mb["x"].asarray()[row, :n] == int(key[1:])).all(), key
        frames[key] = frames.get(key, 0) + n
assert frames == {{f"u{{i}}": 2 * (1 + i % 3) for i in range(300)}}, frames
os.remove(f"{{root}}/u7.htk")
fresh = MinibatchSource(reader, max_sweeps=1, randomize=False)
try:
    read(fresh, 1000)
except Exception as error:
    print("ERROR", type(error).__name__, error)
else:
    print("NO ERROR")
"""


def test_a_corpus_of_one_file_per_utterance_reads_under_a_low_open_file_limit(tmp_path: Path) -> None:
    script = ONE_FILE_PER_UTTERANCE.format(tests=str(Path(__file__).parent), root=str(tmp_path))
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    # a file deleted after indexing: a clear error naming it, not a crash
    assert "ERROR FormatError" in result.stdout and "u7.htk" in result.stdout, result.stdout
    assert "sequence u7)" in result.stdout, result.stdout
