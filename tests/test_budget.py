"""memory_budget_bytes: the randomization window shrinks to what the budget holds (deterministically, reported and
logged), the source then holds no more chunks than that, and a budget that cannot hold one chunk is an error."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cntkio import ConfigError, CTFDeserializer, MinibatchSource, StreamDef, StreamDefs
from cntkio._src.common.system import available_cores
from cntkio._src.corpus.table import Corpus
from cntkio._src.order import Randomization, SweepOrder
from cntkio._src.reading.budget import held_chunks

STREAMS = StreamDefs(x=StreamDef(field="x", shape=8))


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("budget") / "data.ctf"
    rng = np.random.default_rng(0)
    lines = [f"{s} |x " + " ".join(f"{v:.3f}" for v in rng.random(8)) for s in range(4000)]
    path.write_text("\n".join(lines) + "\n")
    return path


def reader(data: Path) -> CTFDeserializer:
    return CTFDeserializer(data, STREAMS, chunk_size_in_bytes=4000)  # ~60 sequences, ~2 KB parsed a chunk


def keys(source: MinibatchSource) -> list[int]:
    out = []
    while minibatch := source.next_minibatch(50):
        out += [key for _, key in minibatch.sequence_keys]
    return out


def test_the_window_shrinks_to_the_budget_and_the_source_keeps_to_it(data: Path, caplog) -> None:
    with caplog.at_level(logging.INFO, logger="cntkio"):
        source = MinibatchSource(reader(data), memory_budget_bytes=40_000, max_sweeps=1, randomization_seed=3)
    report = source.memory_budget
    assert report is not None and report.requested_window == 128 and 1 <= report.window < 128
    assert source.randomization.window == report.window
    assert "randomization window 128 ->" in caplog.text
    assert report.held_chunks * report.largest_chunk_bytes <= 40_000 + report.largest_chunk_bytes
    most = 0
    read = []
    while minibatch := source.next_minibatch(50):
        read += [key for _, key in minibatch.sequence_keys]
        most = max(most, source.cached_chunks)
    assert sorted(read) == list(range(4000))  # every sequence once
    assert most <= report.held_chunks


def test_the_budgeted_order_is_deterministic_and_checkpoints_carry_it(data: Path) -> None:
    first = keys(MinibatchSource(reader(data), memory_budget_bytes=40_000, max_sweeps=1, randomization_seed=3))
    again = keys(MinibatchSource(reader(data), memory_budget_bytes=40_000, max_sweeps=1, randomization_seed=3))
    assert first == again
    window = MinibatchSource(reader(data), memory_budget_bytes=40_000).randomization.window
    explicit = MinibatchSource(reader(data), randomization_window_in_chunks=window, max_sweeps=1, randomization_seed=3)
    assert keys(explicit) == first  # the budget only chose the window
    source = MinibatchSource(reader(data), memory_budget_bytes=40_000, max_sweeps=1, randomization_seed=3)
    source.next_minibatch(500)
    state = source.get_checkpoint_state()
    resumed = MinibatchSource(reader(data), memory_budget_bytes=40_000, max_sweeps=1, randomization_seed=3)
    resumed.restore_from_checkpoint(state)
    assert keys(resumed) == first[500:]
    other = MinibatchSource(reader(data), memory_budget_bytes=30_000, max_sweeps=1, randomization_seed=3)
    with pytest.raises(ValueError, match="another configuration"):
        other.restore_from_checkpoint(state)


def test_a_large_budget_keeps_the_window(data: Path) -> None:
    source = MinibatchSource(reader(data), memory_budget_bytes=1 << 30, randomization_window_in_chunks=10)
    assert source.randomization.window == 10 and source.memory_budget is not None
    assert source.memory_budget.window == source.memory_budget.requested_window == 10


def test_a_sample_window_shrinks_too(data: Path) -> None:
    source = MinibatchSource(
        reader(data), memory_budget_bytes=40_000, randomization_window_in_chunks=0,
        randomization_window_in_samples=3000,
    )  # fmt: skip
    assert source.randomization.sample_window and source.randomization.window < 3000


@pytest.mark.parametrize("options", [{}, {"randomize": False}, {"num_parse_threads": 0}])
def test_a_budget_below_one_chunk_is_an_error(data: Path, options: dict) -> None:
    with pytest.raises(ConfigError, match="cannot hold what one read needs"):
        MinibatchSource(reader(data), memory_budget_bytes=1_000, **options)
    with pytest.raises(ConfigError, match="must be positive"):
        MinibatchSource(reader(data), memory_budget_bytes=0, **options)


@pytest.fixture(scope="module")
def lengths(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Sequences of 1 to 29 samples: length bucketing merges blocks of many of them."""
    path = tmp_path_factory.mktemp("budget") / "lengths.ctf"
    rng = np.random.default_rng(1)
    lines = [
        f"{s} |x " + " ".join(f"{v:.2f}" for v in rng.random(8))
        for s in range(3000)
        for _ in range(int(rng.integers(1, 30)))
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def most_held(source: MinibatchSource, minibatch: int) -> tuple[int, list[int]]:
    most, read = 0, []
    while batch := source.next_minibatch(minibatch):
        read += [key for _, key in batch.sequence_keys]
        most = max(most, source.cached_chunks)
    return most, read


@pytest.mark.parametrize(
    "options",
    [
        {"bucket_by_length": 200},  # blocks span up to 1/8 of the window: a read into the next block holds two
        {"bucket_by_length": 200, "num_parse_threads": 0},
        {"chunk": 1, "memory_budget_bytes": 50_000},  # a sequence a chunk: blocks are merged
        {},
    ],
)
def test_the_source_holds_no_more_chunks_than_the_budget_planned(lengths: Path, options: dict) -> None:
    options = {"num_parse_threads": 2, "chunk": 4000, "memory_budget_bytes": 300_000, **options}
    deserializer = CTFDeserializer(lengths, STREAMS, chunk_size_in_bytes=options.pop("chunk"))
    source = MinibatchSource(deserializer, max_sweeps=2, randomization_seed=5, **options)
    report = source.memory_budget
    assert report is not None and report.window < report.requested_window  # the budget binds
    most, read = most_held(source, 50)
    assert most <= report.held_chunks
    assert sorted(read) == sorted(list(range(3000)) * 2)


def test_a_budget_that_holds_a_chunk_but_not_the_prefetch_degrades_the_prefetch(data: Path, caplog) -> None:
    roomy = MinibatchSource(reader(data), memory_budget_bytes=1 << 30, num_parse_threads=4).memory_budget
    assert roomy is not None and roomy.threads == 4 and roomy.window == 128
    with caplog.at_level(logging.INFO, logger="cntkio"):  # one chunk of text (4,000 bytes) a parse thread
        source = MinibatchSource(
            reader(data), memory_budget_bytes=25_000, num_parse_threads=4, max_sweeps=1, randomization_seed=3
        )
    report = source.memory_budget
    assert report is not None and report.requested_threads == 4 and report.threads < 4 and report.window >= 1
    assert source.engine.cache.threads == report.threads  # the reader runs with what the budget allowed
    assert (
        "parse threads (chunks prefetched ahead) 4 -> " in caplog.text and "randomization window 128 ->" in caplog.text
    )
    most, read = most_held(source, 50)
    assert sorted(read) == list(range(4000)) and most <= report.held_chunks
    stats = source.stats()  # what the budget allowed, with the rest of the reader's numbers
    assert stats.memory_budget is not None and stats.memory_budget["threads"] == report.threads
    assert f"parse threads 4 -> {report.threads}" in str(stats)


def test_a_budget_too_small_for_split_parsing_parses_a_chunk_on_one_thread(tmp_path: Path) -> None:
    path = tmp_path / "big.ctf"  # chunks of 2 MiB of text are parsed on several threads: their runs held twice
    rng = np.random.default_rng(2)
    path.write_text("".join(f"{s} |x " + " ".join(f"{v:.5f}" for v in row) + "\n"
                            for s, row in enumerate(rng.random((150_000, 8)))))  # fmt: skip
    deserializer = CTFDeserializer(path, STREAMS, chunk_size_in_bytes=2 << 20)
    roomy = MinibatchSource(deserializer, memory_budget_bytes=1 << 30, num_parse_threads=0, randomize=False)
    report = roomy.memory_budget
    assert report is not None and report.split_chunks == (available_cores() > 1)
    parsed = report.largest_chunk_bytes
    budget = (2 << 20) + 2 * parsed + parsed // 2  # the text and two parsed chunks, not the runs besides
    source = MinibatchSource(
        deserializer, memory_budget_bytes=budget, num_parse_threads=0, randomize=False, max_sweeps=1
    )
    assert source.memory_budget is not None and not source.memory_budget.split_chunks
    assert not source.engine.cache.split
    assert sum(len(batch.provenance.units) for batch in iter(lambda: source.next_minibatch(5000), {})) == 150_000


@pytest.fixture(scope="module")
def corpora(lengths: Path) -> dict[int, Corpus]:
    """The lengths file's corpus in chunks of one sequence, a few and many."""
    return {
        chunk: MinibatchSource(CTFDeserializer(lengths, STREAMS, chunk_size_in_bytes=chunk))._corpus
        for chunk in (1, 300, 4000)
    }


@given(
    window=st.integers(1, 300), bucket=st.sampled_from([0, 40, 400]), sweep=st.integers(0, 3),
    chunk=st.sampled_from([1, 300, 4000]),
)  # fmt: skip
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_two_consecutive_blocks_need_no_more_chunks_than_the_budget_counts(
    corpora: dict[int, Corpus], window: int, bucket: int, sweep: int, chunk: int
) -> None:
    corpus = corpora[chunk]  # a read that crosses into the next block holds the chunks of both
    randomization = Randomization(enabled=True, window=window, seed=7, bucket_samples=bucket)
    order = SweepOrder(corpus, randomization, sweep)
    needed = [set(order.needed_chunks(k).tolist()) for k in range(order.num_blocks)]
    most = max(len(block | after) for block, after in zip(needed, [*needed[1:], set()]))
    assert most <= held_chunks(corpus, randomization, window, 0)
