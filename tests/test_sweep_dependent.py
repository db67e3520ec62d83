"""Deserializers whose chunks vary by sweep (random augmentation drawn per sweep): every unit is read with its own
sweep's data, also across sweep boundaries inside a window or a minibatch, with threads, partitions, frame mode,
as a secondary, and after a checkpoint restore."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest

from cntkio import ChunkIndex, ConfigError, DenseStream, Deserializer, MinibatchSource, StreamInformation
from order_helpers import snapshot


class Augmented(Deserializer):
    """``count`` sequences of ``k % 3 + 1`` samples in ``chunks`` chunks; sample values are [key, sweep]: the
    data a sweep reads tells which sweep it was made for. ``calls`` counts (chunk, sweep) loads."""

    sweep_dependent = True

    def __init__(self, count: int = 40, chunks: int = 8, name: str = "x"):
        self.count, self.chunks, self.name = count, chunks, name
        self.bounds = np.linspace(0, count, chunks + 1).astype(int)
        self.info = StreamInformation(name, 0, "dense", np.dtype(np.float32), (2,))
        self.calls: Counter[tuple[int, int]] = Counter()

    def stream_infos(self) -> list[StreamInformation]:
        return [self.info]

    def num_chunks(self) -> int:
        return self.chunks

    def chunk_index(self, chunk_id: int) -> ChunkIndex:
        keys = np.arange(self.bounds[chunk_id], self.bounds[chunk_id + 1])
        return ChunkIndex(chunk_id, keys, keys % 3 + 1)

    def get_chunk(self, chunk_id: int) -> dict[str, DenseStream]:
        return self.get_chunk_of_sweep(chunk_id, 0)

    def get_chunk_of_sweep(self, chunk_id: int, sweep: int) -> dict[str, DenseStream]:
        self.calls[(chunk_id, sweep)] += 1
        index = self.chunk_index(chunk_id)
        keys = np.repeat(index.keys, index.lengths)
        values = np.stack([keys, np.full(len(keys), sweep)], axis=1).astype(np.float32)
        return {self.name: DenseStream(values, np.concatenate([[0], np.cumsum(index.lengths)]))}


def read_all(source: MinibatchSource, size: int, **partition: Any) -> list[tuple[int, int]]:
    """(key, sweep the data was made for) of every sample read; a read spans at most two consecutive sweeps and
    sweeps never go back."""
    seen: list[tuple[int, int]] = []
    latest = 0
    while minibatch := source.next_minibatch(size, **partition):
        values = next(iter(minibatch.values())).values.reshape(-1, 2)
        made_for = values[:, 1].astype(int)
        assert made_for.max() - made_for.min() <= 1 and made_for.min() >= latest
        assert (np.diff(made_for) >= 0).all()
        latest = int(made_for.max())
        seen.extend(zip(values[:, 0].astype(int).tolist(), made_for.tolist()))
    return seen


@pytest.mark.parametrize("size", [1, 7, 30, 500])
@pytest.mark.parametrize("frame_mode", [False, True])
@pytest.mark.parametrize("threads", [0, 2])
def test_every_sample_is_read_with_its_sweeps_data(size: int, frame_mode: bool, threads: int) -> None:
    reader = Augmented()
    source = MinibatchSource(
        reader,
        max_sweeps=4,
        randomization_window_in_chunks=3,
        frame_mode=frame_mode,
        num_parse_threads=threads,
        prefetch=threads > 0,
    )
    seen = read_all(source, size)
    samples = {k: k % 3 + 1 for k in range(reader.count)}
    for sweep in range(4):
        got = Counter(k for k, s in seen if s == sweep)
        assert got == samples, f"sweep {sweep}"
    assert len(seen) == 4 * sum(samples.values())
    positions: dict[int, list[int]] = {}
    for position, (_, sweep) in enumerate(seen):  # sweeps come in order: all of sweep s before any of s + 2
        positions.setdefault(sweep, []).append(position)
    for sweep in range(2):
        assert max(positions[sweep]) < min(positions[sweep + 2])


def test_a_minibatch_larger_than_a_sweep_stops_at_the_second_sweep() -> None:
    source = MinibatchSource(Augmented(count=6, chunks=2), max_sweeps=5, randomization_window_in_chunks=2)
    sizes = []
    while minibatch := source.next_minibatch(1000):
        values = minibatch["x"].values.reshape(-1, 2)
        assert len(set(values[:, 1].astype(int).tolist())) <= 2
        sizes.append(len(values))
    assert sum(sizes) == 5 * 12 and max(sizes) <= 24


@pytest.mark.parametrize("partitions", [2, 3])
def test_partitions_read_every_sample_once_per_sweep(partitions: int) -> None:
    sources = [MinibatchSource(Augmented(), max_sweeps=3, randomization_window_in_chunks=2) for _ in range(partitions)]
    seen = []
    for index, source in enumerate(sources):
        seen += read_all(source, 12, num_data_partitions=partitions, partition_index=index)
    total = Counter(seen)
    assert set(total.values()) == {k % 3 + 1 for k in range(40)} | set()
    assert total == Counter({(k, s): k % 3 + 1 for k in range(40) for s in range(3)})


def test_a_checkpoint_restores_the_sweeps_data() -> None:
    def source() -> MinibatchSource:
        return MinibatchSource(Augmented(), randomization_window_in_chunks=3, randomization_seed=5)

    first = source()
    for _ in range(25):  # into the second sweep
        first.next_minibatch(9)
    state = first.get_checkpoint_state()
    rest = [snapshot(first.next_minibatch(9)) for _ in range(30)]
    again = source()
    again.restore_from_checkpoint(state)
    assert [snapshot(again.next_minibatch(9)) for _ in range(30)] == rest


def test_as_a_secondary_its_data_follows_the_primarys_sweep() -> None:
    class Plain(Augmented):
        sweep_dependent = False

    source = MinibatchSource(
        [Plain(name="p"), Augmented(name="a", chunks=5)], max_sweeps=3, randomization_window_in_chunks=2
    )
    sweep = 0
    total = 0
    while minibatch := source.next_minibatch(10):
        plain = minibatch["p"].values.reshape(-1, 2)
        augmented = minibatch["a"].values.reshape(-1, 2)
        assert (plain[:, 1] == 0).all() and (plain[:, 0] == augmented[:, 0]).all()
        made_for = augmented[:, 1].astype(int)
        assert made_for.min() >= sweep
        sweep = int(made_for.min())
        total += len(augmented)
    assert total == 3 * sum(k % 3 + 1 for k in range(40))


def test_each_chunk_is_made_once_per_sweep() -> None:
    reader = Augmented()
    source = MinibatchSource(reader, max_sweeps=3, randomization_window_in_chunks=2, num_parse_threads=2)
    read_all(source, 11)
    assert set(reader.calls) == {(c, s) for c in range(8) for s in range(3)}
    assert max(reader.calls.values()) <= 2  # at most once more when a window straddles a sweep boundary


def test_truncated_bptt_is_refused() -> None:
    with pytest.raises(ConfigError, match="varies by sweep"):
        MinibatchSource(Augmented(), truncation_length=2)
