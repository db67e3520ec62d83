"""The PyTorch hand-off (issue 25): minibatches read ahead on a background thread (``ahead``) give the same stream,
states and resumes as reading on demand; a batch's state is taken compactly and built when asked for; sparse streams
are CSR tensors over the reader's int32 indices; loader workers send bundles of minibatches that ``loader()`` hands
out one by one, in the order of ``num_workers=0``."""

from __future__ import annotations

import functools
import gc
import itertools
import os
import pickle
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from cntkio import CTFDeserializer, MinibatchSource, StreamDef, StreamDefs  # noqa: E402
from cntkio._src.integrations import shm  # noqa: E402
from cntkio._src.integrations.ahead import Ahead  # noqa: E402
from cntkio.torch import BatchState, MinibatchDataset, MinibatchLoader, loader  # noqa: E402


def write_ctf(path: Path, sequences: int = 300) -> Path:
    rng = np.random.default_rng(5)
    lines = []
    for k in range(sequences):
        for step in range(int(rng.integers(1, 6))):
            label = f" |y {k % 7}:1" if step == 0 else ""
            lines.append(f"{k} |x {rng.integers(0, 50)}:{step + 1} {rng.integers(50, 100)}:0.5{label}")
    path.write_text("\n".join(lines) + "\n")
    return path


def make_source(path: str, sweeps: int = 2) -> MinibatchSource:
    streams = StreamDefs(
        x=StreamDef(field="x", shape=100, is_sparse=True), y=StreamDef(field="y", shape=7, is_sparse=True)
    )
    reader = CTFDeserializer(path, streams, chunk_size_in_bytes=1500)
    return MinibatchSource(reader, max_sweeps=sweeps, randomization_window_in_chunks=3, randomization_seed=3)


@pytest.fixture
def data(tmp_path: Path) -> str:
    return str(write_ctf(tmp_path / "data.ctf"))


def stream_of(batches: Any) -> list[tuple[Any, ...]]:
    """Each batch as (keys, x's values and column ids, the state's source position)."""
    return [
        (tuple(b.keys), b["x"].values().numpy().tobytes(), b["x"].col_indices().numpy().tobytes(),
         b.state["source"]["minibatchSourcePosition"])
        for b in batches
    ]  # fmt: skip


def test_ahead_gives_the_stream_and_states_of_reading_on_demand(data: str) -> None:
    make = functools.partial(make_source, data)
    on_demand = stream_of(MinibatchDataset(make, 64, ahead=0))
    assert len(on_demand) > 10
    for ahead in (1, 2, 5):
        assert stream_of(MinibatchDataset(make, 64, ahead=ahead)) == on_demand


@pytest.mark.parametrize("ahead", [0, 3])
def test_a_loop_left_early_resumes_after_the_last_batch_delivered(data: str, ahead: int) -> None:
    """Batches read ahead and never delivered are not skipped: state_dict() is the last delivered batch's."""
    make = functools.partial(make_source, data)
    expected = stream_of(MinibatchDataset(make, 64, ahead=0))
    dataset = MinibatchDataset(make, 64, ahead=ahead)
    iterator = iter(dataset)
    taken = [next(iterator) for _ in range(7)]
    saved = dataset.state_dict()
    del iterator
    gc.collect()
    resumed = MinibatchDataset(make, 64, ahead=ahead)
    resumed.load_state_dict(saved)
    assert stream_of(taken) + stream_of(resumed) == expected
    again = MinibatchDataset(make, 64, ahead=ahead)
    again.load_state_dict(taken[3].state)
    assert stream_of(again) == expected[4:]


class Boom(RuntimeError):
    pass


def test_ahead_raises_the_producers_error_after_the_items_before_it() -> None:
    def items() -> Any:
        yield 1
        yield 2
        raise Boom("the third")

    got = []
    with pytest.raises(Boom, match="the third"):
        for item in Ahead(items(), 2):
            got.append(item)
    assert got == [1, 2]


def test_closing_ahead_stops_its_thread_and_closes_the_producer() -> None:
    closed = threading.Event()

    def endless() -> Any:
        try:
            k = 0
            while True:
                yield k
                k += 1
        finally:
            closed.set()

    ahead = Ahead(endless(), 2, name="test-ahead")
    assert [next(ahead) for _ in range(5)] == [0, 1, 2, 3, 4]
    ahead.close()
    assert closed.is_set()
    assert not any(t.name == "test-ahead" for t in threading.enumerate())
    with pytest.raises(StopIteration):
        next(ahead)


class _Clock:
    """A clock for Ahead's timing: each item handed over costs ``threaded`` or ``inline`` seconds, by the way it was
    made."""

    def __init__(self, threaded: float, inline: float):
        self.costs = {True: threaded, False: inline}
        self.now = 0.0
        self.ahead: Ahead[Any] | None = None

    def __call__(self) -> float:
        assert self.ahead is not None
        return self.now

    def tick(self) -> None:
        assert self.ahead is not None
        self.now += self.costs[self.ahead.threaded]


@pytest.mark.parametrize(("threaded", "inline"), [(1.0, 2.0), (2.0, 1.0)], ids=["thread-faster", "inline-faster"])
def test_ahead_keeps_the_faster_way_of_making_items_and_tries_the_other_now_and_then(
    monkeypatch: pytest.MonkeyPatch, threaded: float, inline: float
) -> None:
    from cntkio._src.integrations import ahead as module

    clock = _Clock(threaded, inline)
    monkeypatch.setattr(module, "_clock", clock)
    ahead = clock.ahead = Ahead(iter(range(10**6)), 2)
    ways = []
    for expected in range(3000):
        clock.tick()
        assert next(ahead) == expected
        ways.append(ahead.threaded)
    ahead.close()
    faster = threaded < inline
    settled = ways[100:]  # (after the first timing of both ways)
    share = sum(way == faster for way in settled) / len(settled)
    assert 0.9 < share < 1.0, share  # the faster way, but for the other's reprobes
    probes = sum(1 for a, b in itertools.pairwise(settled) if a == faster and b != faster)
    assert probes >= len(settled) // (module.REPROBE_ITEMS + 2 * module.PROBE_ITEMS + 8)  # (one every ~550 items)


def test_one_long_wait_in_a_timing_does_not_decide_the_way(monkeypatch: pytest.MonkeyPatch) -> None:
    """A chunk waited for once while the thread's way is timed (as at a pass start) is not the thread's doing: the
    thread's way stays, a little faster per item (before: the timing's mean chose the consumer's way for 512 items,
    a whole pass of exposed reads)."""
    from cntkio._src.integrations import ahead as module

    clock = _Clock(1.0, 1.05)
    monkeypatch.setattr(module, "_clock", clock)
    ahead = clock.ahead = Ahead(iter(range(10**6)), 2)
    ways = []
    for expected in range(300):
        clock.tick()
        if expected == module._WARM_ITEMS + 3:  # (in the first timing: the thread's)
            clock.now += 100.0
        assert next(ahead) == expected
        ways.append(ahead.threaded)
    ahead.close()
    settled = ways[2 * (module._WARM_ITEMS + module.PROBE_ITEMS) + 2 :]
    assert all(settled)


def _items(count: int, cost: float = 0.0, fail: bool = False, closed: threading.Event | None = None) -> Any:
    try:
        for k in range(count):
            if cost:
                time.sleep(cost)
            yield k
        if fail:
            raise Boom("after the last")
    finally:
        if closed is not None:
            closed.set()


@pytest.fixture
def switching(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ahead changes the way it makes items every few items."""
    from cntkio._src.integrations import ahead as module

    monkeypatch.setattr(module, "PROBE_ITEMS", 2)
    monkeypatch.setattr(module, "REPROBE_ITEMS", 3)
    monkeypatch.setattr(module, "_WARM_ITEMS", 1)


@pytest.mark.parametrize("cost", [0.0, 0.001])
@pytest.mark.parametrize("consumer", [0.0, 0.001])
def test_changing_the_way_items_are_made_keeps_their_order(switching: None, cost: float, consumer: float) -> None:
    ahead = Ahead(_items(300, cost), 2, name="test-ahead")
    got, ways = [], set()
    for item in ahead:
        got.append(item)
        ways.add(ahead.threaded)
        if consumer:
            time.sleep(consumer)
    assert got == list(range(300)) and ways == {True, False}
    assert not any(t.name == "test-ahead" for t in threading.enumerate())


def test_an_error_comes_after_the_items_before_it_whoever_makes_them(switching: None) -> None:
    for count in range(20, 30):  # (the error found by the thread or by the consumer)
        closed = threading.Event()
        got = []
        with pytest.raises(Boom, match="after the last"):
            for item in Ahead(_items(count, 0.0005, fail=True, closed=closed), 2, name="test-ahead"):
                got.append(item)
        assert got == list(range(count)) and closed.is_set()
    assert not any(t.name == "test-ahead" for t in threading.enumerate())


def test_closing_ahead_whoever_makes_the_items_stops_the_thread(switching: None) -> None:
    for taken in range(5, 15):
        closed = threading.Event()
        ahead = Ahead(_items(10**6, closed=closed), 2, name="test-ahead")
        assert [next(ahead) for _ in range(taken)] == list(range(taken))
        ahead.close()
        assert closed.is_set()
        assert not any(t.name == "test-ahead" for t in threading.enumerate())


def test_batches_are_the_same_whichever_thread_makes_them(data: str, switching: None) -> None:
    """Batches made on the training thread (Ahead's inline way) do not take its torch state: CPU tensors, not inference
    tensors, under another default device and inference mode — as the background thread makes them."""
    made: set[tuple[str, str, bool]] = set()
    dataset = MinibatchDataset(functools.partial(make_source, data), 16, ahead=2)
    try:
        with torch.inference_mode():
            torch.set_default_device("meta")
            for batch in dataset:
                for name in ("x", "y"):
                    tensor = batch[name]
                    made.add((name, tensor.device.type, tensor.is_inference()))
    finally:
        torch.set_default_device("cpu")
    assert made == {("x", "cpu", False), ("y", "cpu", False)}


def test_dropping_an_iteration_stops_the_background_thread(data: str) -> None:
    dataset = MinibatchDataset(functools.partial(make_source, data), 64, ahead=2)
    iterator = iter(dataset)
    next(iterator)
    assert any(t.name == "cntkio-torch-ahead" for t in threading.enumerate())
    del iterator
    gc.collect()
    assert not any(t.name == "cntkio-torch-ahead" for t in threading.enumerate())
    assert not dataset._live  # the source the thread read was closed


def test_ahead_must_not_be_negative(data: str) -> None:
    with pytest.raises(ValueError, match="ahead"):
        MinibatchDataset(functools.partial(make_source, data), 64, ahead=-1)


def test_a_batch_state_is_built_when_asked_and_equals_the_sources_checkpoint(data: str) -> None:
    source = make_source(data)
    dataset = MinibatchDataset(functools.partial(make_source, data), 64, ahead=0)
    for k, batch in enumerate(dataset):
        assert isinstance(batch._state, BatchState)
        assert batch._state._dict is None  # nothing built yet
        source.next_minibatch(64)
        if k % 5 == 0:
            assert batch.state["source"] == source.get_checkpoint_state()
            assert batch.state["minibatch_index"] == k + 1
            copy = pickle.loads(pickle.dumps(batch))
            assert copy.state == batch.state
    source.close()


def test_sparse_streams_are_csr_over_int32_indices(data: str) -> None:
    batch = next(iter(MinibatchDataset(functools.partial(make_source, data), 64, ahead=0)))
    x = batch["x"]
    assert x.layout == torch.sparse_csr
    assert x.col_indices().dtype == torch.int32 and x.crow_indices().dtype == torch.int32
    assert x.shape[1] == 100
    dense = x.to_dense()
    assert dense.shape[0] == int(batch.lengths["x"].sum())


@pytest.mark.skipif(not shm.available(), reason="needs /dev/shm")
def test_loader_workers_send_bundles_handed_out_in_the_order_of_no_workers(data: str) -> None:
    make = functools.partial(make_source, data, 3)
    expected = stream_of(loader(make, 32))
    with_workers = loader(make, 32, num_workers=2)
    assert isinstance(with_workers, MinibatchLoader) and with_workers.dataset.bundle
    assert stream_of(with_workers) == expected
    assert stream_of(loader(make, 32, num_workers=1)) == expected


@pytest.mark.skipif(not shm.available(), reason="needs /dev/shm")
def test_a_state_inside_a_bundle_resumes_with_workers(data: str) -> None:
    make = functools.partial(make_source, data, 3)
    expected = stream_of(loader(make, 32))
    batches = list(loader(make, 32, num_workers=2))
    for k in (2, 9, 13):
        resumed = loader(make, 32, num_workers=2)
        resumed.dataset.load_state_dict(batches[k].state)
        assert stream_of(resumed) == expected[k + 1 :]


def test_bundles_are_sized_by_the_streams(data: str) -> None:
    source = make_source(data)
    small = MinibatchDataset(functools.partial(make_source, data), 64, bundle=True)
    assert small._bundle_size(source, 1) == 8
    large = MinibatchDataset(functools.partial(make_source, data), 10**6, bundle=True)
    assert large._bundle_size(source, 1) == 1
    plain = MinibatchDataset(functools.partial(make_source, data), 64)
    assert plain._bundle_size(source, 1) == 1
    source.close()


class Counting:
    """make_source that counts its calls."""

    def __init__(self, path: str, sweeps: int = 1):
        self.path, self.sweeps, self.calls = path, sweeps, 0

    def __call__(self) -> MinibatchSource:
        self.calls += 1
        return make_source(self.path, self.sweeps)


@pytest.mark.parametrize("ahead", [0, 2])
def test_passes_in_one_process_go_on_with_the_same_source(data: str, ahead: int) -> None:
    """The next pass reads the next epoch with the source of the last one (no second index, chunks kept), giving what
    new sources give; a pass left early, a resume and equal steps too; close() closes the kept source."""
    fresh = [stream_of(MinibatchDataset(functools.partial(make_source, data, 1), 64, ahead=0))]
    make = Counting(data)
    dataset = MinibatchDataset(make, 64, ahead=ahead)
    passes = [stream_of(dataset) for _ in range(3)]
    assert make.calls == 1
    reference = MinibatchDataset(lambda: make_source(data, 1), 64, ahead=0)
    for epoch in range(3):
        reference.set_epoch(epoch)
        other = MinibatchDataset(lambda: make_source(data, 1), 64, ahead=0)
        other.set_epoch(epoch)
        assert passes[epoch] == stream_of(other)
    assert passes[0] == fresh[0]
    iterator = iter(dataset)  # epoch 3, left after two batches
    head = [next(iterator), next(iterator)]
    del iterator, head
    gc.collect()
    later = MinibatchDataset(lambda: make_source(data, 1), 64, ahead=0)
    later.set_epoch(4)
    assert stream_of(dataset) == stream_of(later)
    kept = dataset._spare[0][1]
    dataset.close()
    assert kept.closed and not dataset._spare
    assert make.calls == 1


def test_a_source_that_counted_errors_is_not_kept(tmp_path: Path) -> None:
    path = write_ctf(tmp_path / "bad.ctf")
    text = path.read_text().splitlines()
    text[3] = text[3].replace("|x", "|x 5:zz")
    path.write_text("\n".join(text) + "\n")

    def make() -> MinibatchSource:
        streams = StreamDefs(
            x=StreamDef(field="x", shape=100, is_sparse=True), y=StreamDef(field="y", shape=7, is_sparse=True)
        )
        reader = CTFDeserializer(str(path), streams, max_errors=10)
        built.append(MinibatchSource(reader, max_sweeps=1, randomization_seed=3))
        return built[-1]

    built: list[MinibatchSource] = []
    dataset = MinibatchDataset(make, 64, ahead=0)
    assert stream_of(dataset)
    assert built[0].error_report().total > 0
    assert not dataset._spare and built[0].closed  # its errors were counted: the next pass builds a new source


def logged_source(path: str, log: str) -> MinibatchSource:
    with open(log, "a") as f:
        f.write(f"{os.getpid()}\n")
    return make_source(path, 3)


@pytest.mark.skipif(not shm.available(), reason="needs /dev/shm")
def test_forked_workers_start_from_the_source_built_before_they_fork(data: str, tmp_path: Path) -> None:
    """loader() builds the source once in the main process; its forked workers read their copies of it (one index,
    shared copy-on-write) and, when persistent, go on with them in the next pass."""
    log = tmp_path / "built.log"
    make = functools.partial(logged_source, data, str(log))
    expected = stream_of(loader(functools.partial(make_source, data, 3), 32))
    data_loader = loader(make, 32, num_workers=2, persistent_workers=True, multiprocessing_context="fork")
    first = stream_of(data_loader)
    second = stream_of(data_loader)
    assert first == expected
    assert second != first and sorted(k for b in second for k in b[0]) == sorted(k for b in first for k in b[0])
    assert log.read_text().split() == [str(os.getpid())]  # built once, here; the workers built none
    data_loader.dataset.close()
