"""Warnings for CNTK spellings kept for old code."""

from __future__ import annotations

import warnings


def deprecated(old: str, new: str, *, stacklevel: int = 3) -> None:
    """Warns that CNTK's ``old`` spelling is deprecated in favour of ``new``."""
    warnings.warn(
        f"{old} is deprecated (a CNTK spelling kept for old code); use {new}", DeprecationWarning, stacklevel=stacklevel
    )
