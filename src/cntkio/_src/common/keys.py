"""Sequence keys as columns: integers in one array, or text packed as UTF-8 bytes plus offsets.

No Python object per sequence is kept: keys become Python values only when asked for (provenance,
error messages), a few at a time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from cntkio import _native

MAX_KEY_CHARS_SHOWN = 80


class KeyColumn:
    """The keys of a run of sequences. ``take(indices)`` returns them as Python values."""

    def __len__(self) -> int:
        raise NotImplementedError

    def take(self, indices: np.ndarray) -> list[Any]:
        raise NotImplementedError

    def slice(self, start: int, stop: int) -> KeyColumn:
        raise NotImplementedError

    def take_array(self, indices: np.ndarray) -> np.ndarray | None:
        """The keys at ``indices`` as an integer array, or None if they are not integers."""
        return None

    def __getitem__(self, index: int) -> Any:
        return self.take(np.array([index], dtype=np.int64))[0]

    @property
    def is_text(self) -> bool:
        """Whether the keys are texts (then every key column they are joined with compares as text)."""
        return False

    @property
    def nbytes(self) -> int:
        """Bytes the column holds (its arrays; Python objects of :class:`ObjectKeys` are not counted)."""
        return 0

    def native(self) -> tuple[int, np.ndarray, np.ndarray | None]:
        """The column as the native key functions take it: (0, int64 as uint64, None), (1, uint64, None)
        or (2, UTF-8 blob, offsets)."""
        raise NotImplementedError

    @staticmethod
    def of(keys: Sequence[Any] | np.ndarray) -> KeyColumn:
        """The column of a list or array of keys: integers, strings, or (a fallback) other objects."""
        if isinstance(keys, KeyColumn):
            return keys
        if isinstance(keys, np.ndarray) and keys.dtype.kind in "iu":
            return NumericKeys(keys)
        keys = list(keys)
        if all(isinstance(k, (int, np.integer)) and not isinstance(k, bool) for k in keys):
            low, high = min(map(int, keys), default=0), max(map(int, keys), default=0)
            if high < 2**63 and low >= -(2**63):
                return NumericKeys(np.array(keys, dtype=np.int64))
            if low >= 0 and high < 2**64:
                return NumericKeys(np.array(keys, dtype=np.uint64))
            return ObjectKeys(keys)
        if all(isinstance(k, str) for k in keys):
            return TextKeys.from_strings(keys)
        return ObjectKeys(keys)

    @staticmethod
    def concatenate(columns: list[KeyColumn]) -> KeyColumn:
        if len(columns) == 1:
            return columns[0]
        if all(isinstance(c, NumericKeys) for c in columns):
            numeric = [c for c in columns if isinstance(c, NumericKeys)]
            kind = type(numeric[0]) if all(type(c) is type(numeric[0]) for c in numeric) else NumericKeys
            if kind is RangeKeys:
                kind = NumericKeys
            values = _common_integers([c.values for c in numeric])
            if values is not None:
                return kind(values)
        if all(isinstance(c, TextKeys) for c in columns):
            texts = [c for c in columns if isinstance(c, TextKeys)]
            blob = np.concatenate([c.blob[c.offsets[0] : c.offsets[-1]] for c in texts])
            lengths = np.concatenate([np.diff(c.offsets) for c in texts])
            offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
            np.cumsum(lengths, out=offsets[1:])
            return TextKeys(blob, offsets)
        return ObjectKeys([k for c in columns for k in c.take(np.arange(len(c), dtype=np.int64))])


def _common_integers(arrays: list[np.ndarray]) -> np.ndarray | None:
    """The arrays as one integer array: int64, or uint64 when a value needs it and none is negative; None
    when no integer type holds them all (a negative key beside one >= 2^63)."""
    if any(a.dtype == np.uint64 for a in arrays):
        if any(a.dtype.kind == "i" and len(a) and int(a.min()) < 0 for a in arrays):
            return None
        return np.concatenate([a.astype(np.uint64, copy=False) for a in arrays])
    return np.concatenate([a.astype(np.int64, copy=False) for a in arrays])


class NumericKeys(KeyColumn):
    """Integer keys (CTF numeric ids, line numbers, plug-in integer keys)."""

    def __init__(self, values: np.ndarray):
        if values.dtype.kind not in "iu":
            raise TypeError(f"numeric keys must be integers, got {values.dtype}")
        self.values = values

    def __len__(self) -> int:
        return len(self.values)

    @property
    def nbytes(self) -> int:
        return int(self.values.nbytes)

    def take(self, indices: np.ndarray) -> list[Any]:
        return self.values[indices].tolist()  # type: ignore[no-any-return]

    def take_array(self, indices: np.ndarray) -> np.ndarray | None:
        return self.values[indices]  # type: ignore[no-any-return]

    def slice(self, start: int, stop: int) -> NumericKeys:
        return type(self)(self.values[start:stop])

    def native(self) -> tuple[int, np.ndarray, np.ndarray | None]:
        values = np.ascontiguousarray(self.values)
        if values.dtype == np.uint64:
            return 1, values, None
        return 0, values.astype(np.int64, copy=False).view(np.uint64), None


class RangeKeys(NumericKeys):
    """Keys that are consecutive numbers ``first, first + 1, ...`` (CBF's running sequence count): nothing is
    stored per key; ``values`` is materialised only when asked for (a join)."""

    def __init__(self, first: int, count: int):
        self.first, self.count = int(first), int(count)

    @property
    def values(self) -> np.ndarray:  # type: ignore[override]
        return np.arange(self.first, self.first + self.count, dtype=np.int64)

    def __len__(self) -> int:
        return self.count

    @property
    def nbytes(self) -> int:
        return 0

    def take(self, indices: np.ndarray) -> list[Any]:
        return self.take_array(indices).tolist()  # type: ignore[no-any-return]

    def take_array(self, indices: np.ndarray) -> np.ndarray:
        rows = np.asarray(indices, dtype=np.int64)
        rows = np.where(rows < 0, rows + self.count, rows)  # negative indices count from the end, as in a list
        if len(rows) and (int(rows.min()) < 0 or int(rows.max()) >= self.count):
            raise IndexError(f"key index out of range (0..{self.count - 1})")
        return rows + self.first

    def slice(self, start: int, stop: int) -> RangeKeys:
        start, stop, _ = slice(start, stop).indices(self.count)
        return RangeKeys(self.first + start, max(0, stop - start))


class HashedKeys(NumericKeys):
    """Keys kept as CNTK's 64-bit hash of their text (``hashSequenceKeys``): 8 bytes a key whatever the text.
    A column joined with hashed keys is hashed the same way; collisions are not detected (as in CNTK)."""


class TextKeys(KeyColumn):
    """Text keys: ``blob[offsets[i]:offsets[i + 1]]`` is the UTF-8 text of key i."""

    def __init__(self, blob: np.ndarray, offsets: np.ndarray):
        self.blob = blob
        self.offsets = offsets

    @staticmethod
    def from_strings(keys: Sequence[str]) -> TextKeys:
        encoded = [k.encode("utf-8", "surrogatepass") for k in keys]
        offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(e) for e in encoded], out=offsets[1:])
        return TextKeys(np.frombuffer(b"".join(encoded), dtype=np.uint8), offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def nbytes(self) -> int:
        return int(self.blob.nbytes + self.offsets.nbytes)

    def take(self, indices: np.ndarray) -> list[Any]:
        blob = self.blob
        starts = self.offsets[indices].tolist()
        ends = self.offsets[np.asarray(indices) + 1].tolist()
        return [bytes(blob[a:b]).decode("utf-8", "backslashreplace") for a, b in zip(starts, ends)]

    def slice(self, start: int, stop: int) -> TextKeys:
        return TextKeys(self.blob, self.offsets[start : stop + 1])

    def subset(self, rows: np.ndarray) -> TextKeys:
        """The keys of ``rows`` (in that order, repeats allowed) as a new column, without a string per key."""
        rows = np.asarray(rows, dtype=np.int64)
        lengths = np.diff(self.offsets)[rows]
        offsets = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        positions = np.repeat(self.offsets[rows] - offsets[:-1], lengths) + np.arange(int(offsets[-1]), dtype=np.int64)
        return TextKeys(self.blob[positions], offsets)

    @property
    def is_text(self) -> bool:
        return True

    def native(self) -> tuple[int, np.ndarray, np.ndarray | None]:
        return 2, np.ascontiguousarray(self.blob, dtype=np.uint8), np.ascontiguousarray(self.offsets, dtype=np.int64)


class ObjectKeys(KeyColumn):
    """Keys of other types from plug-ins (kept as given)."""

    def __init__(self, keys: list[Any]):
        self.keys = keys

    def __len__(self) -> int:
        return len(self.keys)

    def take(self, indices: np.ndarray) -> list[Any]:
        return [self.keys[i] for i in np.asarray(indices).tolist()]

    def slice(self, start: int, stop: int) -> ObjectKeys:
        return ObjectKeys(self.keys[start:stop])

    @property
    def is_text(self) -> bool:
        return True

    def native(self) -> tuple[int, np.ndarray, np.ndarray | None]:
        """Other keys join by their ``str()``."""
        return TextKeys.from_strings([str(k) for k in self.keys]).native()


@dataclass(frozen=True)
class KeyJoin:
    """Where each primary key sits in a secondary column: ``match[i]`` = row of the secondary holding
    primary key i, or -1 (int32, or int64 for secondaries of 2^31 keys or more)."""

    match: np.ndarray
    duplicates: int  # keys the secondary holds more than once (counting every extra copy)
    duplicate_rows: np.ndarray  # the first few extra copies (secondary rows)


def comparable(columns: Sequence[KeyColumn]) -> tuple[list[KeyColumn], bool]:
    """The columns made comparable, as CNTK's reader compared keys: hashed keys when any column is
    hashed (the others hashed too), else texts when any column holds texts (numeric keys by their
    decimal text), else numbers. Returns the columns and whether they compare as text."""
    if any(isinstance(c, HashedKeys) for c in columns):
        hashed = [c if isinstance(c, HashedKeys) else HashedKeys(_native.cntk_key_hash(c.native())) for c in columns]
        return list(hashed), False
    return list(columns), any(c.is_text for c in columns)


def join_keys(primary: KeyColumn, secondary: KeyColumn, by_text: bool, keep_last: bool = False) -> KeyJoin:
    """Joins two comparable columns (:func:`comparable`) with a native hash table: no Python object per
    key. Of a key the secondary holds several times the first row is used (the last with ``keep_last``)."""
    match, duplicates, rows = _native.join_keys(primary.native(), secondary.native(), by_text, keep_last)
    return KeyJoin(match, int(duplicates), rows)


def duplicate_keys(column: KeyColumn, by_text: bool) -> tuple[int, np.ndarray]:
    """How many extra copies of keys a column holds, and the rows of the first few."""
    count, rows = _native.key_duplicates(column.native(), by_text)
    return int(count), rows


def shorten(key: Any, limit: int = MAX_KEY_CHARS_SHOWN) -> str:
    """A key as text for messages, cut to ``limit`` characters."""
    text = str(key)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"
