"""Which kind of file is this? The format of a data or config file, from its first bytes and its name.

Only the first :data:`SAMPLE_BYTES` are read. A format cntkio reads (:mod:`cntkio._src.formats.registry`) is
recognised by its content (the magic numbers and text headers of the registry, ``|name`` fields, tab-separated image
map columns, SCP entries, reader config keys); the registry's name extensions decide only between text formats whose
content is ambiguous. Anything else is described (binary data,
compressed, an image, an HTK feature file, plain text) so that a command can say what the file seems to be.
"""

from __future__ import annotations

import os
import re
import struct
from dataclasses import dataclass

from cntkio._src.formats import registry
from cntkio._src.formats.kaldi import is_archive
from cntkio._src.formats.registry import BASE64_IMAGE, CONFIG, CTF, IMAGE_MAP, KALDI, MLF, SCP

SAMPLE_BYTES = 64 * 1024

_MAGICS = {
    b"\x1f\x8b": "gzip-compressed data (decompress it first)",
    b"PK\x03\x04": "a zip archive (image map files may name images inside one as archive.zip@/path.jpg)",
    b"BZh": "bzip2-compressed data (decompress it first)",
    b"\xfd7zXZ\x00": "xz-compressed data (decompress it first)",
    b"\x28\xb5\x2f\xfd": "zstd-compressed data (decompress it first)",
    b"\xff\xd8\xff": "a JPEG image (list images in an image map file: path<TAB>label)",
    b"\x89PNG": "a PNG image (list images in an image map file: path<TAB>label)",
    b"\x93NUMPY": "a NumPy .npy array (MinibatchSourceFromData reads arrays)",
}
_HTK_EXTENSIONS = (".mfc", ".fbank", ".plp", ".htk", ".ark", ".fea", ".feat")
_IMAGE_EXTENSIONS = (b".jpg", b".jpeg", b".png", b".bmp", b".gif", b".tif", b".tiff", b".webp", b".ppm", b".pgm")
_CTF_FIELD = re.compile(rb"\|(#|[^\s|]+)")
_CTF_NAME = re.compile(rb"\|([^\s|#][^\s|]*)")
_CONFIG = re.compile(rb"(?im)^\s*(reader|readerType|deserializers|command|precision)\s*=")
_KALDI_SCP_LINE = re.compile(rb"^\S+\s+\S+:\d+$")  # key path:offset
_SCP_LINE = re.compile(rb"^[^\s=]+=\S+$|^\S+\.(mfc|fbank|plp|htk|fea|feat)$", re.IGNORECASE)
_BASE64 = re.compile(rb"^[A-Za-z0-9+/]{16,}={0,2}$")
_INTEGER = re.compile(rb"^\s*\+?\d+\s*$")
MOSTLY = 0.8  # the share of lines with an image file's columns that makes a file with malformed lines one


@dataclass(frozen=True)
class Detection:
    """What a file seems to be: ``format`` is the name of a format of the registry when cntkio reads it, else ``None``;
    ``reason`` says what gave it away (or, without a format, what the file seems to be)."""

    format: str | None
    reason: str

    def __str__(self) -> str:
        return self.reason if self.format is None else f"{registry.get(self.format).title} ({self.reason})"


def detect(path: str | os.PathLike[str]) -> Detection:
    """Reads the start of the file and tells its format (``OSError`` when it cannot be read)."""
    with open(path, "rb") as f:
        sample = f.read(SAMPLE_BYTES)
    return detect_bytes(sample, os.fspath(path))


def detect_bytes(sample: bytes, name: str = "") -> Detection:
    """The format of a file starting with ``sample`` (its first bytes) and named ``name``."""
    extension = os.path.splitext(name)[1].lower()
    named = registry.by_extension(name)
    if not sample:
        return Detection((CONFIG if named is CONFIG else CTF).name, "the file is empty")
    known = registry.by_magic(sample)
    if known is not None:
        return Detection(known.name, f"it starts with the magic '{known.magic.decode('latin-1')}'")
    if sample.startswith((b"\xff\xfe", b"\xfe\xff")):
        return Detection(CTF.name, "UTF-16 text (the CTF reader reads UTF-8 only)")
    for magic, what in _MAGICS.items():
        if sample.startswith(magic):
            return Detection(None, what)
    if is_archive(sample):
        return Detection(KALDI.name, "a binary Kaldi archive (a key, then a matrix marked '\\0B')")
    if extension in _HTK_EXTENSIONS or _looks_like_htk(sample):
        return Detection(None, "an HTK feature file (inspect the SCP file that lists it: name=path[start,end])")
    text = sample.removeprefix(b"\xef\xbb\xbf")
    if b"\x00" in text or _control_bytes(text) > 0.05 * len(text) or not _utf8(text):
        return Detection(None, "binary data (NUL or control bytes, or not UTF-8)")
    lines = [line for line in text.split(b"\n")[:-1] or [text] if line.strip()]
    if not lines:
        return Detection(CTF.name, "only blank lines")
    if lines[0].strip() == MLF.header or MLF.header in text[:200]:
        return Detection(MLF.name, f"it starts with '{MLF.header.decode()}'")
    if named is CONFIG or len(_CONFIG.findall(text)) >= 2:
        return Detection(CONFIG.name, "its name, or reader/readerType/deserializers keys")
    with_fields = sum(1 for line in lines if _CTF_FIELD.search(line))
    names = {m.group(1) for line in lines for m in _CTF_NAME.finditer(line)}
    good_names = sum(1 for n in names if any(c.isalnum() for c in n.decode("utf-8", "replace")))
    if with_fields >= 0.5 * len(lines) and names and good_names >= 0.5 * len(names):
        return Detection(CTF.name, f"{with_fields:,} of the first {len(lines):,} lines have '|name' fields")
    columns = [line.rstrip(b"\r").split(b"\t") for line in lines]
    if all(len(c) in (2, 3) for c in columns):
        if all(_BASE64.match(c[-1]) and _INTEGER.match(c[-2]) for c in columns):
            return Detection(BASE64_IMAGE.name, "lines of [key<TAB>]label<TAB>base64")
        if all(_INTEGER.match(c[-1]) for c in columns):
            images = any(c[-2].lower().endswith(_IMAGE_EXTENSIONS) or b"@" in c[-2] for c in columns)
            why = "image paths" if images else "paths"
            return Detection(IMAGE_MAP.name, f"lines of [key<TAB>]path<TAB>label ({why})")
    broken = _broken_images(lines, columns)  # most lines are those of an image file: the others are its errors
    if broken is not None:
        return broken
    if all(_KALDI_SCP_LINE.match(line.strip()) for line in lines):
        return Detection(KALDI.name, "lines of key path:offset (a Kaldi feats.scp)")
    if sum(1 for line in lines if _SCP_LINE.match(line.strip())) >= 0.9 * len(lines):
        return Detection(SCP.name, "lines of name=path[start,end]")
    if named is SCP:
        return Detection(SCP.name, f"the file name ends with {extension}")
    bad = f", and its names look wrong ({_names(names)})" if names and with_fields >= 0.5 * len(lines) else ""
    return Detection(
        None,
        f"text, but {len(lines) - with_fields} of its first {len(lines)} non-blank lines have no '|name' field "
        f"(CTF needs one per sample){bad}",
    )


def _broken_images(lines: list[bytes], columns: list[list[bytes]]) -> Detection | None:
    """An image map or Base64 image file with some malformed lines (which its scan reports): most lines have its
    columns (:data:`MOSTLY` of them), or half of them start with an image file (a map whose columns are broken,
    such as spaces for tabs)."""
    n = len(lines)
    base64 = sum(1 for c in columns if len(c) in (2, 3) and _BASE64.match(c[-1]) and _INTEGER.match(c[-2]))
    rows = sum(1 for c in columns if len(c) in (2, 3) and _INTEGER.match(c[-1]))
    images = sum(1 for c in columns if _starts_with_image(c))
    if base64 >= MOSTLY * n:
        lines_are = "are [key<TAB>]label<TAB>base64"
        return Detection(BASE64_IMAGE.name, f"{base64:,} of the first {n:,} lines {lines_are}, the others not")
    if rows >= MOSTLY * n:
        lines_are = "are [key<TAB>]path<TAB>label"
        return Detection(IMAGE_MAP.name, f"{rows:,} of the first {n:,} lines {lines_are}, the others not")
    if images >= 0.5 * n:
        return Detection(
            IMAGE_MAP.name,
            f"{images:,} of the first {n:,} lines start with an image file, but only {rows:,} are "
            "[key<TAB>]path<TAB>label",
        )
    return None


def _starts_with_image(columns: list[bytes]) -> bool:
    """Whether a line's first word, or its second column's (after a key), names an image file (or a zip item)."""
    words = [column.split(None, 1)[0] for column in columns[:2] if column.strip()]
    return any(word.lower().endswith(_IMAGE_EXTENSIONS) or b".zip@" in word.lower() for word in words)


def _names(names: set[bytes]) -> str:
    shown = sorted(n.decode("utf-8", "backslashreplace") for n in names)[:3]
    return ", ".join(f"'{n}'" for n in shown)


def _control_bytes(text: bytes) -> int:
    return sum(text.count(bytes([c])) for c in range(32) if c not in (9, 10, 11, 12, 13))


def _utf8(text: bytes) -> bool:
    try:
        text.decode("utf-8")
    except UnicodeDecodeError as e:
        return e.start >= len(text) - 3  # a character cut by the end of the sample
    return True


def _looks_like_htk(sample: bytes) -> bool:
    """A 12-byte HTK header (either byte order): a known base kind, plausible counts, and NUL bytes."""
    if len(sample) < 12:
        return False
    for order in "<>":
        frames, period, size, kind = struct.unpack(order + "iiHh", sample[:12])
        if frames > 0 and 0 < period <= 10_000_000 and 0 < size <= 65_535 and kind & 0o77 in (6, 7, 9, 11, 12):
            return b"\x00" in sample[:12]  # text has none; a header's small numbers do
    return False
