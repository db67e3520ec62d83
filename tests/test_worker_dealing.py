"""How a rank's minibatches are dealt to loader workers (``integrations/workers.py``): bundles of consecutive
minibatches, one to each worker in turn, after a ramp of smaller bundles — whatever the numbers, taking a bundle from
each worker in turn gives the minibatches back in order (what a ``DataLoader`` does with its workers' items)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from cntkio._src.integrations.workers import deal, worker_of


@given(st.integers(1, 5), st.integers(1, 12), st.integers(0, 40), st.integers(0, 200))
def test_round_robin_over_the_workers_bundles_gives_the_order(workers: int, bundle: int, base: int, count: int) -> None:
    bundles: list[list[list[int]]] = [[] for _ in range(workers)]  # per worker, its bundles
    for number in range(base, base + count):
        worker, size = deal(number, workers, base, bundle)
        assert worker == worker_of(number, workers, base, bundle) and 1 <= size <= bundle
        own = bundles[worker]
        if own and own[-1][-1] == number - 1 and len(own[-1]) < size:
            own[-1].append(number)  # (a bundle goes on while consecutive and short of its size)
        else:
            own.append([number])
    order: list[int] = []
    turn = 0
    while any(bundles):
        if bundles[turn]:
            order.extend(bundles[turn].pop(0))
        turn = (turn + 1) % workers
    assert order == list(range(base, base + count))


def test_the_ramp() -> None:
    assert [deal(k, 2, 0, 8) for k in range(16)] == [
        (0, 1), (1, 1), (0, 2), (0, 2), (1, 2), (1, 2), (0, 4), (0, 4), (0, 4), (0, 4), (1, 4), (1, 4), (1, 4),
        (1, 4), (0, 8), (0, 8),
    ]  # fmt: skip
    assert [deal(k, 2, 5, 1) for k in range(5, 9)] == [(0, 1), (1, 1), (0, 1), (1, 1)]  # (no bundles: no ramp)
    assert [worker_of(k, 3, 0, 8) for k in (20, 21, 28, 29)] == [2, 0, 0, 1]  # (3 x 1, 3 x 2, 3 x 4, then 8s from 21)
