"""Data partitions of MinibatchSource: exactly once across partitions, elastic resume via merge_checkpoints,
provenance keys, and data slices."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
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
    assert_exactly_once,
    check_values,
    keys_of,
    make_data,
    read,
    snapshot,
    unit_stream,
    write_ctf,
)

CHUNK = 200

FILES = {  # name: (sequences, chunk size in bytes)
    "many-chunks": (60, 200),
    "few-chunks": (12, 250),
    "one-chunk": (10, 32 * 1024 * 1024),
}
MODES: dict[str, dict[str, Any]] = {
    "sequence": {},
    "frame": {"frame_mode": True},
    "bptt": {"truncation_length": 2},
}
RANDOMIZATIONS: dict[str, dict[str, Any]] = {
    "randomized": {"randomization_window_in_chunks": 3, "randomization_seed": 8},
    "compat": {"randomization_window_in_chunks": 3, "compat": True},
    "file-order": {"randomize": False},
}


@pytest.fixture(scope="module")
def directory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("partitions")


@pytest.fixture(scope="module")
def files(directory: Path) -> dict[str, tuple[Data, int, int]]:
    """name -> (data, chunk size, number of chunks)."""
    result = {}
    for name, (count, chunk) in FILES.items():
        data = make_data(directory, count, max_length=4, seed=count)
        chunks = CTFDeserializer(data.path, STREAMS, chunk_size_in_bytes=chunk).num_chunks()
        result[name] = (data, chunk, chunks)
    assert result["many-chunks"][2] >= 15
    assert 2 <= result["few-chunks"][2] <= 4
    assert result["one-chunk"][2] == 1
    return result


@pytest.fixture
def sources() -> Iterator[Sources]:
    opened = Sources()
    yield opened
    opened.close()


def _samples_per_key(minibatches: list[Any]) -> Counter[int]:
    """Samples read per sequence id (x[0] holds the id), whatever the packing."""
    counts: Counter[int] = Counter()
    for minibatch in minibatches:
        counts.update(int(v) for v in minibatch["x"].values[:, 0].tolist())
    return counts


# --------------------------------------------------------------------------------------------- exactly once
@pytest.mark.parametrize("randomization", RANDOMIZATIONS.values(), ids=RANDOMIZATIONS.keys())
@pytest.mark.parametrize("mode", MODES.keys())
@pytest.mark.parametrize("file", FILES.keys())
@pytest.mark.parametrize("k", [1, 2, 3, 4, 5])
def test_partitions_share_a_sweep_exactly_once(sources, files, file, k, mode, randomization):
    data, chunk, _ = files[file]
    options = {**MODES[mode], **randomization, "chunk_size": chunk, "max_sweeps": 1}
    size = 12 if mode != "bptt" else 2 * k
    per_partition = []
    for index in range(k):
        source = sources.open(data, **options)
        per_partition.append(read(source, size, num_data_partitions=k, partition_index=index))
    samples = Counter[int]()
    for minibatches in per_partition:
        assert minibatches, "no partition is idle"
        samples += _samples_per_key(minibatches)
    assert samples == Counter(dict(zip(data.keys, data.lengths)))
    if mode != "bptt":  # BPTT delivers pieces; the sample counts above cover it
        units = data.frames if mode == "frame" else data.keys
        assert_exactly_once([key for mbs in per_partition for mb in mbs for key in keys_of(mb)], units)
        for minibatches in per_partition:
            for minibatch in minibatches:
                check_values(minibatch, mode == "frame")


@pytest.mark.parametrize("randomization", RANDOMIZATIONS.values(), ids=RANDOMIZATIONS.keys())
@pytest.mark.parametrize("k", [2, 3, 5])
def test_partitions_over_several_sweeps(sources, files, k, randomization):
    data, chunk, _ = files["many-chunks"]
    sweeps = 3
    keys: list[Any] = []
    for index in range(k):
        source = sources.open(data, **randomization, chunk_size=chunk, max_sweeps=sweeps)
        keys += unit_stream(source, [9, 20, 4], num_data_partitions=k, partition_index=index)
    assert_exactly_once(keys, data.keys, times=sweeps)


def test_partitions_read_only_their_chunks_when_randomized(sources, files):
    """With enough chunks, a randomized partition reads whole chunks: no chunk is shared."""
    data, chunk, chunks = files["many-chunks"]
    chunk_of = {key: c for c in range(chunks) for key in _chunk_index_keys(data, chunk, c)}
    owners: dict[int, set[int]] = {}
    for index in range(3):
        source = sources.open(data, **RANDOMIZATIONS["randomized"], chunk_size=chunk, max_sweeps=1)
        for key in unit_stream(source, 10, num_data_partitions=3, partition_index=index):
            owners.setdefault(chunk_of[key], set()).add(index)
    assert len(owners) == chunks
    assert all(len(o) == 1 for o in owners.values())


@pytest.mark.parametrize("randomization", ["randomized", "compat"])
def test_randomized_partition_parses_only_its_chunks_once(sources, directory, randomization):
    """Spec §7: a partition reads only the chunks it owns, and holds few of them at a time."""
    data = make_data(directory, 2000, max_length=5, seed=2000)
    chunk_of: dict[Any, int] = {}
    for index in range(3):
        counting = CountingDeserializer(CTFDeserializer(data.path, STREAMS, chunk_size_in_bytes=2000))
        if not chunk_of:
            chunk_of = {key: c for c in range(counting.num_chunks()) for key in list(counting.chunk_index(c).keys)}
        source = sources.open(counting, **RANDOMIZATIONS[randomization], max_sweeps=1, prefetch=False)
        keys: list[Any] = []
        most = 0
        while minibatch := source.next_minibatch(48, num_data_partitions=3, partition_index=index):
            keys += keys_of(minibatch)
            most = max(most, source.cached_chunks)
        assert sorted(counting.calls) == sorted({chunk_of[key] for key in keys})
        assert most <= 3 + 2  # window 3 chunks


def _chunk_index_keys(data: Data, chunk: int, chunk_id: int) -> list[int]:
    return [int(k) for k in CTFDeserializer(data.path, STREAMS, chunk_size_in_bytes=chunk).chunk_index(chunk_id).keys]


def test_partition_budget_is_a_share_of_the_minibatch(sources, files):
    data, chunk, _ = files["many-chunks"]
    for index in range(3):
        source = sources.open(data, frame_mode=True, chunk_size=chunk, max_sweeps=1)
        minibatch = source.next_minibatch(10, num_data_partitions=3, partition_index=index)
        assert minibatch["x"].num_samples == 10 // 3 + (index < 10 % 3)


def test_invalid_partition_arguments(sources, files):
    data, chunk, _ = files["many-chunks"]
    source = sources.open(data, chunk_size=chunk)
    for partitions, index in [(0, 0), (2, 2), (2, -1), (-1, 0)]:
        with pytest.raises(ValueError):
            source.next_minibatch(10, num_data_partitions=partitions, partition_index=index)
    bptt = sources.open(data, chunk_size=chunk, truncation_length=4)
    with pytest.raises(ValueError):  # 3 partitions need 3 slots: a minibatch of at least 12 samples
        bptt.next_minibatch(8, num_data_partitions=3, partition_index=0)


@pytest.mark.parametrize("randomization", RANDOMIZATIONS.values(), ids=RANDOMIZATIONS.keys())
@pytest.mark.parametrize(("first", "then"), [(1, 2), (1, 3), (2, 3), (3, 2), (4, 1)])
def test_changing_the_partition_count_between_calls(sources, files, randomization, first, then):
    """Spec §7: N may change between calls. All partitions read 2 minibatches with N=first, then finish the
    sweep with N=then; each source assumes the others reached its position, so with identical progress
    (the N=1 case, or partitions in lockstep) the sweep is still read exactly once."""
    data, chunk, _ = files["many-chunks"]
    options = {**randomization, "chunk_size": chunk, "max_sweeps": 1}
    if first == 1:
        keys: list[Any] = []
        for index in range(then):
            source = sources.open(data, **options)
            prefix = [k for mb in read(source, 9, limit=2) for k in keys_of(mb)]
            keys += prefix if index == 0 else []
            keys += unit_stream(source, 9, num_data_partitions=then, partition_index=index)
        assert_exactly_once(keys, data.keys)
    else:  # the partitions of the first count, each restored from the merged state, then repartitioned
        before: list[Any] = []
        states = []
        for index in range(first):
            source = sources.open(data, **options)
            before += [
                k
                for mb in read(source, 9, limit=2, num_data_partitions=first, partition_index=index)
                for k in keys_of(mb)
            ]
            states.append(source.get_checkpoint_state())
        after: list[Any] = []
        merged = MinibatchSource.merge_checkpoints(states)
        for index in range(then):
            source = sources.open(data, **options)
            source.restore_from_checkpoint(merged)
            after += unit_stream(source, 9, num_data_partitions=then, partition_index=index)
        assert_exactly_once(before + after, data.keys)


@pytest.mark.parametrize("randomization", RANDOMIZATIONS.values(), ids=RANDOMIZATIONS.keys())
@pytest.mark.parametrize("max_samples", [1, 50, 150, 400])
def test_partitions_with_max_samples_read_the_same_prefix(sources, files, randomization, max_samples):
    """Each partition stops at the global position max_samples: together they read what one source reads."""
    data, chunk, _ = files["many-chunks"]
    options = {**randomization, "chunk_size": chunk, "max_samples": max_samples}
    single = unit_stream(sources.open(data, **options), 1)
    for k in (2, 3):
        keys: list[Any] = []
        for index in range(k):
            keys += unit_stream(sources.open(data, **options), 7, num_data_partitions=k, partition_index=index)
        assert Counter(keys) == Counter(single)


# --------------------------------------------------------------------------------------------- elastic resume
def _elastic(
    sources: Sources, data: Data, options: dict[str, Any], counts: list[int], new_partitions: int, size: int = 12
) -> tuple[list[Any], list[Any]]:
    """Runs len(counts) partitions for counts[i] minibatches, merges their states and finishes with
    ``new_partitions`` partitions: (keys read before, keys read after)."""
    before: list[Any] = []
    states = []
    old = len(counts)
    for index, count in enumerate(counts):
        source = sources.open(data, **options)
        minibatches = read(source, size, limit=count, num_data_partitions=old, partition_index=index)
        assert len(minibatches) == count
        before += [key for mb in minibatches for key in keys_of(mb)]
        states.append(source.get_checkpoint_state())
    merged = MinibatchSource.merge_checkpoints(states)
    after: list[Any] = []
    for index in range(new_partitions):
        source = sources.open(data, **options)
        source.restore_from_checkpoint(merged)
        after += unit_stream(source, size, num_data_partitions=new_partitions, partition_index=index)
    return before, after


@pytest.mark.parametrize("randomization", RANDOMIZATIONS.values(), ids=RANDOMIZATIONS.keys())
@pytest.mark.parametrize("mode", ["sequence", "frame"])
@pytest.mark.parametrize("new_partitions", [1, 2, 3, 4])
def test_elastic_resume_reads_the_rest_exactly_once(sources, files, new_partitions, mode, randomization):
    data, chunk, _ = files["many-chunks"]
    options = {**MODES[mode], **randomization, "chunk_size": chunk, "max_sweeps": 1}
    before, after = _elastic(sources, data, options, [2, 5, 3], new_partitions, size=12 if mode == "sequence" else 6)
    assert before and after
    assert_exactly_once(before + after, data.frames if mode == "frame" else data.keys)


@pytest.mark.parametrize("randomization", RANDOMIZATIONS.values(), ids=RANDOMIZATIONS.keys())
@pytest.mark.parametrize("new_partitions", [2, 4])
def test_elastic_resume_when_a_partition_is_in_the_next_sweep(sources, files, new_partitions, randomization):
    """Partition 0 ran into sweep 1 while the others are still in sweep 0: two sweeps, each key twice."""
    data, chunk, _ = files["many-chunks"]
    options = {**randomization, "chunk_size": chunk, "max_sweeps": 2}
    before, after = _elastic(sources, data, options, [12, 1, 2], new_partitions)
    assert_exactly_once(before + after, data.keys, times=2)


@pytest.mark.parametrize("randomization", RANDOMIZATIONS.values(), ids=RANDOMIZATIONS.keys())
def test_elastic_resume_twice(sources, files, randomization):
    """3 partitions -> merge -> 2 partitions -> merge -> 4 partitions: still exactly once."""
    data, chunk, _ = files["many-chunks"]
    options = {**randomization, "chunk_size": chunk, "max_sweeps": 1}
    keys: list[Any] = []
    states = []
    for index, count in enumerate([1, 3, 2]):
        source = sources.open(data, **options)
        keys += [
            k for mb in read(source, 9, limit=count, num_data_partitions=3, partition_index=index) for k in keys_of(mb)
        ]
        states.append(source.get_checkpoint_state())
    merged = MinibatchSource.merge_checkpoints(states)
    states = []
    for index, count in enumerate([2, 1]):
        source = sources.open(data, **options)
        source.restore_from_checkpoint(merged)
        keys += [
            k for mb in read(source, 9, limit=count, num_data_partitions=2, partition_index=index) for k in keys_of(mb)
        ]
        states.append(source.get_checkpoint_state())
    merged = MinibatchSource.merge_checkpoints(states)
    for index in range(4):
        source = sources.open(data, **options)
        source.restore_from_checkpoint(merged)
        keys += unit_stream(source, 9, num_data_partitions=4, partition_index=index)
    assert_exactly_once(keys, data.keys)


@pytest.mark.parametrize("counts", [[2, 0, 1], [0, 0, 0]])
def test_merge_accepts_partitions_that_have_not_read_yet(sources, files, counts):
    """A partition that has not read anything (a fresh or just-restored source) still has a state; it is
    the only partition index missing, so the merge is well defined."""
    data, chunk, _ = files["many-chunks"]
    options = {**RANDOMIZATIONS["randomized"], "chunk_size": chunk, "max_sweeps": 1}
    keys: list[Any] = []
    states = []
    for index, count in enumerate(counts):
        source = sources.open(data, **options)
        keys += [
            k for mb in read(source, 9, limit=count, num_data_partitions=3, partition_index=index) for k in keys_of(mb)
        ]
        states.append(source.get_checkpoint_state())
    merged = MinibatchSource.merge_checkpoints(states)
    for index in range(2):
        source = sources.open(data, **options)
        source.restore_from_checkpoint(merged)
        keys += unit_stream(source, 9, num_data_partitions=2, partition_index=index)
    assert_exactly_once(keys, data.keys)


def test_merged_state_is_order_independent_and_restores_identically(sources, files):
    data, chunk, _ = files["many-chunks"]
    options = {**RANDOMIZATIONS["randomized"], "chunk_size": chunk, "max_sweeps": 1}
    states = []
    for index, count in enumerate([3, 1, 2]):
        source = sources.open(data, **options)
        read(source, 9, limit=count, num_data_partitions=3, partition_index=index)
        states.append(source.get_checkpoint_state())
    merged = MinibatchSource.merge_checkpoints(states)
    assert MinibatchSource.merge_checkpoints(states[::-1]) == merged
    runs = []
    for _ in range(2):
        source = sources.open(data, **options)
        source.restore_from_checkpoint(merged)
        runs.append([snapshot(mb) for mb in read(source, 9, num_data_partitions=2, partition_index=1)])
    assert runs[0] == runs[1]


def test_merge_needs_every_partition(sources, files):
    data, chunk, _ = files["many-chunks"]
    states = []
    for index in range(3):
        source = sources.open(data, chunk_size=chunk)
        read(source, 9, limit=1, num_data_partitions=3, partition_index=index)
        states.append(source.get_checkpoint_state())
    with pytest.raises(ValueError):
        MinibatchSource.merge_checkpoints(states[:2])
    with pytest.raises(ValueError):
        MinibatchSource.merge_checkpoints([states[0], states[0], states[2]])
    with pytest.raises(ValueError):
        MinibatchSource.merge_checkpoints([])


# --------------------------------------------------------------------------------------------- provenance
@pytest.mark.parametrize("randomization", RANDOMIZATIONS.values(), ids=RANDOMIZATIONS.keys())
def test_provenance_keys_are_the_sequence_ids(sources, directory, randomization):
    data = write_ctf(directory / "named.ctf", [3, 1, 2, 4, 1, 2, 3] * 4, key_prefix="utt")
    for mode in ("sequence", "frame", "bptt"):
        source = sources.open(data, **MODES[mode], **randomization, chunk_size=CHUNK, max_sweeps=1)
        seen = []
        for minibatch in read(source, [8, 5]):
            keys = minibatch.sequence_keys
            assert all(name == str(data.path) for name, _ in keys)
            assert minibatch["x"].keys == keys and minibatch["y"].keys == keys
            ids = [key[0] if mode == "frame" else key for _, key in keys]
            assert all(isinstance(key, str) and key.startswith("utt") for key in ids)
            x = minibatch["x"]
            if mode == "bptt":  # one key per piece; the pieces of a row follow each other
                assert len(keys) >= int((x.sequence_lengths > 0).sum())  # a drained slot leaves an empty row
                pieces = [int(k[3:]) for k in ids]
                row_ids = [int(v) for v in x.values[:, 0].tolist()]
                assert [key for i, key in enumerate(row_ids) if i == 0 or row_ids[i - 1] != key] == [
                    key for i, key in enumerate(pieces) if i == 0 or pieces[i - 1] != key
                ]
            else:
                assert len(keys) == x.num_sequences
                for key, values in zip(ids, x.as_sequences()):
                    assert set(values[:, 0].tolist()) == {float(key[3:])}
                if mode == "frame":
                    assert [int(v) for v in x.values[:, 1].tolist()] == [key[1] for _, key in keys]
            seen += ids
        assert set(seen) == set(data.keys)


def test_numeric_provenance_keys(sources, files):
    data, chunk, _ = files["many-chunks"]
    source = sources.open(data, chunk_size=chunk, max_sweeps=1, randomize=False)
    keys = [key for _, key in source.next_minibatch(30).sequence_keys]
    assert keys == data.keys[: len(keys)] and all(int(k) == k for k in keys)


# --------------------------------------------------------------------------------------------- data slices
def _slice_keys(sources: Sources, data: Data, spec: Any, **options: Any) -> list[Any]:
    source = sources.open(data, chunk_size=CHUNK, max_sweeps=1, data_slice=spec, **options)
    return unit_stream(source, 7)


@pytest.mark.parametrize("randomization", RANDOMIZATIONS.values(), ids=RANDOMIZATIONS.keys())
def test_data_slice_selects_sequences_in_file_order(sources, directory, randomization):
    data = make_data(directory, 47, max_length=4, seed=47)
    n = len(data.keys)
    cases: list[tuple[Any, list[Any]]] = [
        ("[10%:20%]", data.keys[int(0.1 * n) : int(0.2 * n)]),
        ("[:5]", data.keys[:5]),
        ("[40:]", data.keys[40:]),
        ("[-5:]", data.keys[-5:]),
        ("[50%:]", data.keys[n // 2 :]),
        ("10:20", data.keys[10:20]),
        (slice(3, 11), data.keys[3:11]),
        (slice(None, 4), data.keys[:4]),
        (slice(40, None), data.keys[40:]),
        ("[0:1000]", data.keys),
    ]
    for spec, expected in cases:
        keys = _slice_keys(sources, data, spec, **randomization)
        assert sorted(keys) == sorted(expected), spec
        if randomization.get("randomize") is False:
            assert keys == expected


@pytest.mark.parametrize("randomization", RANDOMIZATIONS.values(), ids=RANDOMIZATIONS.keys())
def test_data_slices_compose(sources, directory, randomization):
    data = make_data(directory, 47, max_length=4, seed=47)
    for parts, whole in [
        (["[0:20]", "[20:40]"], "[0:40]"),
        (["[:20]", "[20:]"], "[:]"),
        (["[0%:10%]", "[10%:20%]"], "[0%:20%]"),
        (["[0%:33%]", "[33%:67%]", "[67%:100%]"], "[0%:100%]"),
        ([slice(5, 9), slice(9, 30)], slice(5, 30)),
    ]:
        pieces = [_slice_keys(sources, data, part, **randomization) for part in parts]
        union = [key for piece in pieces for key in piece]
        assert_exactly_once(union, _slice_keys(sources, data, whole, **randomization))


def test_data_slice_in_frame_mode_and_partitions(sources, directory):
    data = make_data(directory, 47, max_length=4, seed=47)
    frames = [f for f in data.frames if 10 <= f[0] < 30]
    keys: list[Any] = []
    for index in range(3):
        source = sources.open(data, chunk_size=CHUNK, max_sweeps=2, data_slice="[10:30]", frame_mode=True)
        keys += unit_stream(source, 5, num_data_partitions=3, partition_index=index)
    assert_exactly_once(keys, frames, times=2)
    # the sweep is the slice: the source counts only its samples
    source = sources.open(data, chunk_size=CHUNK, max_sweeps=1, data_slice="[10:30]")
    assert source.sweep_size == sum(data.lengths[10:30])


def test_data_slice_resume(sources, directory):
    data = make_data(directory, 47, max_length=4, seed=47)
    options = {"chunk_size": CHUNK, "max_sweeps": 2, "data_slice": "[25%:75%]"}
    source = sources.open(data, **options)
    read(source, 6, limit=4)
    state = source.get_checkpoint_state()
    expected = [snapshot(mb) for mb in read(source, 6)]
    restored = sources.open(data, **options)
    restored.restore_from_checkpoint(state)
    assert [snapshot(mb) for mb in read(restored, 6)] == expected


@pytest.mark.parametrize(
    "spec", ["[5:5]", "[30:10]", "[50:]", "[0%:1%]", "nonsense", "[1:2:3]", "[a:b]", slice(0, 5, 2)]
)
def test_invalid_or_empty_data_slice(sources, directory, spec):
    data = make_data(directory, 47, max_length=4, seed=47)
    with pytest.raises(ConfigError):
        sources.open(data, data_slice=spec)


@settings(max_examples=40, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    count=st.integers(1, 40),
    cuts=st.lists(st.integers(0, 100), min_size=3, max_size=3).map(sorted),
    seed=st.integers(0, 1000),
)
def test_property_percent_slices_compose(directory, count, cuts, seed):
    data = write_ctf(directory / "slices.ctf", [1 + i % 3 for i in range(count)])
    opened = Sources()

    def keys(a: int, b: int) -> list[Any]:
        try:
            source = opened.open(data, chunk_size=60, max_sweeps=1, data_slice=f"[{a}%:{b}%]", randomization_seed=seed)
        except ConfigError:  # an empty slice
            assert int(a * count / 100) == int(b * count / 100)
            return []
        return unit_stream(source, 5)

    try:
        a, b, c = cuts
        whole = keys(a, c)
        assert sorted(whole) == data.keys[int(a * count / 100) : int(c * count / 100)]
        assert_exactly_once(keys(a, b) + keys(b, c), whole)
    finally:
        opened.close()


# --------------------------------------------------------------------------------------------- properties
@st.composite
def partition_runs(draw: st.DrawFn) -> dict[str, Any]:
    randomization: dict[str, Any] = draw(
        st.sampled_from(
            [
                {"randomize": False},
                {"randomization_window_in_chunks": draw(st.integers(1, 5))},
                {"randomization_window_in_chunks": 0, "randomization_window_in_samples": draw(st.integers(1, 40))},
                {"randomization_window_in_chunks": draw(st.integers(1, 5)), "compat": True},
            ]
        )
    )
    old = draw(st.integers(1, 5))
    return {
        "lengths": draw(st.lists(st.integers(1, 5), min_size=1, max_size=40)),
        "chunk_size": draw(st.integers(30, 300)),
        "options": {
            **randomization,
            "randomization_seed": draw(st.integers(0, 99)),
            "frame_mode": draw(st.booleans()),
            "max_sweeps": draw(st.integers(1, 2)),
        },
        "old": old,
        "counts": draw(st.lists(st.integers(1, 8), min_size=old, max_size=old)),
        "new": draw(st.integers(1, 5)),
        "sizes": draw(st.lists(st.integers(1, 20), min_size=1, max_size=4)),
    }


@settings(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(run=partition_runs())
def test_property_elastic_resume_exactly_once(directory, run):
    """Any partition count, any progress per partition, merged and finished with any other count."""
    data = write_ctf(directory / "elastic.ctf", run["lengths"])
    units = data.frames if run["options"]["frame_mode"] else data.keys
    opened = Sources()
    try:
        keys: list[Any] = []
        states = []
        for index, count in enumerate(run["counts"]):
            source = opened.open(data, chunk_size=run["chunk_size"], **run["options"])
            for minibatch in read(
                source, run["sizes"], limit=count, num_data_partitions=run["old"], partition_index=index
            ):
                keys += keys_of(minibatch)
            states.append(source.get_checkpoint_state())
        merged = MinibatchSource.merge_checkpoints(states)
        for index in range(run["new"]):
            source = opened.open(data, chunk_size=run["chunk_size"], **run["options"])
            source.restore_from_checkpoint(merged)
            keys += unit_stream(source, run["sizes"], num_data_partitions=run["new"], partition_index=index)
        assert_exactly_once(keys, units, times=run["options"]["max_sweeps"])
    finally:
        opened.close()
