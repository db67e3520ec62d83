"""JaxIterator(ahead=N) (issue 25): batches padded ahead on a background thread give the arrays, keys, states and
epochs of reading each when asked — also for a loop left early, under equal steps, and when the reader fails."""

from __future__ import annotations

import functools
import gc
import json
import threading
from typing import Any

import numpy as np
import pytest

pytest.importorskip("jax")

import jax_dist_worker as worker
from cntkio.jax import JaxIterator


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("jax_ahead") / "seq.ctf"
    worker.write_ctf(path)
    return str(path)


def single(path: str, ahead: int, **options: Any) -> JaxIterator:
    options = {"layout": worker.LAYOUT, "partition": (1, 0), **options}
    return JaxIterator(functools.partial(worker.make_source, path), 64, ahead=ahead, **options)


def taken(batches: JaxIterator, limit: int = 10**6) -> list[tuple[Any, ...]]:
    """Each batch's keys (by last_keys, as a loop sees it), arrays and the state after it, up to ``limit`` batches."""
    out = []
    for count, batch in enumerate(batches, start=1):
        arrays = tuple(np.asarray(batch[name]).tobytes() for name in sorted(batch) if name not in ("lengths", "mask"))
        out.append((tuple(batches.last_keys), arrays, json.dumps(batches.get_state(), sort_keys=True)))
        if count == limit:
            break
    return out


@pytest.mark.parametrize("options", [{}, {"equal_steps": "pad", "partition": (2, 1)},
                                     {"equal_steps": "carry", "partition": (2, 0), "max_carry": 2}])  # fmt: skip
def test_ahead_gives_the_batches_and_states_of_reading_on_demand(data: str, options: dict[str, Any]) -> None:
    on_demand = single(data, 0, **options)
    expected = [taken(on_demand) for _ in range(3)]  # three epochs
    assert all(expected)
    for ahead in (1, 3):
        batches = single(data, ahead, **options)
        assert [taken(batches) for _ in range(3)] == expected
        assert batches.steps == on_demand.steps and batches.epoch == on_demand.epoch


@pytest.mark.parametrize("stop", [1, 5, 9])
def test_a_loop_left_early_goes_on_after_the_last_batch_delivered(data: str, stop: int) -> None:
    reference = single(data, 0)
    whole = [taken(reference) for _ in range(2)]
    batches = single(data, 3)
    head = taken(batches, stop)
    assert head == whole[0][:stop]
    state = batches.get_state()
    assert json.dumps(state, sort_keys=True) == whole[0][stop - 1][2]
    assert head + taken(batches) == whole[0]
    assert taken(batches) == whole[1]
    resumed = single(data, 3)
    resumed.set_state(state)
    assert taken(resumed) == whole[0][stop:]


def test_no_thread_is_left_behind(data: str) -> None:
    batches = single(data, 2)
    taken(batches, 3)
    gc.collect()
    assert not any(t.name == "cntkio-jax-ahead" for t in threading.enumerate())
    taken(batches)
    assert not any(t.name == "cntkio-jax-ahead" for t in threading.enumerate())


class Failing(RuntimeError):
    pass


def test_a_read_that_fails_is_raised_after_the_batches_before_it(data: str) -> None:
    batches = single(data, 2)
    source = batches.source
    reads = {"n": 0}
    original = source.next_minibatch

    def failing(*args: Any, **kwargs: Any) -> Any:
        reads["n"] += 1
        if reads["n"] == 4:
            raise Failing("the fourth read")
        return original(*args, **kwargs)

    source.next_minibatch = failing  # type: ignore[method-assign]
    got = []
    with pytest.raises(Failing):
        for _ in batches:
            got.append(list(batches.last_keys))
    assert len(got) == 3
    source.next_minibatch = original  # type: ignore[method-assign]
    reference = single(data, 0)
    assert [list(k) for k, _, _ in taken(reference)][3:] == [list(k) for k, _, _ in taken(batches)]
