"""What the machine gives this process (the cores it may run on), and how many of them the chunk being parsed on
this thread may use."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["available_cores", "parse_parallelism", "parsing_with"]

_local = threading.local()


def available_cores() -> int:
    """The cores this process may run on: its CPU affinity where the system tells it (a container or ``taskset``
    limit), else the CPU count."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


@contextmanager
def parsing_with(threads: int) -> Iterator[None]:
    """Lets the chunk parsed on this thread inside the block use ``threads`` threads (the reader sets it from the
    parse threads that are idle; a deserializer reads it with :func:`parse_parallelism`)."""
    before = getattr(_local, "threads", 1)
    _local.threads = max(1, int(threads))
    try:
        yield
    finally:
        _local.threads = before


def parse_parallelism() -> int:
    """Threads the chunk parsed now on this thread may use (1 unless the reader said otherwise)."""
    return int(getattr(_local, "threads", 1))
