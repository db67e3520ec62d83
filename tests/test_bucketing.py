"""Length bucketing (``MinibatchSource(bucket_by_length=N)``): minibatches of sequences of similar length formed
inside each randomization block — far less padding, every sequence once per sweep, the same order for the same
seed, exact resume, any partitioning."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cntkio import ConfigError, CTFDeserializer, MinibatchSource, StreamDef, StreamDefs

STREAMS = StreamDefs(w=StreamDef(field="w", shape=100, is_sparse=True), f=StreamDef(field="f", shape=2))
MINIBATCH = 256


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """1,500 sequences of 1 to 40 samples (ATIS-like lengths), in a few chunks."""
    rng = np.random.default_rng(5)
    lines = []
    for s in range(1500):
        for t in range(int(rng.integers(1, 41))):
            lines.append(f"{s} |w {int(rng.integers(0, 100))}:1 |f {s} {t}")
    path = tmp_path_factory.mktemp("bucketing") / "lengths.ctf"
    path.write_text("\n".join(lines) + "\n")
    return path


def source(path: Path, bucket: int = MINIBATCH, **options) -> MinibatchSource:
    options = {"max_sweeps": 1, "randomization_seed": 2, **options}
    return MinibatchSource(CTFDeserializer(path, STREAMS, chunk_size_in_bytes=60_000), bucket_by_length=bucket,
                           **options)  # fmt: skip


def read(src: MinibatchSource, size: int = MINIBATCH, **partition) -> tuple[list[int], float]:
    """The keys read and the padding fraction (padded cells that hold no sample) of the minibatches."""
    keys: list[int] = []
    cells = samples = 0
    while minibatch := src.next_minibatch(size, **partition):
        lengths = minibatch["w"].sequence_lengths
        cells += len(lengths) * int(lengths.max())
        samples += int(lengths.sum())
        keys += [key for _, key in minibatch.sequence_keys]
    return keys, 1 - samples / cells


def test_bucketing_cuts_padding_below_a_tenth(data: Path) -> None:
    bucketed, plain = source(data), source(data, bucket=0)
    keys, padding = read(bucketed)
    plain_keys, plain_padding = read(plain)
    assert sorted(keys) == sorted(plain_keys) == list(range(1500))  # every sequence once
    assert padding < 0.10 < 0.30 < plain_padding
    assert keys != plain_keys
    assert bucketed.stats().padding < 0.10 < 0.30 < plain.stats().padding  # what stats() reports (sampled reads)


def test_the_bucketed_order_is_a_function_of_the_seed(data: Path) -> None:
    first, _ = read(source(data))
    assert read(source(data))[0] == first
    assert read(source(data, randomization_seed=3))[0] != first
    assert read(source(data, max_sweeps=2))[0][1500:] != first  # the next sweep is ordered anew


def test_a_bucketed_source_resumes_exactly(data: Path) -> None:
    full, _ = read(source(data, max_sweeps=2))
    src = source(data, max_sweeps=2)
    head = []
    for _ in range(37):
        head += [key for _, key in src.next_minibatch(MINIBATCH).sequence_keys]
    state = src.get_checkpoint_state()
    resumed = source(data, max_sweeps=2)
    resumed.restore_from_checkpoint(state)
    assert head + read(resumed)[0] == full
    plain = source(data, bucket=0, max_sweeps=2)
    with pytest.raises(ValueError, match="another configuration"):
        plain.restore_from_checkpoint(state)


@pytest.mark.parametrize("partitions", [2, 3])
def test_partitions_read_every_sequence_once(data: Path, partitions: int) -> None:
    sources = [source(data) for _ in range(partitions)]
    keys: list[int] = []
    paddings = []
    for index, src in enumerate(sources):
        part, padding = read(src, MINIBATCH, num_data_partitions=partitions, partition_index=index)
        keys += part
        paddings.append(padding)
    assert sorted(keys) == list(range(1500))
    assert max(paddings) < 0.2


def test_bucketing_needs_the_default_randomization(data: Path) -> None:
    for options in ({"randomize": False}, {"compat": True}, {"frame_mode": True}, {"truncation_length": 8}):
        with pytest.raises(ConfigError, match="bucket_by_length"):
            source(data, **options)
    with pytest.raises(ConfigError, match="bucket_by_length"):
        source(data, bucket=-1)


def test_loader_workers_see_the_same_bucketed_stream(data: Path) -> None:
    torch_data = pytest.importorskip("torch.utils.data")
    import functools

    from cntkio.torch import MinibatchDataset

    def keys(workers: int) -> list[int]:
        dataset = MinibatchDataset(functools.partial(source, data), MINIBATCH)
        loader = torch_data.DataLoader(dataset, batch_size=None, num_workers=workers)
        return [key for batch in loader for _, key in batch.keys]

    assert keys(2) == keys(0) == read(source(data))[0]


@pytest.mark.parametrize("partitions", [2, 3])
def test_partitions_read_whole_buckets(data: Path, partitions: int) -> None:
    """Found by review: a partition looked up its bucket from the block position where the last read stopped, which
    other partitions' units of that bucket still follow — so every other read took a single sequence."""
    budget = MINIBATCH // partitions
    for index in range(partitions):
        src = source(data)
        sizes = []
        while minibatch := src.next_minibatch(MINIBATCH, num_data_partitions=partitions, partition_index=index):
            sizes.append(int(minibatch["w"].sequence_lengths.sum()))
        assert np.mean(sizes) > 0.6 * budget and sum(size < budget / 4 for size in sizes) < len(sizes) / 5
