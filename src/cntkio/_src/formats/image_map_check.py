"""Every structural error of an ImageDeserializer map file in one pass, for reports (``cntkio inspect`` and
``validate``): :func:`cntkio._src.formats.image_map.parse_image_map` stops at the first, as a reader must.

The rules, the messages and the locations are those of the native scanner (``scan_map`` in
``src/native/image_index.cpp``; spec/image.md §1), written line by line in Python: this runs only on a map the
scanner refused, so its speed (about a microsecond a line) matters less than listing everything. The first error
found is the one :func:`~cntkio._src.formats.image_map.parse_image_map` raises (tests/test_cli_guides.py checks it).
A line with an error is left out; the first line without one decides the column count.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from cntkio._src.common.errors import FormatError, Location

_BOM = b"\xef\xbb\xbf"
_BLANK = b" \t\r\v\f"
_LABEL_SPACE = b" \t\r\v\f\n"


def map_errors(path: str | os.PathLike[str], *, label_dim: int | None = None) -> tuple[list[FormatError], int]:
    """Every structural error of the map file at ``path`` (file order), and how many lines have none.

    ``label_dim``: class ids are read and must be below it, as :func:`parse_image_map` does with it (without, a
    label need only not be empty). Files named by the map are not looked at.
    """
    file = os.fspath(path)
    errors: list[FormatError] = []
    columns = 0  # decided by the first line without an error
    good = 0
    for offset, line, text in _lines(file):
        if not text.strip(_BLANK):
            continue
        error, found = _check(file, text, offset, line, columns, label_dim)
        if error is not None:
            errors.append(error)
            continue
        columns = columns or found
        good += 1
    return errors, good


def _lines(file: str) -> Iterator[tuple[int, int, bytes]]:
    """(offset, 1-based line number, text without its newline); a UTF-8 byte order mark before the first is
    skipped (it counts in the offset)."""
    with open(file, "rb") as f:
        data = f.read()
    start = 0
    for number, text in enumerate(data.split(b"\n"), start=1):
        end = start + len(text)
        if number == 1 and text.startswith(_BOM):
            text, start = text[3:], start + 3
        if end < len(data) or text:  # (nothing after the last newline is no line)
            yield start, number, text
        start = end + 1


def _check(
    file: str, whole: bytes, offset: int, line: int, columns: int, label_dim: int | None
) -> tuple[FormatError | None, int]:
    """The first error of one line (None when there is none), and its column count."""
    text = whole[:-1] if whole.endswith(b"\r") else whole
    tabs = [i for i, byte in enumerate(text) if byte == 9]
    found = len(tabs) + 1
    key: object = line - 1  # a 2-column map's key: the 0-based line index

    def error(message: str, at: int, detail: bytes | None = None) -> tuple[FormatError, int]:
        if detail is not None:
            message = message.replace("{}", repr(detail.decode("utf-8", "surrogateescape")), 1)
        where = Location(file, offset + at, line, _column(whole, at), sequence_key=key)
        return FormatError(message, where), found

    if (found not in (2, 3)) if columns == 0 else found != columns:
        most = columns or 3
        at = tabs[most - 1] + 1 if found > most else len(text)
        if columns == 3:
            key = _text(text[: tabs[0]]) if found >= 2 else None
        return error(_columns_message(found, columns), at)
    path_at = 0
    if found == 3:
        key = _text(text[: tabs[0]])
        if not tabs[0]:
            return error("empty sequence key", 0)
        path_at = tabs[0] + 1
        path = text[path_at : tabs[1]]
    else:
        path = text[: tabs[0]]
    label_at = tabs[found - 2] + 1
    label = text[label_at:]
    if not path:
        return error("empty image path", path_at)
    if not label:
        return error("empty label", label_at)
    if label_dim is not None:
        digits, value = _label(label)
        if digits is None:
            return error("label {} is not an unsigned decimal integer", label_at, label)
        if value >= label_dim or value >= 2**64:
            return error(f"class id {digits} of image {{}} is not below label_dim {label_dim}", label_at, path)
    at = path.find(b"@")
    if at >= 0:
        if at == 0:
            return error("empty zip archive name before '@' in {}", path_at, path)
        if len(path) - at <= 2:  # the item is what follows '@' and one more character
            return error("empty zip item name after '@' in {}", path_at + at, path)
    return None, found


def _columns_message(found: int, expected: int) -> str:
    if expected == 0:
        return f"expected 2 tab-separated columns (path, label) or 3 (key, path, label), found {found}"
    if expected == 2:
        return f"expected 2 tab-separated columns (path, label) as on the first line, found {found}"
    return f"expected 3 tab-separated columns (key, path, label) as on the first line, found {found}"


def _label(field: bytes) -> tuple[str | None, int]:
    """A class id as the scanner reads it (strtoull's number, but the whole field): its digits (None: not one)
    and value."""
    i, n = 0, len(field)
    while i < n and field[i] in _LABEL_SPACE:
        i += 1
    if i < n and field[i : i + 1] == b"+":
        i += 1
    first = i
    while i < n and 48 <= field[i] <= 57:
        i += 1
    digits = field[first:i]
    if not digits or field[i:].strip(b" \r"):
        return None, 0
    return digits.decode("ascii"), int(digits)


def _column(line: bytes, at: int) -> int:
    """The 1-based column of byte ``at``, in characters (a byte of invalid UTF-8 is one character)."""
    return len(line[:at].decode("utf-8", "surrogateescape")) + 1


def _text(key: bytes) -> str:
    return key.decode("utf-8", "backslashreplace")
