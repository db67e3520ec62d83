"""Elastic resume in every mode (sequence, frame, truncated BPTT, length bucketing, a composite join, skipped bad
records): any reads, checkpoints, merges and restores with 1-8 partitions deliver every sample exactly once per
sweep, BPTT sequences in order; and checkpoint validation that does not rest on the digest (a state edited and
re-sealed either restores to the same data or is refused with a ConfigError)."""

from __future__ import annotations

import contextlib
import functools
import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cntkio import ConfigError, CTFDeserializer, MinibatchSource, StreamDef, StreamDefs
from cntkio._src.reading.checkpoint import seal
from order_helpers import STREAMS, Sources, random_lengths, read, snapshot, write_ctf

CHUNK = 120  # bytes: the 40-sequence files have about 25 chunks
SEQUENCES = 40
TRUNCATION = 2
BAD_LINES = (3, 17, 40, 41, 77)  # lines whose x value does not parse (the errors mode)
MODES = ["sequence", "frame", "bptt", "bucketing", "composite", "errors"]
RANDOMIZATIONS: list[dict[str, Any]] = [
    {"randomization_window_in_chunks": 4},
    {"randomization_window_in_chunks": 0, "randomization_window_in_samples": 25},
    {"randomization_window_in_chunks": 4, "compat": True},
    {"randomize": False},
]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("elastic")
    lengths = random_lengths(SEQUENCES, 5, 22)
    clean = write_ctf(directory / "clean.ctf", lengths).path
    dirty = write_ctf(directory / "dirty.ctf", lengths).path
    lines = dirty.read_text().splitlines()
    for number in BAD_LINES:
        lines[number] = lines[number].replace("|x ", "|x zz ", 1)
    dirty.write_text("\n".join(lines) + "\n")
    return {"clean": clean, "dirty": dirty}


def open_source(files: dict[str, Path], mode: str, options: dict[str, Any]) -> MinibatchSource:
    """A source of ``mode`` over the 40-sequence file (x: [sequence id, step]; y sparse)."""
    options = dict(options)
    if mode == "bucketing":
        options.pop("compat", None)
        options.pop("randomize", None)
        options.update(bucket_by_length=6, randomization_window_in_chunks=4, randomization_window_in_samples=0)
    options.update({"frame": {"frame_mode": True}, "bptt": {"truncation_length": TRUNCATION}}.get(mode, {}))
    path = files["dirty" if mode == "errors" else "clean"]
    if mode == "composite":  # x and y from two deserializers joined by key
        x = CTFDeserializer(path, StreamDefs(x=StreamDef(field="x", shape=2)), chunk_size_in_bytes=CHUNK)
        y = CTFDeserializer(
            path, StreamDefs(y=StreamDef(field="y", shape=7, is_sparse=True)), chunk_size_in_bytes=CHUNK * 2
        )
        return MinibatchSource([x, y], **options)
    errors = {"max_errors": 100, "trace_level": 0} if mode == "errors" else {}
    if mode == "errors":  # the errors a state holds are those of the chunks parsed so far: without prefetch threads
        options["prefetch"] = False  # the same at every run (hypothesis replays an example and compares its draws)
    return MinibatchSource(CTFDeserializer(path, STREAMS, chunk_size_in_bytes=CHUNK, **errors), **options)


def track(opened: Sources, source: MinibatchSource) -> MinibatchSource:
    opened.opened.append(source)
    return source


def samples_of(minibatch: Any) -> list[list[tuple[int, int]]]:
    """The (sequence id, step) of every sample, row by row."""
    x = minibatch["x"]
    values = x.values.reshape(-1, 2).astype(np.int64).tolist()
    bounds = np.cumsum(x.sequence_lengths).tolist()
    return [[(v[0], v[1]) for v in values[a:b]] for a, b in zip([0, *bounds[:-1]], bounds)]


def check_sequences_in_order(phases: list[list[list[tuple[int, int]]]], lengths: list[int]) -> None:
    """BPTT: within each partition's stream every sequence's steps follow each other; a sequence left unfinished
    in one phase continues, where it stopped, in exactly one partition of a later phase; none stays unfinished."""
    pending: Counter[tuple[int, int]] = Counter()  # (sequence, next step) of the sequences left unfinished
    for streams in phases:
        left: Counter[tuple[int, int]] = Counter()
        for stream in streams:
            runs: list[list[int]] = []  # [sequence, first step, last step]
            open_runs: dict[tuple[int, int], list[list[int]]] = {}  # (sequence, next step): runs that end before it
            for sequence, step in stream:  # (a sequence may be in two slots at once: in two sweeps)
                waiting = open_runs.get((sequence, step))
                if step > 0 and waiting:
                    run = waiting.pop()
                    run[2] = step
                else:
                    run = [sequence, step, step]
                    runs.append(run)
                open_runs.setdefault((sequence, step + 1), []).append(run)
            for sequence, first, end in runs:
                if first:
                    assert pending[(sequence, first)] > 0, f"sequence {sequence} resumed at step {first} from nowhere"
                    pending[(sequence, first)] -= 1
                if end < lengths[sequence] - 1:
                    left[(sequence, end + 1)] += 1
        pending += left
    assert not +pending, f"sequences never finished: {dict(+pending)}"


# --------------------------------------------------------------------------------------------- elastic plans
@st.composite
def plans(draw: st.DrawFn, mode: str) -> dict[str, Any]:
    phases = []
    for _ in range(draw(st.integers(1, 3))):
        partitions = draw(st.integers(1, 8))
        phases.append(
            {
                "partitions": partitions,
                "reads": draw(st.lists(st.integers(0, 5), min_size=partitions, max_size=partitions)),
                "restart": draw(st.lists(st.booleans(), min_size=partitions, max_size=partitions)),
                "merge": draw(st.booleans()),  # else, with the same partition count, each restores its own state
            }
        )
    low = 8 * TRUNCATION if mode == "bptt" else 1
    return {
        "options": {
            **draw(st.sampled_from(RANDOMIZATIONS)),
            "randomization_seed": draw(st.integers(0, 50)),
            "max_sweeps": draw(st.integers(2, 3)),
        },
        "phases": phases,
        "final": draw(st.integers(1, 8)),
        "sizes": draw(st.lists(st.integers(low, low + 24), min_size=1, max_size=4)),
    }


def _run_plan(files: dict[str, Path], mode: str, plan: dict[str, Any]) -> list[list[list[tuple[int, int]]]]:
    """Runs the phases of a plan; the samples each partition read, per phase."""
    sizes, options = plan["sizes"], plan["options"]
    opened = Sources()
    phases: list[list[list[tuple[int, int]]]] = []
    try:
        restore: list[Any] = [None]  # the state each partition of the next phase restores (one: for all)
        for phase in [*plan["phases"], {"partitions": plan["final"], "reads": None, "merge": True}]:
            k = phase["partitions"]
            streams, states = [], []
            for index in range(k):
                partition = {"num_data_partitions": k, "partition_index": index}
                source = track(opened, open_source(files, mode, options))
                state = restore[index] if len(restore) == k else restore[0]
                if state is not None:
                    source.restore_from_checkpoint(json.loads(json.dumps(state)))
                limit = None if phase["reads"] is None else phase["reads"][index]
                minibatches = read(source, sizes, limit=limit, **partition)
                if limit is not None and phase["restart"][index]:  # a new process resumes this partition
                    own = json.loads(json.dumps(source.get_checkpoint_state()))
                    source = track(opened, open_source(files, mode, options))
                    source.restore_from_checkpoint(own)
                    minibatches += read(source, sizes[::-1], limit=2, **partition)
                streams.append([sample for mb in minibatches for row in samples_of(mb) for sample in row])
                states.append(source.get_checkpoint_state())
            phases.append(streams)
            if phase["merge"]:
                restore = [MinibatchSource.merge_checkpoints(states[::-1] if k % 2 else states)]
            else:
                restore = states  # the next phase has as many partitions as this one when it does not merge
    finally:
        opened.close()
    return phases


@pytest.mark.parametrize("mode", MODES)
@settings(max_examples=15, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_property_any_plan_reads_every_sample_once_per_sweep(files, mode, data):
    plan = data.draw(plans(mode))
    for current, following in zip(plan["phases"], [*plan["phases"][1:], None]):
        if following is None or following["partitions"] != current["partitions"]:
            current["merge"] = True
    sweeps = plan["options"]["max_sweeps"]
    with open_source(files, mode, plan["options"]) as reference:
        expected = Counter(s for mb in read(reference, 7) for row in samples_of(mb) for s in row)
    lengths = random_lengths(SEQUENCES, 5, 22)
    if mode != "errors":
        assert expected == Counter({(i, t): sweeps for i, n in enumerate(lengths) for t in range(n)})
    else:
        assert set(expected.values()) == {sweeps} and len(expected) < sum(lengths)
    phases = _run_plan(files, mode, plan)
    got = Counter(sample for streams in phases for stream in streams for sample in stream)
    assert got == expected, f"missing {dict(expected - got)}, extra {dict(got - expected)}"
    if mode == "bptt":
        check_sequences_in_order(phases, lengths)


# --------------------------------------------------------------------------------------------- BPTT merges
def test_bptt_states_merge_and_every_sample_arrives_once_in_order(files):
    """Issue 22 §3: truncated BPTT states were refused ('carry sequences in flight and cannot be merged'). The
    sequences in flight now move to the new partitions, which continue each where it stopped."""
    options = {"randomization_window_in_chunks": 4, "randomization_seed": 3, "max_sweeps": 2}
    opened = Sources()
    phases = []
    try:
        states, streams = [], []
        for index, reads in enumerate([2, 5, 3]):
            source = track(opened, open_source(files, "bptt", options))
            minibatches = read(source, 12, limit=reads, num_data_partitions=3, partition_index=index)
            streams.append([s for mb in minibatches for row in samples_of(mb) for s in row])
            states.append(source.get_checkpoint_state())
        phases.append(streams)
        merged = MinibatchSource.merge_checkpoints(states)
        assert merged["bptt_slots"]["merged"], "sequences were in flight"
        streams = []
        for index in range(2):
            source = track(opened, open_source(files, "bptt", options))
            source.restore_from_checkpoint(merged)
            minibatches = read(source, 8, num_data_partitions=2, partition_index=index)
            streams.append([s for mb in minibatches for row in samples_of(mb) for s in row])
        phases.append(streams)
    finally:
        opened.close()
    lengths = random_lengths(SEQUENCES, 5, 22)
    got = Counter(s for streams in phases for stream in streams for s in stream)
    assert got == Counter({(i, t): 2 for i, n in enumerate(lengths) for t in range(n)})
    check_sequences_in_order(phases, lengths)


def test_a_bptt_rank_that_has_not_read_since_its_restore_keeps_its_share(files):
    """A merged BPTT state restored by 3 ranks, of which only rank 1 reads before the next checkpoint: the other
    two states still hold the whole merge's pieces in flight, and the next merge takes exactly their shares."""
    options = {"randomize": False, "max_sweeps": 1}
    opened = Sources()
    samples: list[tuple[int, int]] = []
    try:
        states = []
        for index in range(2):
            source = track(opened, open_source(files, "bptt", options))
            samples += [s for mb in read(source, 8, limit=3, num_data_partitions=2, partition_index=index)
                        for row in samples_of(mb) for s in row]  # fmt: skip
            states.append(source.get_checkpoint_state())
        merged = MinibatchSource.merge_checkpoints(states)
        states = []
        for index in range(3):
            source = track(opened, open_source(files, "bptt", options))
            source.restore_from_checkpoint(merged)
            limit = 2 if index == 1 else 0
            samples += [s for mb in read(source, 6, limit=limit, num_data_partitions=3, partition_index=index)
                        for row in samples_of(mb) for s in row]  # fmt: skip
            states.append(source.get_checkpoint_state())
        assert [s["cursor"]["partitioning"] for s in states] == [None, [3, 1], None]
        merged = MinibatchSource.merge_checkpoints(states)
        source = track(opened, open_source(files, "bptt", options))
        source.restore_from_checkpoint(merged)
        samples += [s for mb in read(source, 4) for row in samples_of(mb) for s in row]
    finally:
        opened.close()
    lengths = random_lengths(SEQUENCES, 5, 22)
    assert Counter(samples) == Counter({(i, t): 1 for i, n in enumerate(lengths) for t in range(n)})


def test_a_bptt_rank_whose_reads_take_only_carried_pieces_is_placed(files):
    """A rank restored from a merge whose first reads deliver only pieces carried over (no new sequence) has still
    read as partition i of k: its state says so, and the next merge gives it its own index (found by hypothesis:
    it was taken for a rank that had not read, and sequence 13 came twice while 27 was lost)."""
    plan = {
        "options": {"randomization_window_in_chunks": 4, "randomization_seed": 0, "max_sweeps": 2},
        "phases": [
            {"partitions": 7, "reads": [0] * 7, "restart": [i == 2 for i in range(7)], "merge": True},
            {"partitions": 5, "reads": [0] * 5, "restart": [i == 3 for i in range(5)], "merge": True},
        ],
        "final": 1,
        "sizes": [16],
    }
    phases = _run_plan(files, "bptt", plan)
    lengths = random_lengths(SEQUENCES, 5, 22)
    got = Counter(s for streams in phases for stream in streams for s in stream)
    assert got == Counter({(i, t): 2 for i, n in enumerate(lengths) for t in range(n)})
    check_sequences_in_order(phases, lengths)


@pytest.mark.parametrize("mode", ["sequence", "frame", "bptt"])
def test_states_taken_before_the_first_read_after_a_restore_merge(files, mode):
    """Every rank checkpoints right after restoring a merged state (before its first step): the merge of those
    states resumes exactly where the first merge did."""
    options = {"randomization_window_in_chunks": 4, "randomization_seed": 5, "max_sweeps": 1}
    size = 8 if mode == "bptt" else 9
    opened = Sources()
    try:
        states = []
        for index, reads in enumerate([3, 1, 2]):
            source = track(opened, open_source(files, mode, options))
            read(source, size, limit=reads, num_data_partitions=3, partition_index=index)
            states.append(source.get_checkpoint_state())
        merged = MinibatchSource.merge_checkpoints(states)
        fresh = []
        for _ in range(4):
            source = track(opened, open_source(files, mode, options))
            source.restore_from_checkpoint(merged)
            fresh.append(source.get_checkpoint_state())
        again = MinibatchSource.merge_checkpoints(fresh)
        runs = []
        for state in (merged, again):
            source = track(opened, open_source(files, mode, options))
            source.restore_from_checkpoint(state)
            runs.append(sorted(s for mb in read(source, size) for row in samples_of(mb) for s in row))
        assert runs[0] == runs[1] and runs[0]
    finally:
        opened.close()


# --------------------------------------------------------------------------------------------- validation
def _sweep_far_away(state: dict[str, Any]) -> dict[str, Any]:
    state = json.loads(json.dumps(state))
    state["cursor"]["layers"][str(10**9)] = [[1, [0]]]
    return seal(state)


def test_a_layer_naming_a_far_sweep_is_refused_without_hanging(files):
    """Issue 22 §6: merge_checkpoints looped over every sweep up to one a (re-sealed) layer named: 10^9."""
    with open_source(files, "sequence", {"max_sweeps": 2}) as source:
        read(source, 9, limit=2)
        state = _sweep_far_away(source.get_checkpoint_state())
        with pytest.raises(ConfigError, match=r"cursor\.layers names sweep '1000000000'"):
            MinibatchSource.merge_checkpoints([state])
        with pytest.raises(ConfigError, match=r"cursor\.layers"):
            source.restore_from_checkpoint(state)


def test_merged_partitions_far_apart_are_refused(files):
    with open_source(files, "sequence", {"max_sweeps": 2}) as source:
        states = [source.get_checkpoint_state()]
        state = json.loads(json.dumps(states[0]))
        state["cursor"]["sweep"] = state["minibatchSourcePosition"] = 10**6
        with pytest.raises(ConfigError, match="sweeps apart"):
            MinibatchSource.merge_checkpoints([*states, seal(state)])


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda s: s["cursor"].update(block_position=s["cursor"]["block_position"] + 1), "block_position"),
        (lambda s: s["cursor"]["layers"].setdefault(str(s["cursor"]["sweep"]), []).append([1, [10**6]]), "layers"),
        (lambda s: s["bptt_slots"]["slots"][0][0].__setitem__(1, 99), "bptt_slots"),
        (lambda s: s["bptt_slots"]["slots"][0][0].__setitem__(2, 99), "bptt_slots"),
        (lambda s: s["bptt_slots"]["slots"][0][0].__setitem__(0, 10**6), "bptt_slots"),
        (lambda s: s["bptt_slots"]["slots"][0].__setitem__(0, [-1, 0, 0]), "bptt_slots"),
        (lambda s: s.update(epoch=5), "epoch"),
    ],
    ids=["block-start", "layer-cursor", "bptt-offset", "bptt-length", "bptt-unit", "bptt-end-mark-in-a-slot", "epoch"],
)
def test_resealed_out_of_range_fields_are_refused(files, change, field):
    """Values the digest would have caught, edited and re-sealed: each is refused, naming the field."""
    with open_source(files, "bptt", {"randomization_window_in_chunks": 4, "max_sweeps": 1}) as source:
        read(source, 8, limit=3, num_data_partitions=2, partition_index=1)
        state = json.loads(json.dumps(source.get_checkpoint_state()))
        change(state)
        with pytest.raises(ConfigError, match=field):
            source.restore_from_checkpoint(seal(state))


_SCALARS = [("minibatchSourcePosition",), ("epoch",)] + [
    ("cursor", key) for key in ("sweep", "block", "position", "block_position", "block_samples")
]
_GARBAGE = st.one_of(
    st.sampled_from([-1, -(2**63), 10**9, 2**62 - 1, 2**62 + 1, 2**63, 2**64, 10**30]),
    st.floats(allow_nan=True),
    st.text(max_size=3),
    st.none(),
    st.booleans(),
    st.lists(st.integers(-2, 2), min_size=1, max_size=3),
    st.dictionaries(st.text(max_size=2), st.integers(-2, 2), min_size=1, max_size=2),
)


def _leaves(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Paths to every value inside a state (containers too), the digest and fingerprint left out."""
    if path:
        yield path
    if isinstance(value, dict):
        for key in value:
            if key not in ("digest", "fingerprint"):
                yield from _leaves(value[key], (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _leaves(item, (*path, index))


def _set(state: Any, path: tuple[Any, ...], value: Any) -> None:
    for key in path[:-1]:
        state = state[key]
    if value is _DELETE:
        del state[path[-1]]
    else:
        state[path[-1]] = value


def _get(state: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        state = state[key]
    return state


_DELETE = object()


@st.composite
def corruptions(draw: st.DrawFn, state: dict[str, Any]) -> tuple[tuple[Any, ...], Any]:
    """A path in the state and what replaces it: garbage or an out-of-range value anywhere, a near value of a field
    the data and the position decide, a deleted field, or a layer of a sweep far away."""
    paths = list(_leaves(state))
    kind = draw(st.sampled_from(["garbage", "near", "delete", "far-layer"]))
    if kind == "far-layer":
        sweep = state["cursor"]["sweep"] + draw(st.sampled_from([-1, 3, 10**9, 10**18]))
        return ("cursor", "layers", str(sweep)), [[1, [0]]]
    if kind == "near":
        lengths = [p for p in paths if p[:2] == ("bptt_slots", "slots") and len(p) == 5 and p[-1] == 2]
        path = draw(st.sampled_from(_SCALARS + lengths))
        return path, _get(state, path) + draw(st.sampled_from([-2, -1, 1, 2, 7]))
    if kind == "delete":  # (a field; an element taken out of a list of pieces in flight is not detectable, nor a
        # sweep's layers taken out: the state then says that sweep was read in order up to its position, which is
        # as consistent as what it said — only the digest tells them apart)
        fields = [p for p in paths if isinstance(p[-1], str) and p[:2] != ("cursor", "layers")]
        return draw(st.sampled_from(fields)), _DELETE
    path = draw(st.sampled_from(paths))
    return path, draw(_GARBAGE)


@pytest.mark.parametrize("mode", ["sequence", "frame", "bptt", "bucketing", "composite", "errors"])
@settings(max_examples=40, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_property_a_resealed_corruption_restores_the_same_data_or_is_refused(files, mode, data):
    """Issue 22 §6: whatever a state edited by hand and re-sealed says, restoring it either continues exactly as the
    honest state does or raises ConfigError (never another error, a hang, or other data); merging it too."""
    options = {**data.draw(st.sampled_from(RANDOMIZATIONS)), "max_sweeps": 2}
    partitions = data.draw(st.integers(1, 3))
    partition = {"num_data_partitions": partitions, "partition_index": data.draw(st.integers(0, partitions - 1))}
    size = 4 * TRUNCATION if mode == "bptt" else 7
    opened = Sources()
    try:
        source = track(opened, open_source(files, mode, options))
        if data.draw(st.booleans()):  # a merged state (layers; for BPTT, pieces in flight) restored by this partition
            old = data.draw(st.integers(2, 3))
            states = []
            for index in range(old):
                reader = track(opened, open_source(files, mode, options))
                reads = data.draw(st.integers(0, 6))
                read(reader, size, limit=reads, num_data_partitions=old, partition_index=index)
                states.append(reader.get_checkpoint_state())
            source.restore_from_checkpoint(MinibatchSource.merge_checkpoints(states))
        read(source, size, limit=data.draw(st.integers(0, 12)), **partition)
        honest = json.loads(json.dumps(source.get_checkpoint_state()))
        expected = [snapshot(mb) for mb in read(source, size, **partition)]
        path, value = data.draw(corruptions(honest))
        if path[-1] == "merged" and value is None:  # (as undetectable as pieces taken out of the list: not tried)
            return
        corrupted = json.loads(json.dumps(honest))
        with contextlib.suppress(KeyError, IndexError, TypeError):  # a far layer where the layers are not a dict
            _set(corrupted, path, value)
        seal(corrupted)
        with contextlib.suppress(ConfigError):
            MinibatchSource.merge_checkpoints([corrupted])
        restored = track(opened, open_source(files, mode, options))
        try:
            restored.restore_from_checkpoint(corrupted)
        except ConfigError:
            return
        assert [snapshot(mb) for mb in read(restored, size, **partition)] == expected, (path, value)
    finally:
        opened.close()


# --------------------------------------------------------------------------------------------- DataLoader workers
def _loader_source(path: str, mode: str) -> MinibatchSource:
    modes: dict[str, dict[str, Any]] = {"sequence": {}, "bptt": {"truncation_length": TRUNCATION}}
    return MinibatchSource(
        CTFDeserializer(path, STREAMS, chunk_size_in_bytes=CHUNK),
        max_sweeps=2,
        randomization_window_in_chunks=4,
        randomization_seed=9,
        **modes[mode],
    )


@pytest.mark.parametrize("mode", ["sequence", "bptt"])
@pytest.mark.parametrize(
    "plan",
    [  # per phase: (ranks, loader workers, batches each rank reads; None: to the end)
        [(2, 2, [3, 1]), (3, 0, [2, 0, 1]), (1, 2, None)],
        [(3, 0, [1, 4, 2]), (2, 3, [0, 3]), (4, 1, None)],
    ],
    ids=["2x2-3x0-1x2", "3x0-2x3-4x1"],
)
def test_ranks_and_loader_workers_change_between_restores(files, mode, plan):
    """cntkio.torch: the ranks' last batch states (or, for a rank that has not stepped since its restore, the state
    it restored) merged with merge_states, resumed by another number of ranks, each with another number of loader
    workers: every sample of both sweeps exactly once."""
    torch_module = pytest.importorskip("cntkio.torch")
    from torch.utils.data import DataLoader

    make = functools.partial(_loader_source, str(files["clean"]), mode)
    got: Counter[tuple[int, int]] = Counter()
    resume: dict[str, Any] | None = None
    for ranks, workers, reads in plan:
        states = []
        for rank in range(ranks):
            dataset = torch_module.MinibatchDataset(
                make, 8 * TRUNCATION, num_partitions=ranks, partition_index=rank, layout="flat"
            )
            if resume is not None:
                dataset.load_state_dict(resume)
            if reads is not None and not reads[rank]:  # checkpointed before its first step: what it restored
                states.append(dataset.state_dict())
                continue
            state = resume
            for number, batch in enumerate(DataLoader(dataset, batch_size=None, num_workers=workers)):
                if reads is not None and number == reads[rank]:
                    break
                values = batch["x"].reshape(-1, 2).long().tolist()  # (flat: every sample, row after row)
                got.update((v[0], v[1]) for v in values)
                state = batch.state
            dataset.close()
            states.append(state)
        if reads is not None:
            resume = torch_module.merge_states(states)
    lengths = random_lengths(SEQUENCES, 5, 22)
    assert got == Counter({(i, t): 2 for i, n in enumerate(lengths) for t in range(n)})
