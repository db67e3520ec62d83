"""Reads CNTK's parser diagnostics (``invalid_inputs_Control.txt``) as the input rows they blame.

CNTK's wording is not part of the contract, so the suite compares *where* errors are found. Mapping of
the WARNING kinds that describe a bad sample or row (all other kinds are listed, with reasons, in
``expected_different.IGNORED_CNTK_WARNINGS``; an unknown kind fails the test):

============================================================  ============================================
CNTK WARNING (prefix)                                          offset CNTK prints
============================================================  ============================================
``Unexpected character (`` (bad number)                        the offending byte: same as cntkio
``Unexpected character(`` (no ``:`` after a sparse index)      the offending byte: same as cntkio
``Expected a uint64 value`` (bad sparse index)                 the offending byte: same as cntkio
``Input name prefix ('|') is followed by``                     the offending byte: same as cntkio
``Sparse index value`` (index >= dim)                          the cursor after the index, same row
``Dense sample (size =`` (too many values)                     the cursor after the sample, same row
``Empty input row``                                            just past the row's ``\\n``: row of offset-1
============================================================  ============================================

So rows (1-based line numbers) are compared for every kind, and byte offsets too for the kinds whose
offset is the offending byte.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .expected_different import IGNORED_CNTK_WARNINGS

EMPTY_ROW = "Empty input row"
EXACT_OFFSET_KINDS = (
    "Unexpected character (",
    "Unexpected character(",
    "Expected a uint64 value",
    "Input name prefix ('|') is followed by",
)
REPORTED_KINDS = (*EXACT_OFFSET_KINDS, "Sparse index value", "Dense sample (size =", EMPTY_ROW)

_MESSAGE_START = re.compile(r"\n(?=(?:WARNING|INFO): )")
_MESSAGE = re.compile(r"(WARNING|INFO): (.*)", re.DOTALL)
_OFFSET = re.compile(r" at offset (\d+) in the input file ")


@dataclass(frozen=True)
class CntkError:
    """One WARNING of CNTK that blames a bad sample or row."""

    kind: str
    offset: int
    row: int


def line_of(data: bytes, offset: int) -> int:
    """1-based line number of the byte at ``offset``."""
    return data.count(b"\n", 0, offset) + 1


def _kind(text: str) -> str | None:
    """The REPORTED kind of a WARNING, or None for an ignored one; unknown kinds raise."""
    for kind in REPORTED_KINDS:
        if text.startswith(kind):
            return kind
    if any(text.startswith(prefix) for prefix in IGNORED_CNTK_WARNINGS):
        return None
    raise ValueError(f"unmapped CNTK warning kind: {text!r}")


def cntk_errors(control: str, data: bytes) -> list[CntkError]:
    """The WARNINGs of a diagnostics control that blame a sample or row of ``data``."""
    errors = []
    for message in _MESSAGE_START.split(control.rstrip("\n")):
        match = _MESSAGE.fullmatch(message)
        if match is None:
            raise ValueError(f"not a CNTK diagnostic: {message!r}")
        level, text = match.groups()
        kind = _kind(text) if level == "WARNING" else None
        if kind is None:
            continue
        found = _OFFSET.search(text)
        if found is None:
            raise ValueError(f"no offset in CNTK warning: {text!r}")
        offset = int(found.group(1))
        row = line_of(data, offset - 1) if kind == EMPTY_ROW else line_of(data, offset)
        errors.append(CntkError(kind, offset, row))
    return errors


def rows_with_only_empty_row_warnings(errors: list[CntkError]) -> set[int]:
    """Rows that CNTK flags only as empty (blank, comment-only or unknown inputs only: no failed sample)."""
    by_row: dict[int, set[str]] = {}
    for error in errors:
        by_row.setdefault(error.row, set()).add(error.kind)
    return {row for row, kinds in by_row.items() if kinds == {EMPTY_ROW}}
