"""Sequence keys as columns: integers in one array, or text packed as UTF-8 bytes plus offsets.

No Python object per sequence is kept: keys become Python values only when asked for (provenance,
error messages), a few at a time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

MAX_KEY_CHARS_SHOWN = 80


class KeyColumn:
    """The keys of a run of sequences. ``take(indices)`` returns them as Python values."""

    def __len__(self) -> int:
        raise NotImplementedError

    def take(self, indices: np.ndarray) -> list[Any]:
        raise NotImplementedError

    def slice(self, start: int, stop: int) -> KeyColumn:
        raise NotImplementedError

    def __getitem__(self, index: int) -> Any:
        return self.take(np.array([index], dtype=np.int64))[0]

    @staticmethod
    def of(keys: Sequence[Any] | np.ndarray) -> KeyColumn:
        """The column of a list or array of keys: integers, strings, or (a fallback) other objects."""
        if isinstance(keys, KeyColumn):
            return keys
        if isinstance(keys, np.ndarray) and keys.dtype.kind in "iu":
            return NumericKeys(keys)
        keys = list(keys)
        if all(isinstance(k, (int, np.integer)) and not isinstance(k, bool) for k in keys):
            return NumericKeys(np.array(keys, dtype=np.int64 if all(int(k) < 2**63 for k in keys) else np.uint64))
        if all(isinstance(k, str) for k in keys):
            return TextKeys.from_strings(keys)
        return ObjectKeys(keys)

    @staticmethod
    def concatenate(columns: list[KeyColumn]) -> KeyColumn:
        if len(columns) == 1:
            return columns[0]
        if all(isinstance(c, NumericKeys) for c in columns):
            return NumericKeys(np.concatenate([c.values for c in columns]))  # type: ignore[attr-defined]
        if all(isinstance(c, TextKeys) for c in columns):
            texts = [c for c in columns if isinstance(c, TextKeys)]
            blob = np.concatenate([c.blob[c.offsets[0] : c.offsets[-1]] for c in texts])
            lengths = np.concatenate([np.diff(c.offsets) for c in texts])
            offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
            np.cumsum(lengths, out=offsets[1:])
            return TextKeys(blob, offsets)
        return ObjectKeys([k for c in columns for k in c.take(np.arange(len(c), dtype=np.int64))])


class NumericKeys(KeyColumn):
    """Integer keys (CTF numeric ids, line numbers, plug-in integer keys)."""

    def __init__(self, values: np.ndarray):
        self.values = values

    def __len__(self) -> int:
        return len(self.values)

    def take(self, indices: np.ndarray) -> list[Any]:
        return self.values[indices].tolist()  # type: ignore[no-any-return]

    def slice(self, start: int, stop: int) -> NumericKeys:
        return NumericKeys(self.values[start:stop])


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

    def take(self, indices: np.ndarray) -> list[Any]:
        blob = self.blob
        starts = self.offsets[indices].tolist()
        ends = self.offsets[np.asarray(indices) + 1].tolist()
        return [bytes(blob[a:b]).decode("utf-8", "backslashreplace") for a, b in zip(starts, ends)]

    def slice(self, start: int, stop: int) -> TextKeys:
        return TextKeys(self.blob, self.offsets[start : stop + 1])


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


def shorten(key: Any, limit: int = MAX_KEY_CHARS_SHOWN) -> str:
    """A key as text for messages, cut to ``limit`` characters."""
    text = str(key)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"
