"""Sweep orders of MinibatchSource: exactly once per sweep, determinism, seeds, windows, configuration errors."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cntkio import (
    FULL_DATA_SWEEP,
    ConfigError,
    CTFDeserializer,
    MinibatchSource,
    StreamInformation,
    UserDeserializer,
    _native,
)
from order_helpers import (
    STREAMS,
    CountingDeserializer,
    Data,
    Sources,
    assert_exactly_once,
    check_values,
    chunk_keys,
    keys_of,
    make_data,
    read,
    snapshot,
    split_sweeps,
    unit_stream,
    write_ctf,
)

CHUNK = 400  # bytes: the 300-sequence file has about 70 chunks
SIZES = [1, 7, 32, 5, 64, 13]


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Data:
    """300 sequences of 1..5 samples (y on every line, so frame mode works)."""
    return make_data(tmp_path_factory.mktemp("order"), 300, max_length=5, seed=1)


@pytest.fixture(scope="module")
def ragged(tmp_path_factory: pytest.TempPathFactory) -> Data:
    """200 sequences of 1..8 samples where y leaves out some lines."""
    return make_data(tmp_path_factory.mktemp("ragged"), 200, max_length=8, seed=2, ragged=True)


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Data:
    """4000 sequences: about 170 chunks of 2000 bytes (700 of 500 bytes)."""
    return make_data(tmp_path_factory.mktemp("big"), 4000, max_length=5, seed=3)


@pytest.fixture(scope="module")
def hyp_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hypothesis")


@pytest.fixture
def sources() -> Iterator[Sources]:
    opened = Sources()
    yield opened
    opened.close()


WINDOWS: list[dict[str, Any]] = [
    {"randomization_window_in_chunks": 1},
    {"randomization_window_in_chunks": 4},
    {},  # the default: 128 chunks, more than the file has
    {"randomization_window_in_chunks": 0, "randomization_window_in_samples": 50},
    {"randomization_window_in_chunks": 3, "compat": True},
    {"randomization_window_in_chunks": 0, "randomization_window_in_samples": 40, "compat": True},
    {"randomize": False},
]


# --------------------------------------------------------------------------------------------- exactly once
@pytest.mark.parametrize("window", WINDOWS, ids=lambda w: ",".join(f"{k}={v}" for k, v in w.items()) or "default")
@pytest.mark.parametrize("frame_mode", [False, True], ids=["sequence", "frame"])
def test_every_sweep_delivers_every_unit_once(sources, data, window, frame_mode):
    sweeps = 3
    source = sources.open(
        data, chunk_size=CHUNK, max_sweeps=sweeps, frame_mode=frame_mode, randomization_seed=7, **window
    )
    minibatches = read(source, SIZES)
    units = data.frames if frame_mode else data.keys
    stream = [key for mb in minibatches for key in keys_of(mb)]
    per_sweep = split_sweeps(stream, len(units))
    assert len(per_sweep) == sweeps
    for sweep in per_sweep:
        assert_exactly_once(sweep, units)
    # end_of_sweep is raised exactly on the minibatches that hold the last unit of a sweep
    flagged = [i for i, mb in enumerate(minibatches) if mb["x"].end_of_sweep]
    ends, expected = 0, []
    for i, mb in enumerate(minibatches):
        ends += len(keys_of(mb))
        if ends // len(units) > len(expected):
            expected.append(i)
    assert flagged == expected
    assert all(mb["x"].end_of_sweep == mb["y"].end_of_sweep for mb in minibatches)
    assert sum(mb["x"].num_samples for mb in minibatches) == sweeps * data.total_samples
    for mb in minibatches:
        check_values(mb, frame_mode)


def test_ragged_streams_in_sequence_mode_once_per_sweep(sources, ragged):
    source = sources.open(ragged, chunk_size=300, max_sweeps=2, randomization_window_in_chunks=3)
    minibatches = read(source, [10, 3, 40])
    for sweep in split_sweeps([k for mb in minibatches for k in keys_of(mb)], len(ragged.keys)):
        assert_exactly_once(sweep, ragged.keys)
    for mb in minibatches:
        check_values(mb)
        # y may be shorter than x, never longer; x has the index length
        assert all(y <= x for x, y in zip(mb["x"].sequence_lengths, mb["y"].sequence_lengths))


def test_sequence_budget_is_respected(sources, data):
    """A minibatch holds whole sequences within the budget; only a lone first sequence may exceed it."""
    source = sources.open(data, chunk_size=CHUNK, max_sweeps=1, randomization_window_in_chunks=5)
    for size in [1, 2, 3, 4, 9, 30]:
        for mb in read(source, size, limit=10):
            lengths = mb["x"].sequence_lengths
            assert lengths.sum() <= size or len(lengths) == 1


# --------------------------------------------------------------------------------------------- determinism
@pytest.mark.parametrize("frame_mode", [False, True], ids=["sequence", "frame"])
@pytest.mark.parametrize("compat", [False, True], ids=["default", "compat"])
def test_threads_and_prefetch_do_not_change_minibatches(sources, data, frame_mode, compat):
    def run(**extra: Any) -> list[Any]:
        source = sources.open(
            data,
            chunk_size=CHUNK,
            max_sweeps=2,
            frame_mode=frame_mode,
            compat=compat,
            randomization_window_in_chunks=4,
            randomization_seed=3,
            **extra,
        )
        return [snapshot(mb) for mb in read(source, SIZES)]

    reference = run(prefetch=False)
    assert run(num_parse_threads=0) == reference
    assert run(num_parse_threads=1) == reference
    assert run(num_parse_threads=2) == reference
    assert run(num_parse_threads=2, prefetch=True) == reference


@pytest.mark.parametrize("window", WINDOWS[:6], ids=lambda w: ",".join(f"{k}={v}" for k, v in w.items()) or "default")
def test_order_does_not_depend_on_minibatch_sizes(sources, data, window):
    def stream(sizes: list[int], frame_mode: bool) -> tuple[list[Any], list[float]]:
        source = sources.open(
            data, chunk_size=CHUNK, max_sweeps=2, frame_mode=frame_mode, randomization_seed=11, **window
        )
        minibatches = read(source, sizes)
        keys = [k for mb in minibatches for k in keys_of(mb)]
        values = [v for mb in minibatches for v in mb["x"].values.ravel().tolist()]
        return keys, values

    for frame_mode in (False, True):
        reference = stream([1], frame_mode)
        for sizes in ([64], [3, 100, 17], [1000], [2, 2, 5, 1]):
            assert stream(sizes, frame_mode) == reference


def _sweep_orders(sources: Sources, data: Data, sweeps: int, **options: Any) -> list[list[Any]]:
    source = sources.open(data, chunk_size=CHUNK, max_sweeps=sweeps, **options)
    return split_sweeps(unit_stream(source, 50), len(data.keys))


@pytest.mark.parametrize("compat", [False, True], ids=["default", "compat"])
def test_same_seed_same_order_other_seed_other_order(sources, data, compat):
    orders = {
        seed: _sweep_orders(sources, data, 2, randomization_seed=seed, compat=compat, randomization_window_in_chunks=4)
        for seed in (0, 1, 2, 12345)
    }
    assert (
        _sweep_orders(sources, data, 2, randomization_seed=1, compat=compat, randomization_window_in_chunks=4)
        == (orders[1])
    )
    firsts = [tuple(o[0]) for o in orders.values()]
    assert len(set(firsts)) == len(firsts)
    assert all(o[0] != data.keys for o in orders.values())


@pytest.mark.parametrize("compat", [False, True], ids=["default", "compat"])
def test_consecutive_sweeps_differ(sources, data, compat):
    orders = _sweep_orders(sources, data, 4, randomization_seed=5, compat=compat, randomization_window_in_chunks=4)
    assert len({tuple(o) for o in orders}) == 4


def test_default_seeds_never_share_a_sweep_order(sources, data):
    """Unlike CNTK (sweep k seeded with seed + k), seed s sweep k+1 is not seed s+1 sweep k."""
    for seed in (0, 5, 99):
        here = _sweep_orders(sources, data, 3, randomization_seed=seed, randomization_window_in_chunks=4)
        there = _sweep_orders(sources, data, 3, randomization_seed=seed + 1, randomization_window_in_chunks=4)
        for k in range(2):
            assert here[k + 1] != there[k]
        assert len({tuple(o) for o in here + there}) == 6


def test_seeds_beyond_63_bits_are_distinct(sources, data):
    """CNTK seeds are 64-bit unsigned: 0 and 2**63 are different seeds."""
    assert _sweep_orders(sources, data, 1, randomization_seed=2**63) != _sweep_orders(sources, data, 1)


def test_compat_shares_sweep_orders_like_cntk(sources, data):
    """compat=True seeds sweep k with seed + k, as CNTK does: seed s sweep k+1 equals seed s+1 sweep k."""
    here = _sweep_orders(sources, data, 3, randomization_seed=4, compat=True, randomization_window_in_chunks=4)
    there = _sweep_orders(sources, data, 2, randomization_seed=5, compat=True, randomization_window_in_chunks=4)
    assert here[1] == there[0]
    assert here[2] == there[1]


@pytest.mark.parametrize(
    "window",
    [
        {"randomization_window_in_chunks": 4},
        {"randomization_window_in_chunks": 0, "randomization_window_in_samples": 60},
    ],
)
def test_compat_is_deterministic_and_differs_from_default(sources, data, window):
    compat = _sweep_orders(sources, data, 2, randomization_seed=2, compat=True, **window)
    assert _sweep_orders(sources, data, 2, randomization_seed=2, compat=True, **window) == compat
    default = _sweep_orders(sources, data, 2, randomization_seed=2, **window)
    assert compat[0] != default[0] and compat[1] != default[1]


def test_randomize_false_is_file_order(sources, data):
    assert _sweep_orders(sources, data, 2, randomize=False) == [data.keys, data.keys]
    # both windows zero also turns randomization off (spec §2)
    assert _sweep_orders(sources, data, 1, randomization_window_in_chunks=0) == [data.keys]
    frames = sources.open(data, chunk_size=CHUNK, max_sweeps=1, randomize=False, frame_mode=True)
    assert unit_stream(frames, 9) == data.frames


def test_randomized_order_is_not_file_order(sources, data):
    (order,) = _sweep_orders(sources, data, 1)
    assert order != data.keys and sorted(order) == data.keys


def test_chunk_size_changes_the_order(sources, data):
    """The order is a function of the chunk list (spec §3.4)."""
    small = _sweep_orders(sources, data, 1, randomization_window_in_chunks=4)
    source = sources.open(data, chunk_size=1500, max_sweeps=1, randomization_window_in_chunks=4)
    assert unit_stream(source, 50) != small[0]


# --------------------------------------------------------------------------------------------- windows
def _open_chunks(order: list[Any], chunk_of: dict[Any, int]) -> int:
    """Most chunks ever "open" (some of their sequences read, some not yet) along a reading order."""
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for position, key in enumerate(order):
        chunk = chunk_of[key]
        first.setdefault(chunk, position)
        last[chunk] = position
    events = sorted([(p, 1) for p in first.values()] + [(p, -1) for p in last.values()], key=lambda e: (e[0], -e[1]))
    most = current = 0
    for _, delta in events:
        current += delta
        most = max(most, current)
    return most


@pytest.mark.parametrize("window", [1, 2, 5])
def test_chunk_window_bounds_how_far_sequences_move(sources, data, window):
    """Default mode, window W chunks: at any point of a sweep at most W chunks are partly read; W=1 keeps
    every chunk's sequences together (shuffled among themselves)."""
    chunk_of = {key: c for c, keys in enumerate(chunk_keys(data, CHUNK)) for key in keys}
    for order in _sweep_orders(sources, data, 3, randomization_window_in_chunks=window, randomization_seed=window):
        assert _open_chunks(order, chunk_of) <= window
        if window == 1:
            assert order != data.keys


@pytest.mark.parametrize(
    ("chunk_size", "window"),
    [
        (2000, {"randomization_window_in_chunks": 1}),
        (2000, {"randomization_window_in_chunks": 4}),
        (2000, {"randomization_window_in_chunks": 10}),
        (2000, {"randomization_window_in_chunks": 4, "compat": True}),
        (2000, {"randomization_window_in_chunks": 0, "randomization_window_in_samples": 300}),
        (2000, {"randomization_window_in_chunks": 0, "randomization_window_in_samples": 1500}),
        (2000, {"randomize": False}),
        (500, {"randomization_window_in_chunks": 4}),
    ],
)
@pytest.mark.parametrize("prefetch", [False, True], ids=["no-prefetch", "prefetch"])
def test_source_holds_a_window_of_chunks(sources, big, chunk_size, window, prefetch):
    """Streaming a sweep of 170-700 chunks keeps about a window of parsed chunks, parsing each chunk once.

    The window counts 1 chunk in file order; a sample window spans at most samples / smallest chunk + 1
    chunks. Prefetch also reads 64 positions ahead, which spans a few more chunks.
    """
    deserializer = CountingDeserializer(CTFDeserializer(big.path, STREAMS, chunk_size_in_bytes=chunk_size))
    chunks = deserializer.num_chunks()
    source = sources.open(deserializer, max_sweeps=1, prefetch=prefetch, **window)
    if "randomization_window_in_samples" in window:
        samples = deserializer.inner.sequence_lengths()
        bounds = deserializer.chunk_sequence_counts().cumsum()
        smallest = min(int(samples[a:b].sum()) for a, b in zip([0, *bounds[:-2]], bounds[:-1]))
        in_chunks = math.ceil(window["randomization_window_in_samples"] / smallest) + 1
    else:
        in_chunks = window.get("randomization_window_in_chunks", 1)
    slack = 2
    if prefetch:
        slack += math.ceil(64 * chunks / len(big.keys)) + 3
    most = 0
    read_units = 0
    while minibatch := source.next_minibatch(16):
        read_units += len(keys_of(minibatch))
        most = max(most, source.cached_chunks)
    assert read_units == len(big.keys)
    assert chunks >= 150
    assert most <= in_chunks + slack, (most, in_chunks, slack)
    if prefetch:  # background parsing may also have started on the next sweep (see the test below)
        assert set(deserializer.calls) == set(range(chunks))
    else:
        assert sorted(deserializer.calls) == list(range(chunks)), "every chunk parsed exactly once in the sweep"


@pytest.mark.parametrize("window", [{"randomize": False}, {"randomization_window_in_chunks": 4}])
def test_no_prefetch_past_the_end_of_the_epoch(sources, data, window):
    """With max_sweeps=1 no chunk is ever needed twice, so none should be scheduled for parsing twice."""
    counting = CountingDeserializer(CTFDeserializer(data.path, STREAMS, chunk_size_in_bytes=CHUNK))
    source = sources.open(counting, max_sweeps=1, **window)
    while source.next_minibatch(16):
        pass
    scheduled = counting.calls
    assert len(scheduled) == len(set(scheduled)), sorted(c for c in set(scheduled) if scheduled.count(c) > 1)


@pytest.mark.parametrize("prefetch", [False, True], ids=["no-prefetch", "prefetch"])
@pytest.mark.parametrize("epochs", [False, True], ids=["sweeps", "epochs"])
def test_chunks_loaded_when_a_sweep_ends_are_not_parsed_again(sources, data, prefetch, epochs):
    """A window that holds the whole corpus: the next sweep (or epoch, with start_epoch) starts from the chunks still
    loaded, so every chunk is parsed once however many sweeps are read, and the data is the same."""
    counting = CountingDeserializer(CTFDeserializer(data.path, STREAMS, chunk_size_in_bytes=CHUNK))
    chunks = counting.num_chunks()
    options = {"randomization_window_in_chunks": 128, "randomization_seed": 5, "prefetch": prefetch}
    source = sources.open(counting, max_sweeps=1 if epochs else 3, **options)
    minibatches = []
    for epoch in range(3 if epochs else 1):
        if epochs:
            source.start_epoch(epoch)
        while minibatch := source.next_minibatch(16):
            check_values(minibatch)
            minibatches.append(snapshot(minibatch))
    assert sorted(counting.calls) == list(range(chunks)), "every chunk parsed once in three sweeps"
    expected = []  # a new source per epoch: nothing loaded before
    for epoch in range(3 if epochs else 1):
        reference = sources.open(data, chunk_size=CHUNK, max_sweeps=1 if epochs else 3, **options)
        reference.start_epoch(epoch)
        expected += [snapshot(m) for m in read(reference, 16)]
    assert minibatches == expected


@pytest.mark.parametrize("window", [{"randomization_window_in_chunks": 4}, {"randomize": False}])
def test_sweeps_keep_no_more_chunks_than_a_window_holds(sources, big, window):
    """Chunks kept across a sweep's end never make the source hold more than the window and prefetch held before."""
    deserializer = CountingDeserializer(CTFDeserializer(big.path, STREAMS, chunk_size_in_bytes=2000))
    source = sources.open(deserializer, max_sweeps=3, **window)
    most_in_first_sweep = most = sweep = 0
    while minibatch := source.next_minibatch(16):
        most = max(most, source.cached_chunks)
        if sweep == 0:
            most_in_first_sweep = most
        sweep += any(data.end_of_sweep for data in minibatch.values())
    assert sweep == 3 and most <= most_in_first_sweep + 1, (most, most_in_first_sweep)


def test_an_epoch_that_follows_is_prefetched_before_the_one_before_ends(sources, data):
    """Epochs read in turn (start_epoch): near the end of one the first chunks of the next are parsed; a source not
    moved by start_epoch stops at its end (test_no_prefetch_past_the_end_of_the_epoch)."""
    counting = CountingDeserializer(CTFDeserializer(data.path, STREAMS, chunk_size_in_bytes=CHUNK))
    chunks = counting.num_chunks()
    source = sources.open(counting, max_sweeps=1, randomization_window_in_chunks=4)
    source.start_epoch(0)
    while source.next_minibatch(16):
        pass
    waited = 0
    while len(counting.calls) <= chunks and waited < 200:  # (parsed in the background: wait up to 10 s)
        time.sleep(0.05)
        waited += 1
    parsed_ahead = set(counting.calls[chunks:])
    chunk_of = {key: chunk for chunk, keys in enumerate(chunk_keys(data, CHUNK)) for key in keys}
    source.start_epoch(1)
    needed = {chunk_of[key] for key in keys_of(source.next_minibatch(16))}
    assert parsed_ahead & needed, "the next epoch's first minibatch finds chunks it needs parsed ahead"


# --------------------------------------------------------------------------------------------- config errors
def test_configuration_errors(sources, data):
    with pytest.raises((ValueError, ConfigError)):
        sources.open(data, max_samples=100, max_sweeps=1)
    with pytest.raises((ValueError, ConfigError)):
        sources.open(data, randomization_window_in_chunks=3, randomization_window_in_samples=100)
    with pytest.raises((ValueError, ConfigError)):
        sources.open(data, frame_mode=True, truncation_length=4)
    with pytest.raises((ValueError, ConfigError)):
        sources.open(data, truncation_length=-1)
    source = sources.open(data)
    with pytest.raises(ValueError):
        source.next_minibatch(0)
    # allowed: the defaults next to one set value
    sources.open(data, max_samples=100)
    sources.open(data, max_sweeps=1)
    sources.open(data, randomization_window_in_chunks=0, randomization_window_in_samples=100)
    sources.open(data, truncation_length=4)


def test_full_data_sweep_and_infinite_sources(sources, data):
    one = sources.open(data, chunk_size=CHUNK, max_samples=FULL_DATA_SWEEP)
    assert not one.is_infinite()
    assert sorted(unit_stream(one, 50)) == data.keys
    endless = sources.open(data, chunk_size=CHUNK)
    assert endless.is_infinite()
    assert len(read(endless, 500, limit=20)) == 20  # 20 * 500 samples: many sweeps, never empty


def test_max_samples_stops_after_the_sequence_that_reaches_it(sources, data):
    source = sources.open(data, chunk_size=CHUNK, max_samples=100, randomization_window_in_chunks=4)
    minibatches = read(source, 7)
    total = sum(mb["x"].num_samples for mb in minibatches)
    last = int(minibatches[-1]["x"].sequence_lengths[-1])
    assert 100 <= total < 100 + last
    assert source.next_minibatch(7) == {}


# --------------------------------------------------------------------------------------------- properties
@st.composite
def configurations(draw: st.DrawFn) -> dict[str, Any]:
    lengths = draw(st.lists(st.integers(1, 6), min_size=1, max_size=40))
    if draw(st.booleans()):
        window = {"randomization_window_in_chunks": draw(st.integers(1, 8))}
    else:
        window = {"randomization_window_in_chunks": 0, "randomization_window_in_samples": draw(st.integers(1, 80))}
    return {
        "lengths": lengths,
        "chunk_size": draw(st.integers(30, 400)),
        "options": {
            **window,
            "randomization_seed": draw(st.integers(0, 2**31)),
            "compat": draw(st.booleans()),
            "frame_mode": draw(st.booleans()),
        },
        "sizes": draw(st.lists(st.integers(1, 30), min_size=1, max_size=6)),
    }


@settings(max_examples=40, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(config=configurations())
def test_property_sweeps_are_permutations_whatever_the_minibatch_sizes(hyp_dir, config):
    data = write_ctf(hyp_dir / "property.ctf", config["lengths"])
    opened = Sources()
    try:
        frame_mode = config["options"]["frame_mode"]
        units = data.frames if frame_mode else data.keys

        def stream(sizes: list[int], **extra: Any) -> list[Any]:
            source = opened.open(data, chunk_size=config["chunk_size"], max_sweeps=2, **config["options"], **extra)
            return unit_stream(source, sizes)

        reference = stream([1], prefetch=False)
        for sweep in split_sweeps(reference, len(units)):
            assert_exactly_once(sweep, units)
        assert stream(config["sizes"]) == reference
    finally:
        opened.close()


@settings(max_examples=25, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lengths=st.lists(st.integers(1, 6), min_size=8, max_size=40), seed=st.integers(0, 2**31))
def test_property_seeds_differ(hyp_dir, lengths, seed):
    data = write_ctf(hyp_dir / "seeds.ctf", lengths)
    opened = Sources()
    try:
        orders = [
            unit_stream(
                opened.open(
                    data, chunk_size=60, max_sweeps=1, randomization_seed=s, randomization_window_in_chunks=100
                ),
                10,
            )
            for s in (seed, seed, seed + 1)
        ]
        assert orders[0] == orders[1]
        # 8+ sequences: two independent shuffles coincide with probability <= 1/8!
        assert orders[0] != orders[2]
    finally:
        opened.close()


def test_sources_of_one_deserializer_do_not_interfere(data):
    """A deserializer is immutable: two sources over it read the same data independently."""
    deserializer = CTFDeserializer(data.path, STREAMS, chunk_size_in_bytes=CHUNK)
    a = MinibatchSource(deserializer, max_sweeps=1, randomization_seed=1)
    b = MinibatchSource(deserializer, max_sweeps=1, randomization_seed=1)
    try:
        first = [snapshot(mb) for mb in read(a, 20, limit=5)]
        assert [snapshot(mb) for mb in read(b, 20, limit=5)] == first
    finally:
        a.close()
        b.close()


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.floats(allow_nan=False, allow_infinity=True, width=64),
            st.sampled_from([0.0, -0.0, 1.0, 2.5, -3.0]),  # ties
        ),
        max_size=300,
    )
)
def test_the_native_radix_argsort_is_numpys_stable_argsort(keys: list[float]) -> None:
    array = np.array(keys, dtype=np.float64)
    assert np.array_equal(_native.stable_argsort(array), np.argsort(array, kind="stable"))


@settings(max_examples=300, deadline=None)
@given(
    seed=st.one_of(st.integers(0, 2**32 - 1), st.integers(0, 2**64 - 1)),
    sweep=st.one_of(st.integers(0, 8), st.integers(0, 2**40)),
    chunks=st.lists(st.tuples(st.integers(0, 2**40), st.integers(0, 5), st.floats(0, 1e6)), max_size=6),
    window=st.floats(1, 1e4),
)
def test_the_native_unit_keys_are_numpys(seed: int, sweep: int, chunks: list[tuple[int, int, float]], window: float):
    """The default order's keys come from NumPy's SeedSequence + PCG64, reproduced natively bit for bit."""
    ids = np.array([c for c, _, _ in chunks], dtype=np.int64)
    counts = np.array([n for _, n, _ in chunks], dtype=np.int64)
    starts = np.array([s for _, _, s in chunks], dtype=np.float64)
    expected = [
        np.minimum(
            start + window * np.random.default_rng([seed, sweep, chunk]).random(n),
            np.nextafter(start + window, -np.inf),
        )
        for chunk, n, start in chunks
    ]
    got = _native.default_unit_keys(seed, sweep, ids, counts, starts, window)
    assert np.array_equal(got, np.concatenate(expected) if expected else np.zeros(0))


def test_the_native_radix_argsort_refuses_nan() -> None:
    with pytest.raises(ValueError, match="NaN"):
        _native.stable_argsort(np.array([1.0, np.nan]))


# --------------------------------------------------------------------------------------------- tiny chunks
class TinyChunks(UserDeserializer):
    """600 chunks of 1 or 2 one-sample sequences (as images are: one per chunk); the value is the unit number."""

    sizes = np.random.default_rng(7).integers(1, 3, 600)

    def stream_infos(self) -> list[StreamInformation]:
        return [StreamInformation("u", 0, "dense", np.float64, (1,))]

    def num_chunks(self) -> int:
        return len(self.sizes)

    def get_chunk(self, chunk_id: int) -> dict[str, np.ndarray]:
        first = int(self.sizes[:chunk_id].sum())
        return {"u": np.arange(first, first + self.sizes[chunk_id], dtype=np.float64).reshape(-1, 1)}


def reference_order(sizes: np.ndarray, window: int, seed: int, sweep: int) -> list[int]:
    """The default randomization as order/default.py defines it: chunks shuffled with [seed, sweep]; every unit of the
    chunk at rank s gets the key s + window * u (u from [seed, sweep, chunk]); units read by increasing key, ties
    by rank, then by place in the chunk."""
    chunk_order = np.random.default_rng([seed, sweep]).permutation(len(sizes))
    firsts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    entries = []
    for rank, chunk in enumerate(chunk_order):
        u = np.random.default_rng([seed, sweep, int(chunk)]).random(int(sizes[chunk]))
        keys = np.minimum(rank + window * u, np.nextafter(rank + window, -np.inf))
        for place in np.argsort(keys, kind="stable"):
            entries.append((keys[place], rank, int(place), int(firsts[chunk] + place)))
    return [unit for *_, unit in sorted(entries)]


@pytest.mark.parametrize("window", [1, 8, 64, 300])
def test_tiny_chunks_are_read_in_key_order_within_a_window(sources, window):
    """Blocks of tiny chunks are merged (about 8 units a block) for speed; the order is still the global key
    order, and the source holds at most a window and 1/16 of a window more chunks (plus prefetch)."""
    deserializer = TinyChunks()
    source = sources.open(deserializer, max_sweeps=2, randomization_window_in_chunks=window, randomization_seed=5)
    units: list[int] = []
    most = 0
    while minibatch := source.next_minibatch(16):
        units += minibatch["u"].values.ravel().astype(int).tolist()
        most = max(most, source.cached_chunks)
    total = int(TinyChunks.sizes.sum())
    assert units[:total] == reference_order(TinyChunks.sizes, window, 5, 0)
    assert units[total:] == reference_order(TinyChunks.sizes, window, 5, 1)
    assert most <= window + window // 16 + 16 + 4, most  # window, merged block, a minibatch, prefetch
