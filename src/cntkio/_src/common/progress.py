"""Progress bars for long work (the command line, `write_cbf`): a tqdm bar on stderr for long work, nothing otherwise.

``enabled=None`` (the default of every command) shows a bar when stderr is a terminal and tqdm is installed, once
the work has run for :data:`AUTO_DELAY_SECONDS` (short work shows none); ``True`` forces one at once (tqdm is then
required: ``pip install 'cntkio[progress]'``); ``False`` never does. tqdm is imported only when a bar is drawn.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from importlib.util import find_spec
from typing import Any

AUTO_DELAY_SECONDS = 1.0  # a bar not asked for appears only once the work has taken this long

INSTALL_HINT = "a progress bar needs tqdm: pip install 'cntkio[progress]'"


def wanted(enabled: bool | None) -> bool:
    """Whether to show bars: ``enabled`` when given, else when stderr is a terminal and tqdm is installed.

    Raises:
        ImportError: ``enabled`` is True and tqdm is not installed.
    """
    if enabled is None:
        return sys.stderr.isatty() and find_spec("tqdm") is not None
    if enabled and find_spec("tqdm") is None:
        raise ImportError(INSTALL_HINT)
    return enabled


class Phases:
    """A ``(phase, done, total)`` callback drawing one bar per phase (a new phase closes the previous bar).

    A phase's bar counts ``unit`` (bytes by default; ``units`` names another for some phases, such as
    ``{"reading": "chunk"}``). Every call is drawn (once the bar shows): work reported in a few large steps (a chunk
    of megabytes at a time) moves the bar at each step. Call with ``done=0`` when a phase starts, so that its bar
    (and the delay before it shows) starts with the work, not after its first step.

    Example::

        with Phases(None, label="train.ctf") as progress:
            inspect_file("train.ctf", progress=progress)
    """

    def __init__(
        self, enabled: bool | None, *, unit: str = "B", label: str = "", units: Mapping[str, str] | None = None
    ):
        self.enabled = wanted(enabled)
        self.delay = 0.0 if enabled else AUTO_DELAY_SECONDS
        self.unit = unit
        self.units = dict(units or {})
        self.label = label
        self._bar: Any = None
        self._phase = ""

    def __call__(self, phase: str, done: int, total: int) -> None:
        if not self.enabled:
            return
        if phase != self._phase or self._bar is None:
            self.close()
            from tqdm import tqdm

            desc = f"{self.label}: {phase}" if self.label else phase
            unit = self.units.get(phase, self.unit)
            self._bar = tqdm(
                total=total, desc=desc, unit=unit, unit_scale=unit == "B", leave=False, file=sys.stderr,
                delay=self.delay, mininterval=0, miniters=1,  # each step drawn: steps may be few and large
            )  # fmt: skip
            self._phase = phase
        self._bar.update(done - self._bar.n)

    def close(self) -> None:
        """Closes the current bar (its line is cleared)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> Phases:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


@contextmanager
def bar(enabled: bool | None, total: int, desc: str, unit: str = "chunk") -> Iterator[Any]:
    """A function advancing one bar by its argument (a no-op without a bar; ``enabled`` as in :func:`wanted`)."""
    if not wanted(enabled):
        yield lambda _: None
        return
    from tqdm import tqdm

    delay = 0.0 if enabled else AUTO_DELAY_SECONDS
    with tqdm(total=total, unit=unit, desc=desc, file=sys.stderr, delay=delay) as shown:
        yield shown.update
