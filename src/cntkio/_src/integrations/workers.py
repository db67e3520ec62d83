"""How a rank's minibatches are dealt to its ``DataLoader`` worker processes (:mod:`cntkio.torch`; ``cntkio explain``
plans with it).

A rank's minibatches are numbered 0, 1, 2, ... from where an iteration starts (``base``) and dealt in bundles of
``bundle`` consecutive ones (1 for a plain ``DataLoader``; :func:`cntkio.torch.loader` sends several per message):
worker ``w`` of ``W`` reads the bundles with ``((number - base) // bundle) % W == w`` and skips the others without
reading them, so the loader, taking an item from each worker in turn, hands the rank's minibatches out in order
whatever ``W``.
"""

from __future__ import annotations


def worker_of(number: int, workers: int, base: int = 0, bundle: int = 1) -> int:
    """The loader worker (of ``workers``) that reads a rank's minibatch ``number``."""
    return ((number - base) // bundle) % workers
