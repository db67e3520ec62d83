"""Infers the streams of a CTF file (alias, dense or sparse, dimension) from one streaming scan.

The file is read in blocks that end at a newline, and each block is analysed with vectorised NumPy
(no Python loop over lines or values), so memory stays bounded by the block size whatever the file size.
A field is ``|name values...`` up to the next ``|`` or newline; ``|#...`` fields are comments. A stream is
sparse when most of its non-empty samples hold ``index:value`` entries. Its dimension is the largest
number of values in one sample (dense) or the largest index seen plus one (sparse), so a sparse stream
whose highest index never occurs in the file is inferred too small: pass explicit definitions then.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

BLOCK_SIZE = 8 * 1024 * 1024
MAX_ALIAS_BYTES = 128  # longer names are not taken for aliases
MAX_SPARSE_DIM = 2**31 - 1
_INDEX_DIGITS = 10  # enough for any index below MAX_SPARSE_DIM
_COLON_BATCH = 1 << 20  # colons whose index is decoded at once (bounds a (batch, digits) array)
_PIPE, _NEWLINE, _COLON, _ZERO, _NINE = ord("|"), ord("\n"), ord(":"), ord("0"), ord("9")

Progress = Callable[[int, int], None]  # (bytes done, total bytes)


@dataclass(frozen=True)
class InferredStream:
    """One stream found in a file. ``samples`` counts the ``|alias`` fields seen."""

    alias: str
    is_sparse: bool
    dim: int
    samples: int


@dataclass
class _Tally:
    first_offset: int
    samples: int = 0
    sparse_samples: int = 0  # samples with at least one ':' entry
    dense_samples: int = 0  # non-empty samples without ':'
    max_values: int = 0
    max_index: int = -1

    def stream(self, alias: str) -> InferredStream:
        is_sparse = self.sparse_samples > 0 and self.sparse_samples >= self.dense_samples
        dim = self.max_index + 1 if is_sparse else self.max_values
        return InferredStream(alias, is_sparse, max(dim, 1), self.samples)


def infer_streams(
    path: str | os.PathLike[str], *, block_size: int = BLOCK_SIZE, progress: Progress | None = None
) -> list[InferredStream]:
    """Scans the whole file and returns its streams in order of first appearance."""
    tallies: dict[bytes, _Tally] = {}
    total = os.path.getsize(path)
    done = 0
    with open(path, "rb") as f:
        carry = b""
        while True:
            block = f.read(block_size)
            data = carry + block
            cut = len(data) if not block else data.rfind(b"\n") + 1
            if cut:
                _scan_block(np.frombuffer(data, np.uint8, cut), done - len(carry), tallies)
            carry = data[cut:]
            done += len(block)
            if progress is not None:
                progress(done, total)
            if not block:
                break
    ordered = sorted(tallies.items(), key=lambda item: item[1].first_offset)
    return [tally.stream(alias.decode("utf-8", "backslashreplace")) for alias, tally in ordered]


def _scan_block(buf: np.ndarray, base: int, tallies: dict[bytes, _Tally]) -> None:
    """Adds the fields of a block of whole lines to the per-alias tallies."""
    is_pipe = buf == _PIPE
    bars = np.flatnonzero(is_pipe)
    if not len(bars):
        return
    n = len(buf)
    blank = (buf <= 0x20) | is_pipe  # ends a name and separates values
    stops = np.append(np.flatnonzero(is_pipe | (buf == _NEWLINE)), n)
    field_ends = stops[np.searchsorted(stops, bars, side="right")]
    blanks = np.append(np.flatnonzero(blank), n)
    name_ends = blanks[np.searchsorted(blanks, bars + 1)]
    name_lengths = name_ends - bars - 1

    # values per field: token starts (non-blank after blank) strictly after the name
    token_starts = np.flatnonzero(~blank[1:] & blank[:-1]) + 1
    owner = np.searchsorted(bars, token_starts, side="right") - 1
    inside = (owner >= 0) & (token_starts > name_ends[np.maximum(owner, 0)])
    inside &= token_starts < field_ends[np.maximum(owner, 0)]
    values = np.bincount(owner[inside], minlength=len(bars))

    # sparse entries: ':' inside a field's values, preceded by a digit run that starts a token
    colons = np.flatnonzero(buf == _COLON)
    owner = np.searchsorted(bars, colons, side="right") - 1
    keep = (owner >= 0) & (colons > name_ends[np.maximum(owner, 0)])
    keep &= colons < field_ends[np.maximum(owner, 0)]
    colons, colon_owner = colons[keep], owner[keep]
    has_colon = np.bincount(colon_owner, minlength=len(bars)) > 0
    index = _sparse_indices(buf, blank, colons)

    fields = (name_lengths > 0) & (name_lengths <= MAX_ALIAS_BYTES) & (buf[np.minimum(bars + 1, n - 1)] != ord("#"))
    if not fields.any():
        return
    names, first, groups = _group_names(buf, bars[fields], name_lengths[fields])
    field_group = np.full(len(bars), -1, dtype=np.int64)
    field_group[fields] = groups
    k = len(names)
    samples = np.bincount(groups, minlength=k)
    sparse = np.bincount(groups, weights=has_colon[fields], minlength=k)
    dense = np.bincount(groups, weights=(~has_colon[fields]) & (values[fields] > 0), minlength=k)
    max_values = np.zeros(k, dtype=np.int64)
    np.maximum.at(max_values, groups, values[fields])
    max_index = np.full(k, -1, dtype=np.int64)
    colon_group = field_group[colon_owner]
    valid = (colon_group >= 0) & (index >= 0)
    np.maximum.at(max_index, colon_group[valid], index[valid])
    for j, name in enumerate(names):
        tally = tallies.setdefault(name, _Tally(base + int(bars[fields][first[j]])))
        tally.samples += int(samples[j])
        tally.sparse_samples += int(sparse[j])
        tally.dense_samples += int(dense[j])
        tally.max_values = max(tally.max_values, int(max_values[j]))
        tally.max_index = max(tally.max_index, int(max_index[j]))


def _group_names(buf: np.ndarray, bars: np.ndarray, lengths: np.ndarray) -> tuple[list[bytes], np.ndarray, np.ndarray]:
    """Distinct names after the bars: (names, first field of each, group of each field)."""
    width = int(lengths.max())
    padded = 8 if width <= 8 else width
    positions = bars[:, None] + 1 + np.arange(padded)
    gathered = buf[np.minimum(positions, len(buf) - 1)]
    gathered[np.arange(padded) >= lengths[:, None]] = 0
    keys = np.ascontiguousarray(gathered).view("<u8" if padded == 8 else f"S{padded}").ravel()
    _, first, groups = np.unique(keys, return_index=True, return_inverse=True)
    rows = gathered[first]
    names = [bytes(row[: int(n)]) for row, n in zip(rows, lengths[first])]
    return names, first, groups.ravel()


def _sparse_indices(buf: np.ndarray, blank: np.ndarray, colons: np.ndarray) -> np.ndarray:
    """Integer before each colon when it is a whole token of digits, else -1 (the parser reports it)."""
    is_digit = (buf >= _ZERO) & (buf <= _NINE)
    non_digits = np.flatnonzero(~is_digit)
    result = np.full(len(colons), -1, dtype=np.int64)
    powers = 10 ** np.arange(_INDEX_DIGITS - 1, -1, -1, dtype=np.int64)
    for lo in range(0, len(colons), _COLON_BATCH):
        at = colons[lo : lo + _COLON_BATCH]
        before = non_digits[np.searchsorted(non_digits, at) - 1]  # the colon itself is a non-digit
        digits = at - before - 1
        ok = (digits >= 1) & (digits <= _INDEX_DIGITS) & blank[before]
        window = at[:, None] - _INDEX_DIGITS + np.arange(_INDEX_DIGITS)
        values = buf[np.maximum(window, 0)].astype(np.int64) - _ZERO
        values[window <= before[:, None]] = 0
        number = values @ powers
        result[lo : lo + _COLON_BATCH] = np.where(ok & (number < MAX_SPARSE_DIM), number, -1)
    return result
