"""How a rank's minibatches are dealt to its ``DataLoader`` worker processes (:mod:`cntkio.torch`; ``cntkio explain``
plans with it).

A rank's minibatches are numbered 0, 1, 2, ... from where an iteration starts (``base``) and dealt in bundles of
consecutive ones, one bundle to each worker in turn, so the loader, taking an item from each worker in turn, hands
the rank's minibatches out in order whatever the number of workers ``W``. Bundles hold ``bundle`` minibatches (1 for
a plain ``DataLoader``; :func:`cntkio.torch.loader` sends several per message) after a ramp: the first ``W`` bundles
hold 1, the next ``W`` 2, then 4, ... up to ``bundle`` — so the first batch leaves its worker as soon as it is read,
not once a whole bundle is. A worker skips the minibatches of the others without reading them.
"""

from __future__ import annotations


def deal(number: int, workers: int, base: int = 0, bundle: int = 1) -> tuple[int, int]:
    """(the loader worker, of ``workers``, that reads a rank's minibatch ``number``; the size of its bundle)."""
    offset, size = number - base, 1
    while size < bundle:
        span = size * workers  # (a round of bundles of this size, one per worker)
        if offset < span:
            return (offset // size) % workers, size
        offset -= span
        size = min(2 * size, bundle)
    return (offset // bundle) % workers, bundle


def worker_of(number: int, workers: int, base: int = 0, bundle: int = 1) -> int:
    """The loader worker (of ``workers``) that reads a rank's minibatch ``number``."""
    return deal(number, workers, base, bundle)[0]
