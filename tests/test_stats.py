"""MinibatchSource.stats(): per-stage seconds and counts, the consumer's share of time in the reader, and the log
line at trace_level 2."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from cntkio import CTFDeserializer, MinibatchSource, StreamDef, StreamDefs
from cntkio._src.reading.stats import STAGES, ReaderStats

STREAMS = StreamDefs(x=StreamDef(field="x", shape=2))


@pytest.fixture
def data(tmp_path: Path) -> Path:
    path = tmp_path / "data.ctf"
    path.write_text("".join(f"{s} |x {s} {t}\n" for s in range(300) for t in range(1 + s % 3)))
    return path


@pytest.mark.parametrize("prefetch", [True, False])
def test_stats_count_what_was_read(data: Path, prefetch: bool) -> None:
    source = MinibatchSource(
        CTFDeserializer(data, STREAMS, chunk_size_in_bytes=300), max_sweeps=1, randomization_window_in_chunks=4,
        prefetch=prefetch,
    )  # fmt: skip
    assert source.stats().minibatches == 0 and source.stats().reader_fraction == 0.0
    minibatches = samples = sequences = 0
    while minibatch := source.next_minibatch(20):
        minibatches += 1
        samples += minibatch["x"].num_samples
        sequences += len(minibatch.sequence_keys)
    stats = source.stats()
    assert isinstance(stats, ReaderStats)
    assert samples == 600
    assert (stats.minibatches, stats.sequences) == (minibatches, sequences) == (minibatches, 300)
    chunks = CTFDeserializer(data, STREAMS, chunk_size_in_bytes=300).num_chunks()
    assert stats.counts["parse"] == stats.counts["load"] == chunks  # every chunk parsed once in the sweep
    assert stats.counts["index"] == 1 and stats.seconds["index"] > 0
    assert stats.counts["assemble"] == minibatches and stats.counts["randomize"] >= minibatches
    assert all(stats.seconds[stage] >= 0 for stage in STAGES)
    assert 0 < stats.reader_fraction <= 1
    assert stats.in_reader <= stats.elapsed + 1e-6
    assert set(stats.as_dict()["seconds"]) == set(STAGES)
    text = str(stats)
    assert "reader" in text and all(stage in text for stage in STAGES)


def test_a_slow_consumer_shows_a_small_reader_fraction(data: Path) -> None:
    source = MinibatchSource(CTFDeserializer(data, STREAMS), max_sweeps=1)
    while source.next_minibatch(100):
        time.sleep(0.05)  # the "training step"
    assert source.stats().reader_fraction < 0.5


def test_trace_level_2_logs_the_stats_at_each_sweep_end(data: Path, caplog: pytest.LogCaptureFixture) -> None:
    source = MinibatchSource(CTFDeserializer(data, STREAMS), max_sweeps=2, trace_level=2)
    with caplog.at_level(logging.INFO, logger="cntkio"):
        while source.next_minibatch(250):
            pass
    lines = [r.getMessage() for r in caplog.records if "where the time went" in r.getMessage()]
    assert len(lines) == 2 and "parse" in lines[0]


def test_stage_times_after_many_reads_are_estimated_from_a_sample(data: Path) -> None:
    """Past the first reads, the reading thread's stages are timed on one read in STAGE_SAMPLE and scaled: every
    stage still shows time, the time in the reader never exceeds the time elapsed, and the counts stay exact."""
    from cntkio._src.reading.stats import STAGE_SAMPLE

    source = MinibatchSource(CTFDeserializer(data, STREAMS), max_sweeps=20, randomization_seed=1)
    reads = 0
    while source.next_minibatch(7):
        reads += 1
    stats = source.stats()
    assert reads > 4 * STAGE_SAMPLE
    assert stats.minibatches == stats.counts["assemble"] == reads and stats.sequences == 20 * 300
    assert all(stats.seconds[stage] > 0 for stage in ("randomize", "plan", "assemble", "handoff"))
    assert 0 < stats.in_reader <= stats.elapsed
