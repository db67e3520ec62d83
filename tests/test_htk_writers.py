"""cntkio.htk.write_mlf and write_state_list: round trips through the MLF parser and the state list reader."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cntkio import MinibatchSource, StreamDef, StreamDefs
from cntkio._src.formats.htk_labels import HTKMLFDeserializer
from cntkio._src.formats.mlf import parse_mlf, read_state_list
from cntkio.htk import write_mlf, write_state_list
from order_helpers import keys_of, read

STATES = ["sil", "s1", "s2", "a_s2_1", "sil[3]"]


def random_labels(count: int, seed: int, states: list[str] = STATES) -> dict[str, list[tuple[int, int, str]]]:
    """``count`` utterances of contiguous labels from frame 0 (some keys with directories)."""
    rng = np.random.default_rng(seed)
    labels: dict[str, list[tuple[int, int, str]]] = {}
    for u in range(count):
        key = f"spk{u % 3}/utt{u:03d}" if u % 2 else f"utt{u:03d}"
        t, runs = 0, []
        for _ in range(int(rng.integers(1, 6))):
            n = int(rng.integers(1, 9))
            runs.append((t, t + n, states[int(rng.integers(len(states)))]))
            t += n
        labels[key] = runs
    return labels


def parsed_runs(path: Path, states: list[str]) -> dict[str, list[tuple[int, int, str]]]:
    """The labels of every entry of an MLF, from the native parser's runs."""
    index = parse_mlf(str(path), states, len(states))
    out: dict[str, list[tuple[int, int, str]]] = {}
    for i in range(len(index)):
        ids, counts = index.runs(i)
        t, runs = 0, []
        for state, n in zip(ids.tolist(), counts.tolist()):
            runs.append((t, t + n, states[state]))
            t += n
        out[index.keys[i]] = runs
        assert int(index.lengths[i]) == t
    assert not index.invalid and index.duplicates == 0
    return out


@pytest.mark.parametrize("units", ["htk", "frames"])
def test_mlf_round_trip_keys_runs_and_lengths(tmp_path: Path, units: str) -> None:
    labels = random_labels(40, seed=1)
    write_state_list(tmp_path / "states.list", STATES)
    states = read_state_list(tmp_path / "states.list")
    assert states == STATES
    write_mlf(tmp_path / "labels.mlf", labels, units=units)
    runs = parsed_runs(tmp_path / "labels.mlf", states)
    assert list(runs) == list(labels)  # keys in order, directories kept
    assert runs == labels  # one run per label line, adjacent equal states included
    lengths = parse_mlf(str(tmp_path / "labels.mlf"), states, len(states)).lengths.tolist()
    assert lengths == [r[-1][1] for r in labels.values()]


def test_mlf_units_as_written(tmp_path: Path) -> None:
    labels = {"a/b/c": [(0, 2, "s1"), (2, 5, "s2")], "d.e": [(0, 1, "sil")]}
    write_mlf(tmp_path / "htk.mlf", labels)
    write_mlf(tmp_path / "frames.mlf", labels, units="frames")
    assert (tmp_path / "htk.mlf").read_text() == (
        '#!MLF!#\n"*/a/b/c.lab"\n0 200000 s1\n200000 500000 s2\n.\n"*/d.e.lab"\n0 100000 sil\n.\n'
    )
    frames = '#!MLF!#\n"*/a/b/c.lab"\n0 2 s1\n2 5 s2\n.\n"*/d.e.lab"\n0 1 sil\n.\n'
    assert (tmp_path / "frames.mlf").read_text() == frames
    for name in ("htk.mlf", "frames.mlf"):
        assert parsed_runs(tmp_path / name, STATES) == labels


def test_long_runs_in_htk_units_and_numpy_frames(tmp_path: Path) -> None:
    labels: dict[str, Any] = {"long": [(np.int64(0), np.int32(150_000), "s1"), (150_000, 150_001, "s2")]}
    write_mlf(tmp_path / "long.mlf", labels)
    assert parsed_runs(tmp_path / "long.mlf", STATES) == {"long": [(0, 150_000, "s1"), (150_000, 150_001, "s2")]}
    with pytest.raises(ValueError, match="100 ns"):
        write_mlf(tmp_path / "long.mlf", labels, units="frames")


def test_written_labels_read_through_the_deserializer(tmp_path: Path) -> None:
    labels = random_labels(12, seed=2)
    write_state_list(tmp_path / "states.list", STATES)
    write_mlf(tmp_path / "labels.mlf", labels, units="frames")
    streams = StreamDefs(labels=StreamDef(shape=len(STATES), mlf=str(tmp_path / "labels.mlf")))
    d = HTKMLFDeserializer(str(tmp_path / "states.list"), streams)
    with MinibatchSource(d, randomize=False, max_sweeps=1) as source:
        minibatches = read(source, 10_000)
    assert [k for mb in minibatches for k in keys_of(mb)] == list(labels)
    rows = [row for mb in minibatches for row in mb["labels"].as_sequences()]
    for row, runs in zip(rows, labels.values()):
        expected = [STATES.index(state) for start, end, state in runs for _ in range(start, end)]
        assert row.indices.tolist() == expected and row.data.tolist() == [1.0] * len(expected)


@pytest.mark.parametrize(
    ("labels", "units", "match"),
    [
        ({"a": []}, "htk", "no label"),
        ({"a": [(2, 2, "s1")]}, "htk", "start < end"),
        ({"a": [(-1, 2, "s1")]}, "htk", "start < end"),
        ({"a": [(0, 2.5, "s1")]}, "htk", "integer"),
        ({"a": [(0, 2, "s 1")]}, "htk", "whitespace"),
        ({"a": [(0, 2)]}, "htk", "start, end, state"),
        ({'a"b': [(0, 2, "s1")]}, "htk", "key"),
        ({"": [(0, 2, "s1")]}, "htk", "key"),
        ({"a": [(0, 2, "s1")]}, "seconds", "units"),
    ],
)
def test_bad_mlf_input_is_refused_and_leaves_no_file(tmp_path: Path, labels: Any, units: str, match: str) -> None:
    path = tmp_path / "bad.mlf"
    with pytest.raises(ValueError, match=match):
        write_mlf(path, {"ok": [(0, 1, "s1")], **labels}, units=units)
    assert os.listdir(tmp_path) == []


def test_a_failed_write_keeps_the_previous_file(tmp_path: Path) -> None:
    path = tmp_path / "labels.mlf"
    write_mlf(path, {"a": [(0, 1, "s1")]})
    before = path.read_bytes()
    with pytest.raises(ValueError):
        write_mlf(path, {"b": [(0, 1, "s1")], "c": []})
    assert path.read_bytes() == before and os.listdir(tmp_path) == ["labels.mlf"]


def test_state_list_round_trip_and_refusals(tmp_path: Path) -> None:
    path = tmp_path / "state.list"
    write_state_list(path, iter(STATES))
    assert path.read_text() == "\n".join(STATES) + "\n"
    assert read_state_list(path) == STATES
    for states, match in [
        ([], "at least one"),
        (["a", "b", "a"], "duplicate"),
        (["a b"], "whitespace"),
        ([""], "non-empty"),
    ]:
        with pytest.raises(ValueError, match=match):
            write_state_list(tmp_path / "other.list", states)
    assert sorted(os.listdir(tmp_path)) == ["state.list"]
