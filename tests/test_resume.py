"""Checkpoints of MinibatchSource: exact resume after any minibatch, in every packing mode, with and without
randomization and partitions; JSON and new-process round trips; CNTK positions; restore cost; fingerprints."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cntkio import ConfigError, CTFDeserializer, MinibatchSource
from order_helpers import (
    STREAMS,
    CountingDeserializer,
    Data,
    Sources,
    chunk_keys,
    keys_of,
    make_data,
    read,
    snapshot,
    unit_stream,
    write_ctf,
)

CHUNK = 200  # bytes: the 30-sequence file has about 10 chunks

MODES: dict[str, dict[str, Any]] = {
    "sequence": {},
    "frame": {"frame_mode": True},
    "bptt": {"truncation_length": 3},
}
SIZES = {"sequence": [7, 13, 4, 20], "frame": [5, 9, 2], "bptt": [9, 12, 15, 9]}
RANDOMIZATIONS: dict[str, dict[str, Any]] = {
    "randomized": {"randomization_window_in_chunks": 3, "randomization_seed": 17},
    "samples-window": {"randomization_window_in_chunks": 0, "randomization_window_in_samples": 20},
    "compat": {"randomization_window_in_chunks": 3, "compat": True},
    "file-order": {"randomize": False},
}
PARTITIONS: dict[str, dict[str, int]] = {
    "whole": {},
    "part-0-of-3": {"num_data_partitions": 3, "partition_index": 0},
    "part-2-of-3": {"num_data_partitions": 3, "partition_index": 2},
}


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Data:
    """30 sequences of 1..5 samples in about 10 chunks."""
    return make_data(tmp_path_factory.mktemp("resume"), 30, max_length=5, seed=4)


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> Data:
    """400 sequences in about 150 chunks."""
    return make_data(tmp_path_factory.mktemp("many"), 400, max_length=5, seed=5)


@pytest.fixture
def sources() -> Iterator[Sources]:
    opened = Sources()
    yield opened
    opened.close()


def _reference(source: Any, sizes: list[int], partition: dict[str, int]) -> tuple[list[dict[str, Any]], list[Any]]:
    """The state before every minibatch (and after the last) and the snapshots of the uninterrupted run."""
    states: list[dict[str, Any]] = []
    snapshots: list[Any] = []
    for i in range(10_000):
        states.append(source.get_checkpoint_state())
        minibatch = source.next_minibatch(sizes[i % len(sizes)], **partition)
        if not minibatch:
            return states, snapshots
        snapshots.append(snapshot(minibatch))
    raise AssertionError("the source did not end")


def _following(source: Any, sizes: list[int], start: int, partition: dict[str, int]) -> list[Any]:
    result: list[Any] = []
    for i in range(start, 10_000):
        minibatch = source.next_minibatch(sizes[i % len(sizes)], **partition)
        if not minibatch:
            return result
        result.append(snapshot(minibatch))
    raise AssertionError("the source did not end")


@pytest.mark.parametrize("partition", PARTITIONS.values(), ids=PARTITIONS.keys())
@pytest.mark.parametrize("randomization", RANDOMIZATIONS.values(), ids=RANDOMIZATIONS.keys())
@pytest.mark.parametrize("mode", MODES.keys())
def test_resume_after_every_minibatch_is_exact(sources, data, mode, randomization, partition):
    options = {**MODES[mode], **randomization, "chunk_size": CHUNK, "max_sweeps": 2}
    sizes = SIZES[mode]
    states, expected = _reference(sources.open(data, **options), sizes, partition)
    assert len(expected) >= 8
    assert any(s[1][1] for s in expected), "the run crosses a sweep boundary"
    for i, state in enumerate(states):
        restored = sources.open(data, **options, prefetch=i % 2 == 0)
        restored.restore_from_checkpoint(state)
        assert _following(restored, sizes, i, partition) == expected[i:], f"restored before minibatch {i}"
        assert restored.next_minibatch(sizes[0], **partition) == {}


@pytest.mark.parametrize("mode", MODES.keys())
def test_restore_rewinds_a_source_that_read_further(sources, data, mode):
    options = {**MODES[mode], **RANDOMIZATIONS["randomized"], "chunk_size": CHUNK, "max_sweeps": 2}
    sizes = SIZES[mode]
    source = sources.open(data, **options)
    states, expected = _reference(source, sizes, {})
    for i in (len(states) - 1, 3, 0, len(states) // 2):
        source.restore_from_checkpoint(states[i])
        assert _following(source, sizes, i, {}) == expected[i:]


@pytest.mark.parametrize("partition", PARTITIONS.values(), ids=PARTITIONS.keys())
@pytest.mark.parametrize("randomization", ["randomized", "compat", "file-order"])
@pytest.mark.parametrize("mode", MODES.keys())
def test_skip_minibatch_advances_like_next_minibatch(sources, data, mode, randomization, partition):
    options = {**MODES[mode], **RANDOMIZATIONS[randomization], "chunk_size": CHUNK, "max_sweeps": 2}
    sizes = SIZES[mode]
    states, expected = _reference(sources.open(data, **options), sizes, partition)
    for i in range(0, len(expected) + 1, 3):
        source = sources.open(data, **options)
        for j in range(i):
            assert source.skip_minibatch(sizes[j % len(sizes)], **partition)
        assert source.get_checkpoint_state() == states[i]
        assert _following(source, sizes, i, partition) == expected[i:]
    assert not source.skip_minibatch(sizes[0], **partition)


@pytest.mark.parametrize("mode", ["sequence", "frame"])
def test_restored_order_does_not_depend_on_minibatch_sizes(sources, data, mode):
    options = {**MODES[mode], **RANDOMIZATIONS["randomized"], "chunk_size": CHUNK, "max_sweeps": 2}
    reference = sources.open(data, **options)
    read(reference, 6, limit=4)
    state = reference.get_checkpoint_state()
    rest = unit_stream(reference, 6)
    for sizes in ([1], [50], [3, 17]):
        restored = sources.open(data, **options)
        restored.restore_from_checkpoint(state)
        assert unit_stream(restored, sizes) == rest


def test_checkpoint_is_a_snapshot_not_a_view(sources, data):
    """Reading on does not change a state taken earlier (it holds no live lists of the source)."""
    for mode in MODES:
        source = sources.open(data, **MODES[mode], chunk_size=CHUNK, max_sweeps=2, randomization_window_in_chunks=2)
        read(source, SIZES[mode], limit=3, num_data_partitions=3, partition_index=1)
        state = source.get_checkpoint_state()
        frozen = json.loads(json.dumps(state))
        read(source, SIZES[mode], limit=5, num_data_partitions=3, partition_index=1)
        read(source, SIZES[mode], limit=2, num_data_partitions=2, partition_index=1)
        assert state == frozen


# --------------------------------------------------------------------------------------------- round trips
SCRIPT = r"""
import json, sys
from cntkio import CTFDeserializer, MinibatchSource, StreamDef, StreamDefs
path, chunk, options, state, sizes, partition, start = (json.loads(a) for a in sys.argv[1:])
streams = StreamDefs(x=StreamDef(field="x", shape=2), y=StreamDef(field="y", shape=7, is_sparse=True))
source = MinibatchSource(CTFDeserializer(path, streams, chunk_size_in_bytes=chunk), **options)
source.restore_from_checkpoint(state)
out = []
i = start
while True:
    mb = source.next_minibatch(sizes[i % len(sizes)], **partition)
    if not mb:
        break
    out.append({"keys": [key for _, key in mb.sequence_keys], "x": mb["x"].values.tolist(),
                "lengths": mb["x"].sequence_lengths.tolist(), "mask": mb["x"].mask.tolist(),
                "end": mb["x"].end_of_sweep})
    i += 1
source.close()
print(json.dumps(out))
"""


def _plain_list(value: Any) -> Any:
    return json.loads(json.dumps(value, default=lambda v: v.item()))


@pytest.mark.parametrize("mode", MODES.keys())
def test_resume_through_json_and_in_a_new_process(sources, data, mode):
    partition = {"num_data_partitions": 2, "partition_index": 1}
    options = {**MODES[mode], **RANDOMIZATIONS["randomized"], "max_sweeps": 2}
    sizes = SIZES[mode]
    reference = sources.open(data, chunk_size=CHUNK, **options)
    middle = 5
    minibatches = read(reference, sizes, limit=middle, **partition)
    assert len(minibatches) == middle
    text = json.dumps(reference.get_checkpoint_state())
    following = read(reference, sizes[middle % len(sizes) :] + sizes[: middle % len(sizes)], **partition)
    expected = [
        {
            "keys": keys_of(mb),
            "x": mb["x"].values.tolist(),
            "lengths": mb["x"].sequence_lengths.tolist(),
            "mask": mb["x"].mask.tolist(),
            "end": mb["x"].end_of_sweep,
        }
        for mb in following
    ]
    assert expected

    restored = sources.open(data, chunk_size=CHUNK, **options)
    restored.restore_from_checkpoint(json.loads(text))
    assert [
        snapshot(mb) for mb in read(restored, sizes[middle % len(sizes) :] + sizes[: middle % len(sizes)], **partition)
    ] == [snapshot(mb) for mb in following]

    args = [str(data.path), CHUNK, options, json.loads(text), sizes, partition, middle]
    process = subprocess.run(
        [sys.executable, "-c", SCRIPT, *(json.dumps(a) for a in args)], capture_output=True, text=True, check=True
    )
    got = json.loads(process.stdout)
    # frame keys come back from JSON as [key, frame] lists
    assert got == _plain_list(expected)


# --------------------------------------------------------------------------------------------- CNTK positions
@pytest.mark.parametrize("randomization", RANDOMIZATIONS.values(), ids=RANDOMIZATIONS.keys())
@pytest.mark.parametrize("mode", ["sequence", "frame"])
def test_restore_from_cntk_position(sources, data, mode, randomization):
    """{'minibatchSourcePosition': n} continues at the first unit starting at or after sample n."""
    options = {**MODES[mode], **randomization, "chunk_size": CHUNK}
    reference = sources.open(data, **options, max_sweeps=3)
    units = [(keys_of(mb)[0], mb["x"].num_samples) for mb in read(reference, 1)]
    starts, position = [], 0
    for _, length in units:
        starts.append(position)
        position += length
    sweep_size = position // 3
    assert sweep_size == data.total_samples
    for n in range(0, 2 * sweep_size + 1):
        source = sources.open(data, **options, max_sweeps=3, prefetch=False)
        source.restore_from_checkpoint({"minibatchSourcePosition": n})
        expected = next(i for i, s in enumerate(starts) if s >= n)
        assert keys_of(source.next_minibatch(1)) == [units[expected][0]], n
        assert source.get_checkpoint_state()["minibatchSourcePosition"] == starts[expected] + units[expected][1]


@pytest.mark.parametrize("partition", PARTITIONS.values(), ids=PARTITIONS.keys())
@pytest.mark.parametrize("randomization", RANDOMIZATIONS.values(), ids=RANDOMIZATIONS.keys())
@pytest.mark.parametrize("mode", ["sequence", "frame"])
def test_cntk_position_of_a_state_resumes_exactly(sources, data, mode, randomization, partition):
    """The bare position of a checkpoint is enough (as in CNTK, where each worker saves its own)."""
    options = {**MODES[mode], **randomization, "chunk_size": CHUNK, "max_sweeps": 2}
    sizes = SIZES[mode]
    states, expected = _reference(sources.open(data, **options), sizes, partition)
    for i in range(0, len(states), 2):
        restored = sources.open(data, **options, prefetch=False)
        restored.restore_from_checkpoint({"minibatchSourcePosition": states[i]["minibatchSourcePosition"]})
        assert _following(restored, sizes, i, partition) == expected[i:]


@pytest.mark.parametrize("randomization", ["randomized", "file-order"])
def test_resume_after_an_elastic_merge_is_exact(sources, data, randomization):
    """Partitions restored from a merged state (holding the old partitions' progress) resume exactly too."""
    options = {**RANDOMIZATIONS[randomization], "chunk_size": CHUNK, "max_sweeps": 2}
    states = []
    for index, count in enumerate([1, 4, 2]):
        source = sources.open(data, **options)
        read(source, 9, limit=count, num_data_partitions=3, partition_index=index)
        states.append(source.get_checkpoint_state())
    merged = MinibatchSource.merge_checkpoints(states)
    for index in range(2):
        partition = {"num_data_partitions": 2, "partition_index": index}
        source = sources.open(data, **options)
        source.restore_from_checkpoint(merged)
        run_states, expected = _reference(source, [8, 3], partition)
        for i in range(0, len(run_states), 2):
            restored = sources.open(data, **options)
            restored.restore_from_checkpoint(run_states[i])
            assert _following(restored, [8, 3], i, partition) == expected[i:]


def test_current_position_property(sources, data):
    source = sources.open(data, chunk_size=CHUNK, max_sweeps=2)
    read(source, 10, limit=3)
    state = source.current_position
    expected = [snapshot(mb) for mb in read(source, 10, limit=4)]
    other = sources.open(data, chunk_size=CHUNK, max_sweeps=2)
    other.current_position = state
    assert [snapshot(mb) for mb in read(other, 10, limit=4)] == expected


# --------------------------------------------------------------------------------------------- restore cost
def _chunks_of(data: Data, keys: list[Any], frame_mode: bool) -> set[int]:
    chunk_of = {key: c for c, chunk in enumerate(chunk_keys(data, CHUNK)) for key in chunk}
    return {chunk_of[key[0] if frame_mode else key] for key in keys}


@pytest.mark.parametrize("mode", MODES.keys())
@pytest.mark.parametrize("randomization", ["randomized", "compat", "file-order"])
def test_restore_does_not_replay(sources, many, mode, randomization):
    """A restore deep into the run, then one minibatch, parses only the chunks that minibatch needs."""
    options = {**MODES[mode], **RANDOMIZATIONS[randomization]}
    size = SIZES[mode][0]
    reference = sources.open(many, chunk_size=CHUNK, **options)
    assert reference._deserializer.num_chunks() > 100
    sweep = reference.sweep_size
    for target in (5 * sweep + sweep // 2, 1000 * sweep + 7):
        position = {"minibatchSourcePosition": target}
        reference.restore_from_checkpoint(position)
        read(reference, size, limit=3)
        state = reference.get_checkpoint_state()
        expected = snapshot(reference.next_minibatch(size))
        for checkpoint in (state, position):
            counting = CountingDeserializer(CTFDeserializer(many.path, STREAMS, chunk_size_in_bytes=CHUNK))
            source = sources.open(counting, **options, prefetch=False)
            source.restore_from_checkpoint(checkpoint)
            assert counting.calls == []
            minibatch = source.next_minibatch(size)
            if checkpoint is state:
                assert snapshot(minibatch) == expected
            needed = _chunks_of(many, keys_of(minibatch), mode == "frame")
            assert sorted(counting.calls) == sorted(needed), "each chunk of the minibatch, parsed once"


# --------------------------------------------------------------------------------------------- fingerprints
@pytest.mark.parametrize(
    "change",
    [
        {"randomization_seed": 2},
        {"randomization_window_in_chunks": 5},
        {"compat": True},
        {"frame_mode": True},
        {"truncation_length": 3},
        {"randomize": False},
        {"data_slice": "[:20]"},
    ],
    ids=lambda c: next(iter(c)),
)
def test_checkpoint_of_another_configuration_is_refused(sources, data, change):
    base = {"randomization_seed": 1, "randomization_window_in_chunks": 3, "chunk_size": CHUNK}
    source = sources.open(data, **base)
    read(source, 10, limit=2)
    state = source.get_checkpoint_state()
    other = sources.open(data, **{**base, **change})
    with pytest.raises(ConfigError):
        other.restore_from_checkpoint(state)
    with pytest.raises(ConfigError):
        other.restore_from_checkpoint(json.loads(json.dumps(state)))


def test_checkpoint_of_other_data_is_refused(sources, data, many):
    source = sources.open(data, chunk_size=CHUNK)
    read(source, 10, limit=2)
    with pytest.raises(ConfigError):
        sources.open(many, chunk_size=CHUNK).restore_from_checkpoint(source.get_checkpoint_state())
    with pytest.raises(ConfigError):
        sources.open(data, chunk_size=CHUNK * 4).restore_from_checkpoint(source.get_checkpoint_state())


def test_newer_checkpoint_version_is_refused(sources, data):
    source = sources.open(data, chunk_size=CHUNK)
    state = source.get_checkpoint_state()
    with pytest.raises(ConfigError):
        source.restore_from_checkpoint({**state, "version": state["version"] + 1})


def test_epoch_limit_is_not_part_of_the_checkpoint(sources, data):
    """max_samples/max_sweeps belong to the source that restores: a finished run can be extended."""
    short = sources.open(data, chunk_size=CHUNK, max_sweeps=1, randomization_seed=3)
    read(short, 10)
    longer = sources.open(data, chunk_size=CHUNK, max_sweeps=2, randomization_seed=3)
    longer.restore_from_checkpoint(short.get_checkpoint_state())
    reference = sources.open(data, chunk_size=CHUNK, max_sweeps=2, randomization_seed=3)
    assert unit_stream(longer, 10) == unit_stream(reference, 10)[len(data.keys) :]


# --------------------------------------------------------------------------------------------- properties
@st.composite
def resume_runs(draw: st.DrawFn) -> dict[str, Any]:
    mode = draw(st.sampled_from(list(MODES)))
    partitions = draw(st.integers(1, 3))
    minimum = 2 * partitions if mode == "bptt" else 1
    return {
        "lengths": draw(st.lists(st.integers(1, 5), min_size=1, max_size=30)),
        "chunk_size": draw(st.integers(30, 300)),
        "options": {
            **({"truncation_length": 2} if mode == "bptt" else MODES[mode]),
            **draw(st.sampled_from(list(RANDOMIZATIONS.values()))),
            "randomization_seed": draw(st.integers(0, 99)),
            "max_sweeps": draw(st.integers(1, 2)),
        },
        "partition": {"num_data_partitions": partitions, "partition_index": draw(st.integers(0, partitions - 1))},
        "sizes": draw(st.lists(st.integers(minimum, minimum + 12), min_size=1, max_size=4)),
        "at": draw(st.integers(0, 40)),
    }


@settings(max_examples=40, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(run=resume_runs())
def test_property_resume_is_exact(tmp_path_factory, run):
    data = write_ctf(tmp_path_factory.getbasetemp() / "resume_property.ctf", run["lengths"])
    opened = Sources()
    try:
        source = opened.open(data, chunk_size=run["chunk_size"], **run["options"])
        states, expected = _reference(source, run["sizes"], run["partition"])
        at = min(run["at"], len(states) - 1)
        restored = opened.open(data, chunk_size=run["chunk_size"], **run["options"])
        restored.restore_from_checkpoint(json.loads(json.dumps(states[at])))
        assert _following(restored, run["sizes"], at, run["partition"]) == expected[at:]
    finally:
        opened.close()
