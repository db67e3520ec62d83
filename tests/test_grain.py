"""cntkio.grain with real Grain: the sequence source under Grain's DataLoader with worker processes (every sequence
once per epoch, the values cntkio reads), index_shuffle determinism, composite joins, the minibatch iterator's exact
resume through get_state/set_state, and a 2-partition (JAX-process-like) split reading every sequence once."""

from __future__ import annotations

import functools
import json
import pickle
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cntkio import CTFDeserializer, MinibatchSource, StreamDef, StreamDefs

grain = pytest.importorskip("grain")

from cntkio.grain import SequenceSource, minibatches, padded_batch  # noqa: E402

STREAMS = StreamDefs(
    words=StreamDef(field="w", shape=40, is_sparse=True),
    feats=StreamDef(field="f", shape=2),
)
SEQUENCES = 120


@pytest.fixture(scope="module", autouse=True)
def absl_flags() -> None:
    """Grain's DataLoader reads absl flags, which a program started by ``absl.app.run`` has parsed; pytest has not."""
    from absl import flags

    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()


def write_ctf(path: Path, sequences: int = SEQUENCES, seed: int = 0) -> None:
    """Sequences of 1-9 samples: a one-hot word (sometimes two) per sample and dense features ``[s, t]``."""
    rng = np.random.default_rng(seed)
    lines = []
    for s in range(sequences):
        for t in range(int(rng.integers(1, 10))):
            second = f" {int(rng.integers(0, 40))}:0.5" if t % 3 == 2 else ""
            lines.append(f"{s} |w {int(rng.integers(0, 20))}:1{second} |f {s} {t}")
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("grain") / "seq.ctf"
    write_ctf(path)
    return str(path)


def reader(path: str) -> CTFDeserializer:
    return CTFDeserializer(path, STREAMS, chunk_size_in_bytes=1200)


def make_source(path: str, max_sweeps: int = 1, seed: int = 5) -> MinibatchSource:
    return MinibatchSource(
        reader(path), max_sweeps=max_sweeps, randomization_window_in_chunks=3, randomization_seed=seed
    )


def direct(path: str) -> dict[int, dict[str, np.ndarray]]:
    """Every sequence as cntkio reads it (one sweep, file order): key -> {feats: dense, words: dense}."""
    source = MinibatchSource(reader(path), randomize=False, max_sweeps=1)
    out: dict[int, dict[str, np.ndarray]] = {}
    while mb := source.next_minibatch(50):
        keys = [int(key) for _, key in mb.sequence_keys]
        feats = mb["feats"].as_sequences()
        words = mb["words"].as_sequences()
        for key, f, w in zip(keys, feats, words, strict=True):
            out[key] = {"feats": np.asarray(f), "words": np.asarray(w.todense() if hasattr(w, "todense") else w)}
    return out


def dense_words(record: dict[str, Any]) -> np.ndarray:
    csr = record["words"]
    indptr = csr["indptr"]
    assert int(csr["dim"]) == 40
    out = np.zeros((len(indptr) - 1, 40), dtype=csr["values"].dtype)
    out[np.repeat(np.arange(len(indptr) - 1), np.diff(indptr)), csr["indices"]] = csr["values"]
    return out


@pytest.mark.parametrize("read", ["sequence", "chunk"])
def test_the_source_holds_every_sequence_as_cntkio_reads_it(data: str, read: str) -> None:
    source = SequenceSource(reader(data), read=read)
    expected = direct(data)
    assert len(source) == SEQUENCES == len(expected)
    assert reader(data).num_chunks() > 3  # (several chunks: the cache and the chunk lookup matter)
    for i in range(len(source)):
        record = source[i]
        assert record is not None
        key = int(record["key"])
        assert key == i  # (file order)
        np.testing.assert_array_equal(record["feats"], expected[key]["feats"])
        np.testing.assert_array_equal(dense_words(record), expected[key]["words"])
        assert record["words"]["indices"].dtype == np.int32 and record["words"]["indptr"][0] == 0
    # by chunk, in order: each chunk parsed once; by sequence: none (each read by its own byte range)
    assert source.chunks_parsed == (reader(data).num_chunks() if read == "chunk" else 0)
    assert source[-1]["key"] == source[len(source) - 1]["key"]
    with pytest.raises(IndexError, match="out of range"):
        source[len(source)]
    dense = SequenceSource(reader(data), sparse="dense", key_field=None, read=read)
    record = dense[7]
    assert set(record) == {"words", "feats"}
    np.testing.assert_array_equal(record["words"], expected[7]["words"])


def test_the_cache_is_bounded_and_thread_safe(data: str) -> None:
    source = SequenceSource(reader(data), cache_chunks=2, read="chunk")
    chunks = reader(data).num_chunks()
    order = np.random.default_rng(3).permutation(len(source))
    results: dict[int, Any] = {}

    def read(part: np.ndarray) -> None:
        for i in part:
            results[int(i)] = source[int(i)]

    threads = [threading.Thread(target=read, args=(part,)) for part in np.array_split(order, 4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == list(range(len(source)))
    assert all(int(results[i]["key"]) == i for i in results)
    assert len(source._cache._chunks) <= 2
    assert source.chunks_parsed > chunks  # (random order over a 2-chunk cache parses chunks again)
    tiny = SequenceSource(reader(data), cache_bytes=1, read="chunk")
    for i in range(len(tiny)):
        assert int(tiny[i]["key"]) == i
    assert len(tiny._cache._chunks) == 1  # (the chunk being read stays, whatever its size)


def test_under_grains_data_loader_with_two_worker_processes(data: str) -> None:
    source = SequenceSource(reader(data))
    expected = direct(data)
    copy = pickle.loads(pickle.dumps(source))
    assert len(copy) == len(source) and int(copy[5]["key"]) == 5
    sampler = grain.samplers.IndexSampler(
        len(source), shuffle=True, seed=4, num_epochs=1, shard_options=grain.sharding.NoSharding()
    )
    loader = grain.DataLoader(
        data_source=source,
        sampler=sampler,
        worker_count=2,
        operations=[grain.transforms.Batch(8, batch_fn=padded_batch)],
    )
    seen: list[int] = []
    for batch in loader:
        keys = [int(k) for k in batch["key"]]
        seen += keys
        for row, key in enumerate(keys):
            length = batch["lengths"]["feats"][row]
            np.testing.assert_array_equal(batch["feats"][row, :length], expected[key]["feats"])
            assert not batch["feats"][row, length:].any()
            np.testing.assert_array_equal(batch["words"][row, :length], expected[key]["words"])
            assert batch["words"].shape[2] == 40
    assert sorted(seen) == list(range(SEQUENCES))  # every sequence exactly once in the epoch
    assert seen != list(range(SEQUENCES))  # (shuffled)


def test_map_dataset_index_shuffle_is_deterministic(data: str) -> None:
    def keys(seed: int) -> list[int]:
        dataset = grain.MapDataset.source(SequenceSource(reader(data))).shuffle(seed=seed)
        return [int(record["key"]) for record in dataset]

    first, again, other = keys(11), keys(11), keys(12)
    assert first == again
    assert sorted(first) == list(range(SEQUENCES))
    assert first != other
    # with mp_prefetch (worker processes) the order is the same
    dataset = grain.MapDataset.source(SequenceSource(reader(data))).shuffle(seed=11).to_iter_dataset()
    prefetched = dataset.mp_prefetch(grain.MultiprocessingOptions(num_workers=2))
    iterator = iter(prefetched)
    try:
        assert sorted(int(record["key"]) for record in iterator) == list(range(SEQUENCES))
    finally:
        iterator.close()


def test_composite_join_by_key(tmp_path: Path, data: str) -> None:
    labels = tmp_path / "labels.ctf"
    # labels for every other sequence, in reverse order: the join follows the keys, the primary's order stays
    labels.write_text("".join(f"{s} |l {s % 5}:1\n" for s in reversed(range(0, SEQUENCES, 2))))
    second = CTFDeserializer(str(labels), StreamDefs(label=StreamDef(field="l", shape=5, is_sparse=True)))
    source = SequenceSource([reader(data), second], sparse="dense")
    assert len(source) == SEQUENCES // 2
    assert source.join_report is not None and source.join_report.dropped == SEQUENCES // 2
    expected = direct(data)
    for i in range(len(source)):
        record = source[i]
        key = int(record["key"])
        assert key == 2 * i
        np.testing.assert_array_equal(record["feats"], expected[key]["feats"])
        assert record["label"].shape == (1, 5) and record["label"][0, key % 5] == 1
    copy = pickle.loads(pickle.dumps(source))
    assert int(copy[3]["key"]) == 6
    pairs = tmp_path / "pairs.ctf"  # two samples per sequence: the others are cut to two (or fewer) by "truncate"
    pairs.write_text("".join(f"{s} |p {s} 0\n{s} |p {s} 1\n" for s in range(SEQUENCES)))
    third = CTFDeserializer(str(pairs), StreamDefs(pair=StreamDef(field="p", shape=2)))
    cut = SequenceSource([reader(data), third], length_mismatch="truncate")
    for i in range(len(cut)):
        length = min(len(expected[i]["feats"]), 2)
        assert len(cut[i]["feats"]) == len(cut[i]["pair"]) == length
        np.testing.assert_array_equal(cut[i]["feats"], expected[i]["feats"][:length])
    with pytest.raises(Exception, match="'pad' or 'truncate'"):
        SequenceSource([reader(data), second], length_mismatch="drop")


def test_bad_arguments_are_errors(data: str) -> None:
    with pytest.raises(ValueError, match="sparse"):
        SequenceSource(reader(data), sparse="coo")
    with pytest.raises(Exception, match="key_field 'feats'"):
        SequenceSource(reader(data), key_field="feats")
    with pytest.raises(ValueError, match="cache_chunks"):
        SequenceSource(reader(data), cache_chunks=0)
    with pytest.raises(TypeError, match="make_source"):
        minibatches(make_source(data), 32, partition=(1, 0))  # type: ignore[arg-type]


def _run(iterator: Any) -> list[dict[str, Any]]:
    return [batch for batch in iterator]


def _equal(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return json.dumps(_lists(a)) == json.dumps(_lists(b))


def _lists(tree: Any) -> Any:
    if isinstance(tree, dict):
        return {k: _lists(v) for k, v in sorted(tree.items())}
    return np.asarray(tree).tolist()


def test_the_iterators_state_resumes_exactly(data: str) -> None:
    dataset = minibatches(functools.partial(make_source, data, 2), 40, partition=(1, 0), num_epochs=2, keys=True)
    full = _run(iter(dataset))
    assert len(full) > 10
    keys = Counter(k for batch in full for k in batch["keys"].tolist() if k)
    assert sorted(int(k) for k in keys) == list(range(SEQUENCES)) and set(keys.values()) == {4}  # 2 epochs x 2 sweeps
    for k in (0, 3, len(full) // 2, len(full) - 1, len(full)):
        iterator = iter(dataset)
        for _ in range(k):
            next(iterator)
        state = json.loads(json.dumps(iterator.get_state()))  # (JSON, as Grain/Orbax checkpoints store it)
        fresh = iter(dataset)
        fresh.set_state(state)
        rest = _run(fresh)
        assert len(rest) == len(full) - k
        assert all(_equal(a, b) for a, b in zip(rest, full[k:], strict=True))
        assert fresh.get_state()["steps"] == len(full)


def test_two_partitions_cover_every_sequence_once(data: str) -> None:
    seen: Counter[int] = Counter()
    for index in range(2):
        dataset = minibatches(functools.partial(make_source, data), 40, partition=(2, index), keys=True)
        iterator = iter(dataset)
        for batch in iterator:
            rows = batch["mask"]["feats"].any(1)
            assert [k != "" for k in batch["keys"].tolist()] == rows.tolist()
            for row, key in enumerate(batch["keys"].tolist()):
                if key:
                    n = batch["lengths"]["feats"][row]
                    assert (batch["feats"][row, :n, 0] == int(key)).all()
                    seen[int(key)] += 1
            assert [str(k) for _, k in iterator.last_keys] == [k for k in batch["keys"].tolist() if k]
    assert sorted(seen) == list(range(SEQUENCES)) and set(seen.values()) == {1}


def test_the_minibatch_dataset_in_a_grain_pipeline(data: str) -> None:
    dataset = minibatches(functools.partial(make_source, data), 40, partition=(1, 0), length_buckets=(16,))
    mapped = dataset.map(lambda batch: {"n": batch["mask"]["words"].sum(), "words": batch["words"]})
    iterator = iter(mapped)
    batches = list(iterator)
    assert {batch["words"].shape[1:] for batch in batches} == {(16, 40)}
    total = sum(int(batch["n"]) for batch in batches)
    assert total == sum(len(v["feats"]) for v in direct(data).values())
    state = iterator.get_state()  # (Grain's map iterator carries its parent's state)
    assert "source" in json.dumps(state)


def test_mp_prefetch_workers_read_sub_partitions_and_resume(data: str) -> None:
    dataset = minibatches(functools.partial(make_source, data), 40, partition=(1, 0), keys=True)
    prefetched = dataset.mp_prefetch(grain.MultiprocessingOptions(num_workers=2))
    iterator = iter(prefetched)
    try:
        full = [batch["keys"].tolist() for batch in iterator]
    finally:
        iterator.close()
    seen = Counter(int(k) for keys in full for k in keys if k)
    assert sorted(seen) == list(range(SEQUENCES)) and set(seen.values()) == {1}  # the two workers: each once
    iterator = iter(prefetched)
    try:
        first = [next(iterator)["keys"].tolist() for _ in range(3)]
        state = json.loads(json.dumps(iterator.get_state()))  # (Grain's state: each worker's cntkio state)
    finally:
        iterator.close()
    resumed = iter(prefetched)
    try:
        resumed.set_state(state)
        rest = [batch["keys"].tolist() for batch in resumed]
    finally:
        resumed.close()
    assert first + rest == full


def test_a_closed_iterator_refuses_to_go_on(data: str) -> None:
    iterator = iter(minibatches(functools.partial(make_source, data), 40, partition=(1, 0)))
    next(iterator)
    iterator.close()
    assert iterator.source.closed
    with pytest.raises(ValueError, match="closed"):
        next(iterator)


def test_a_sequence_read_alone_that_has_a_bad_record_is_read_with_its_chunk_and_counted(tmp_path: Path) -> None:
    path = tmp_path / "bad.ctf"
    lines = [f"{i} |feats {i} {i + 1} {i + 2}\n" for i in range(40)]
    lines[17] = "17 |feats 1 x 3\n"  # a bad value
    path.write_text("".join(lines))
    deserializer = CTFDeserializer(str(path), StreamDefs(feats=StreamDef(shape=3)), max_errors=5,
                                   chunk_size_in_bytes=200)  # fmt: skip
    source = SequenceSource(deserializer)
    clean = source[3]
    assert clean is not None and source.chunks_parsed == 0
    np.testing.assert_array_equal(clean["feats"], [[3, 4, 5]])
    source[17]  # (parsed with its chunk: the error is counted with its line)
    assert source.chunks_parsed == 1 and deserializer.errors.count == 2  # (the value, and the line left empty)
    assert {(e.location.line, e.location.sequence_key) for e in deserializer.errors.errors} == {(18, 17)}
