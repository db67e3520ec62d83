"""What the machine gives this process (the cores it may run on)."""

from __future__ import annotations

import os

__all__ = ["available_cores"]


def available_cores() -> int:
    """The cores this process may run on: its CPU affinity where the system tells it (a container or ``taskset``
    limit), else the CPU count."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)
