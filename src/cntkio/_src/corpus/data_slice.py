"""Deterministic slices of a data set's sequences: ``"[10%:20%]"``, ``"[:5000]"``, ``slice(a, b)``.

Boundaries depend only on the number of sequences and the bound itself, so adjacent slices compose:
``[0:100]`` followed by ``[100:200]`` is ``[0:200]``, and ``[0%:10%]`` followed by ``[10%:20%]`` is ``[0%:20%]``.
"""

from __future__ import annotations

import re
from fractions import Fraction

from cntkio._src.common.errors import ConfigError

_SLICE = re.compile(r"^\s*\[?\s*([^:\]]*?)\s*:\s*([^:\]]*?)\s*\]?\s*$")


def _bound(text: str, total: int, default: int) -> int:
    if not text:
        return default
    try:
        value = int(Fraction(text[:-1]) * total / 100) if text.endswith("%") else int(text)
    except (ValueError, ZeroDivisionError) as error:
        raise ConfigError(f"invalid slice bound {text!r}") from error
    if value < 0:
        value += total
    return min(max(value, 0), total)


def parse_slice(spec: str | slice | None, total: int) -> tuple[int, int] | None:
    """The half-open range of sequence indices (in file order) selected by ``spec``, or None for all."""
    if spec is None:
        return None
    if isinstance(spec, slice):
        if spec.step not in (None, 1):
            raise ConfigError("data_slice does not support a step")
        start, stop, _ = spec.indices(total)
        bounds = (start, max(start, stop))
    else:
        match = _SLICE.match(spec)
        if not match:
            raise ConfigError(f"invalid data_slice {spec!r}; expected e.g. '[10%:20%]' or '[:5000]'")
        start = _bound(match.group(1), total, 0)
        bounds = (start, max(start, _bound(match.group(2), total, total)))
    if bounds[0] == bounds[1]:
        raise ConfigError(f"data_slice {spec!r} selects no sequence (the data has {total})")
    return bounds
