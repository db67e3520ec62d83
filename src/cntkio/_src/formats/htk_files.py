"""HTK feature files: header, reading and writing (float32, and int16 ``_C`` compressed), archives and SCP files.

An HTK file is a 12-byte header (``nSamples, sampPeriod, sampSize, parmKind``), a 16-byte GUID when
``parmKind == 12``, the ``A``/``B`` vectors of compressed files, then the frames, frame-major. Files are normally
big-endian; the reader accepts both byte orders with CNTK's heuristic (see :func:`read_header`).

Example::

    from cntkio.htk import write_archive, write_scp, read_features
    entries = write_archive("feats.ark", {"utt1": np.ones((5, 40), np.float32), "utt2": np.zeros((3, 40))})
    write_scp("feats.scp", entries)          # utt1.mfc=feats.ark[0,4] / utt2.mfc=feats.ark[5,7]
    read_features("feats.ark", 5, 7)         # utt2's 3 frames
    write_mlf("labels.mlf", {"utt1": [(0, 2, "s1"), (2, 5, "s2")], "utt2": [(0, 3, "sil")]})
    write_state_list("states.list", ["s1", "s2", "sil"])
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from cntkio._src.common.errors import FormatError, Location
from cntkio._src.formats.data_file import replacement_file, require_regular_file

HTK_KINDS: dict[str, int] = {"MFCC": 6, "FBANK": 7, "USER": 9, "PLP": 11, "ANON": 12}
"""Base parameter kinds CNTK accepts. 12 (HTK's ``ANON``) is read as USER; when ``parmKind == 12`` exactly (no
qualifier) a 16-byte GUID follows the header."""

HTK_QUALIFIERS: dict[str, int] = {
    "_E": 0o100,  # energy
    "_N": 0o200,  # absolute energy suppressed
    "_D": 0o400,  # deltas
    "_A": 0o1000,  # accelerations
    "_C": 0o2000,  # compressed (int16 data, A/B vectors after the header)
    "_Z": 0o4000,  # zero mean
    "_K": 0o10000,  # CRC (noted, not checked)
    "_0": 0o20000,  # 0th cepstral coefficient
    "_V": 0o40000,  # VQ data (refused)
    "_T": 0o100000,  # third differential
}
"""Qualifier flags of ``parmKind`` (octal values of HTK)."""

BASE_KIND_MASK = 0o77
GUID_KIND = 12
GUID_BYTES = 16
HEADER_BYTES = 12
_KIND_NAMES = {code: name for name, code in HTK_KINDS.items()}
_COMPRESSED_MAX = 32767


@dataclass(frozen=True)
class HTKHeader:
    """A parsed HTK header.

    ``frames`` is the number of data frames (for compressed files the stored ``nSamples`` minus the 4 "frames"
    holding ``A`` and ``B``). ``scale``/``bias`` are the ``A``/``B`` vectors of a compressed file (float32,
    ``value = (short + B) / A``), else None.

    Example::

        header = read_header("utt.mfc")
        header.dim, header.base_kind, header.qualifiers   # 39, 'MFCC', '_E_D_A'
    """

    frames: int
    sample_period: int
    sample_size: int
    parm_kind: int
    big_endian: bool = True
    scale: np.ndarray | None = field(default=None, compare=False, repr=False)
    bias: np.ndarray | None = field(default=None, compare=False, repr=False)

    @property
    def base_kind_code(self) -> int:
        """The low 6 bits of ``parm_kind``."""
        return self.parm_kind & BASE_KIND_MASK

    @property
    def base_kind(self) -> str:
        """The base kind's name (``'MFCC'``, ``'FBANK'``, ``'USER'``, ``'PLP'``, ``'ANON'``)."""
        return _KIND_NAMES.get(self.base_kind_code, str(self.base_kind_code))

    @property
    def qualifiers(self) -> str:
        """The qualifier flags as HTK writes them, e.g. ``'_E_D_A'`` (in flag order)."""
        return "".join(name for name, bit in HTK_QUALIFIERS.items() if self.parm_kind & bit)

    @property
    def compressed(self) -> bool:
        return bool(self.parm_kind & HTK_QUALIFIERS["_C"])

    @property
    def has_guid(self) -> bool:
        """Whether a 16-byte GUID follows the header (``parm_kind == 12`` exactly)."""
        return self.parm_kind == GUID_KIND

    @property
    def element_size(self) -> int:
        """Bytes per value: 2 (int16) when compressed, else 4 (float32)."""
        return 2 if self.compressed else 4

    @property
    def dim(self) -> int:
        """Values per frame."""
        return self.sample_size // self.element_size

    @property
    def byte_order(self) -> str:
        """``'>'`` (big-endian, HTK's usual order) or ``'<'``."""
        return ">" if self.big_endian else "<"

    @property
    def data_offset(self) -> int:
        """Byte offset of frame 0: header, GUID, and the A/B vectors of a compressed file."""
        return HEADER_BYTES + (GUID_BYTES if self.has_guid else 0) + (8 * self.dim if self.compressed else 0)

    @property
    def kind(self) -> tuple[int, int, int]:
        """What must agree between the files of one corpus: (parm_kind, dim, sample_period)."""
        return self.parm_kind, self.dim, self.sample_period


@dataclass(frozen=True)
class ScpEntry:
    """One SCP line: ``key`` (logical name without extension), the physical file, and the inclusive frame range
    ``[start, end]`` inside it (both None for a whole file)."""

    key: str
    path: str
    start: int | None = None
    end: int | None = None

    @property
    def frames(self) -> int | None:
        return None if self.start is None or self.end is None else self.end - self.start + 1


# ------------------------------------------------------------------------------------------ reading
def _decode_header(raw: bytes, name: str) -> tuple[HTKHeader, int]:
    """Fields of a 12-byte header, in the byte order CNTK's heuristic picks; returns the header (without A/B)
    and the raw ``nSamples``."""
    if len(raw) < HEADER_BYTES:
        raise FormatError(f"truncated HTK header: {len(raw)} of {HEADER_BYTES} bytes", Location(name, 0))
    period_le = struct.unpack_from("<I", raw, 4)[0]
    period_swapped = struct.unpack_from(">I", raw, 4)[0]
    big_endian = period_swapped < period_le  # CNTK: the file is byte-swapped if swapping gives a smaller period
    order = ">" if big_endian else "<"
    samples, period, sample_size, parm_kind = struct.unpack_from(order + "iiHh", raw, 0)
    parm_kind &= 0xFFFF  # parmKind is a set of bits (_T is bit 15)
    header = HTKHeader(samples, period, sample_size, parm_kind, big_endian)
    where = Location(name, 0)
    if header.base_kind_code not in _KIND_NAMES:
        raise FormatError(
            f"unsupported HTK parameter kind {header.base_kind_code} (parmKind {parm_kind:#o}); accepted: "
            + ", ".join(f"{n} {c}" for n, c in HTK_KINDS.items()),
            where,
        )
    if parm_kind & HTK_QUALIFIERS["_V"]:
        raise FormatError(f"VQ-coded HTK data (_V, parmKind {parm_kind:#o}) is not supported", where)
    if sample_size == 0 or sample_size % header.element_size:
        raise FormatError(
            f"HTK sampSize {sample_size} is not a positive multiple of the element size {header.element_size}"
            + (" (compressed)" if header.compressed else ""),
            where,
        )
    if samples < (4 if header.compressed else 0):
        raise FormatError(
            f"HTK nSamples {samples} is negative" + (" (compressed: < 4)" if header.compressed else ""), where
        )
    return header, samples


def _parse(raw: bytes, name: str) -> HTKHeader:
    header, samples = _decode_header(raw, name)
    if not header.compressed:
        return header
    start = HEADER_BYTES + (GUID_BYTES if header.has_guid else 0)
    dim = header.dim
    if len(raw) < start + 8 * dim:
        raise FormatError(
            f"truncated HTK file: the A/B vectors of {dim} values each are missing", Location(name, start)
        )
    values = np.frombuffer(raw, dtype=header.byte_order + "f4", count=2 * dim, offset=start).astype(np.float32)
    return HTKHeader(
        samples - 4, header.sample_period, header.sample_size, header.parm_kind, header.big_endian,
        values[:dim], values[dim:],
    )  # fmt: skip


def read_header_at(fd: int, name: str) -> HTKHeader:
    """The header of the HTK file open as ``fd`` (read with ``pread``, the file position is left alone);
    ``name`` names the file in errors."""
    raw = os.pread(fd, HEADER_BYTES, 0)
    header, _ = _decode_header(raw, name)
    extra = header.data_offset - HEADER_BYTES  # the GUID and the A/B vectors of a compressed file
    return _parse(raw + os.pread(fd, extra, HEADER_BYTES) if extra else raw, name)


def read_header(path_or_bytes: str | os.PathLike[str] | bytes | bytearray | memoryview) -> HTKHeader:
    """Reads and validates an HTK header from a file or from the file's first bytes.

    The byte order follows CNTK: the header is read little-endian, and the file is taken as byte-swapped (big-
    endian) when swapping ``sampPeriod`` gives a smaller unsigned number. An unknown base kind, ``_V``, a
    ``sampSize`` that is not a multiple of the element size, or a truncated header is a :class:`FormatError`.

    Example::

        header = read_header("feats.ark")     # HTKHeader(frames=1200, sample_period=100000, ...)
    """
    if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
        return _parse(bytes(path_or_bytes), "<bytes>")
    name = os.fspath(path_or_bytes)
    require_regular_file(name, "HTK file")  # read by offset: a FIFO would hang the open
    with open(name, "rb") as file:
        return read_header_at(file.fileno(), name)


def read_features(path: str | os.PathLike[str], start: int = 0, end: int | None = None) -> np.ndarray:
    """Frames ``start..end`` (**inclusive**, like SCP ranges; ``end=None``: the last frame) of an HTK file as a
    float32 array ``(frames, dim)``; compressed files are decoded, big-endian data swapped (vectorised).

    Example::

        entry = entries[1]
        utterance = read_features(entry.path, entry.start, entry.end)
    """
    name = os.fspath(path)
    require_regular_file(name, "HTK file")  # read by offset: a FIFO would hang the open
    with open(name, "rb") as file:
        header = read_header_at(file.fileno(), name)
        last = header.frames - 1 if end is None else int(end)
        if start < 0 or last < start - 1 or last >= header.frames:
            raise FormatError(
                f"frame range [{start},{last}] is outside the file's {header.frames} frames or reversed",
                Location(name, header.data_offset),
            )
        count = last - start + 1
        offset = header.data_offset + start * header.sample_size
        file.seek(offset)
        raw = file.read(count * header.sample_size)
    if len(raw) < count * header.sample_size:
        raise FormatError(
            f"truncated HTK file: frames [{start},{last}] need {count * header.sample_size} bytes from offset "
            f"{offset}, {len(raw)} left",
            Location(name, offset + len(raw)),
        )
    dtype = np.dtype(header.byte_order + ("i2" if header.compressed else "f4"))
    values = np.frombuffer(raw, dtype=dtype).reshape(count, header.dim)
    if header.compressed:
        assert header.scale is not None and header.bias is not None
        return (values.astype(np.float32) + header.bias) / header.scale  # type: ignore[no-any-return]
    return values.astype(np.float32)


# ------------------------------------------------------------------------------------------ writing
def parm_kind(kind: str | int = "USER", qualifiers: str = "", compressed: bool = False) -> int:
    """The ``parmKind`` of a base kind name (or code) and qualifiers such as ``'_E_D_A'``.

    Example::

        parm_kind("MFCC", "_E_D_A")           # 0o1506
    """
    code = HTK_KINDS.get(kind.upper()) if isinstance(kind, str) else int(kind)
    if code not in _KIND_NAMES:
        raise ValueError(f"unknown HTK base kind {kind!r}; accepted: {', '.join(HTK_KINDS)}")
    value = code
    text = qualifiers.upper()
    if len(text) % 2 or any(text[i] != "_" for i in range(0, len(text), 2)):
        raise ValueError(f"qualifiers must be '_X' flags such as '_E_D_A', got {qualifiers!r}")
    for i in range(0, len(text), 2):
        flag = text[i : i + 2]
        if flag not in HTK_QUALIFIERS:
            raise ValueError(f"unknown HTK qualifier {flag!r}; known: {''.join(HTK_QUALIFIERS)}")
        value |= HTK_QUALIFIERS[flag]
    if value & HTK_QUALIFIERS["_V"]:
        raise ValueError("VQ data (_V) cannot be written")
    if value & HTK_QUALIFIERS["_K"]:
        raise ValueError("CRC files (_K) are not written (the CRC is not computed)")
    if compressed:
        value |= HTK_QUALIFIERS["_C"]
    return value


def compression_vectors(frames: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """HTK's ``A``/``B`` vectors for ``frames``: per dimension ``A = 2*32767/(max-min)``,
    ``B = (max+min)*32767/(max-min)``; a constant dimension gets ``A = 1, B = value`` (stored exactly).

    Example::

        scale, bias = compression_vectors(np.array([[0.0, 1.0], [2.0, 1.0]]))   # [32767, 1], [32767, 1]
    """
    values = np.asarray(frames, dtype=np.float64)
    if values.shape[0] == 0:
        return np.ones(values.shape[1], np.float32), np.zeros(values.shape[1], np.float32)
    high, low = values.max(axis=0), values.min(axis=0)
    span = high - low
    constant = span == 0
    safe = np.where(constant, 1.0, span)
    with np.errstate(over="ignore"):
        scale = np.where(constant, 1.0, 2 * _COMPRESSED_MAX / safe).astype(np.float32)
        bias = np.where(constant, high, (high + low) * _COMPRESSED_MAX / safe).astype(np.float32)
    if not (np.isfinite(scale).all() and np.isfinite(bias).all()) or (scale == 0).any():
        raise ValueError("the value range is too large (or too small) for HTK compression")
    return scale, bias


def _check_frames(frames: Any) -> np.ndarray:
    array = np.asarray(frames)
    if array.ndim != 2:
        raise ValueError(f"frames must be a 2-D array (frames, dim), got shape {array.shape}")
    if array.dtype.kind not in "fiub":
        raise ValueError(f"frames must be numeric, got {array.dtype}")
    return array


def _encode(
    frames: np.ndarray, sample_period: int, kind: str | int, qualifiers: str, compressed: bool,
    big_endian: bool, guid: bytes | None,
) -> tuple[HTKHeader, list[bytes]]:  # fmt: skip
    code = parm_kind(kind, qualifiers, compressed)
    compressed = bool(code & HTK_QUALIFIERS["_C"])
    count, dim = frames.shape
    element = 2 if compressed else 4
    if dim == 0 or dim * element > 0xFFFF:
        raise ValueError(f"dim {dim} does not fit HTK's 16-bit sampSize ({element}-byte values)")
    stored = count + (4 if compressed else 0)
    if stored > 2**31 - 1:
        raise ValueError(f"{count} frames do not fit HTK's 32-bit nSamples")
    if not 0 <= sample_period <= 2**31 - 1:
        raise ValueError(f"sample_period must fit a non-negative int32, got {sample_period}")
    order = ">" if big_endian else "<"
    signed_kind = code - 0x10000 if code >= 0x8000 else code
    parts = [struct.pack(order + "iiHh", stored, sample_period, dim * element, signed_kind)]
    if code == GUID_KIND:
        guid = bytes(GUID_BYTES) if guid is None else bytes(guid)
        if len(guid) != GUID_BYTES:
            raise ValueError(f"guid must be {GUID_BYTES} bytes, got {len(guid)}")
        parts.append(guid)
    values32 = frames.astype(np.float32)
    if compressed:
        if not np.isfinite(values32).all():
            raise ValueError("compressed HTK files cannot hold NaN or infinite values")
        scale, bias = compression_vectors(values32)
        parts.append(np.concatenate([scale, bias]).astype(order + "f4").tobytes())
        shorts = np.rint(values32.astype(np.float64) * scale - bias)
        np.clip(shorts, -_COMPRESSED_MAX, _COMPRESSED_MAX, out=shorts)
        parts.append(shorts.astype(order + "i2").tobytes())
        header = HTKHeader(count, sample_period, dim * element, code, big_endian, scale, bias)
    else:
        parts.append(values32.astype(order + "f4").tobytes())
        header = HTKHeader(count, sample_period, dim * element, code, big_endian)
    return header, parts


def _write_atomically(path: str, parts: Iterable[bytes]) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    handle, temporary = replacement_file(directory, ".htk-")
    try:
        with os.fdopen(handle, "wb") as file:
            for part in parts:
                file.write(part)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def write_features(
    path: str | os.PathLike[str],
    frames: Any,
    *,
    sample_period: int = 100000,
    kind: str | int = "USER",
    qualifiers: str = "",
    compressed: bool = False,
    big_endian: bool = True,
    guid: bytes | None = None,
) -> HTKHeader:
    """Writes one HTK feature file: ``frames`` ``(count, dim)`` as float32, or int16 with HTK's ``_C``
    compression (``A``/``B`` per dimension, see :func:`compression_vectors`). Kind ``'ANON'`` (12) without
    qualifiers writes ``guid`` (16 bytes, zeros by default) after the header. Written to a temporary file and
    renamed. Returns the header written.

    Example::

        write_features("utt1.mfc", np.random.rand(100, 39), kind="MFCC", qualifiers="_E_D_A")
    """
    array = _check_frames(frames)
    header, parts = _encode(array, sample_period, kind, qualifiers, compressed, big_endian, guid)
    _write_atomically(os.fspath(path), parts)
    return header


def write_archive(
    path: str | os.PathLike[str],
    utterances: Mapping[str, Any],
    **options: Any,
) -> list[ScpEntry]:
    """Writes several utterances as ONE HTK file (one header, the frames concatenated in the mapping's order)
    and returns their SCP entries with inclusive ``[start, end]`` ranges. ``options`` are those of
    :func:`write_features`. Every utterance needs at least one frame and the same dim.

    Example::

        entries = write_archive("a.ark", {"spk1_utt1": feats1, "spk1_utt2": feats2}, kind="FBANK")
        write_scp("a.scp", entries)
    """
    name = os.fspath(path)
    arrays = [_check_frames(v) for v in utterances.values()]
    if not arrays:
        raise ValueError("write_archive needs at least one utterance")
    dims = {a.shape[1] for a in arrays}
    if len(dims) != 1:
        raise ValueError(f"every utterance must have the same dim, got {sorted(dims)}")
    for key, array in zip(utterances, arrays):
        if array.shape[0] == 0:
            raise ValueError(f"utterance {key!r} has no frames (an SCP range cannot be empty)")
    write_features(name, np.concatenate(arrays), **options)
    ends = np.cumsum([a.shape[0] for a in arrays]).tolist()
    starts = [0, *ends[:-1]]
    return [ScpEntry(key, name, s, e - 1) for key, s, e in zip(utterances, starts, ends)]


def write_scp(path: str | os.PathLike[str], entries: Iterable[ScpEntry], logical_extension: str = ".mfc") -> None:
    """Writes an SCP file: ``key<ext>=physical[start,end]`` lines (``key<ext>=physical`` for whole files).

    Example::

        write_scp("train.scp", [ScpEntry("utt1", "a.ark", 0, 99), ScpEntry("utt2", "b.mfc")])
    """
    lines = []
    for entry in entries:
        if any(c in entry.key for c in "=\n\r") or not entry.key:
            raise ValueError(f"SCP key {entry.key!r} is empty or holds '=' or a line break")
        if any(c in entry.path for c in "[\n\r") or not entry.path:
            raise ValueError(f"SCP path {entry.path!r} is empty or holds '[' or a line break")
        line = f"{entry.key}{logical_extension}={entry.path}"
        if entry.start is not None or entry.end is not None:
            if entry.start is None or entry.end is None or not 0 <= entry.start <= entry.end:
                raise ValueError(f"SCP entry {entry.key!r}: invalid range [{entry.start},{entry.end}]")
            line += f"[{entry.start},{entry.end}]"
        lines.append(line + "\n")
    _write_atomically(os.fspath(path), ["".join(lines).encode("utf-8", "surrogateescape")])


MLF_UNITS = ("htk", "frames")
"""Time units :func:`write_mlf` writes: HTK's 100 ns units (``frame * 100000``) or frame indices."""
_HTK_FRAME = 100000
_MAX_FRAME_RUN = 99998  # a line with end - start >= 99999 is read as 100 ns times (spec §2.1)


def _check_label_name(name: Any, what: str) -> str:
    if not isinstance(name, str) or not name:
        raise ValueError(f"{what} must be a non-empty string, got {name!r}")
    if any(c.isspace() for c in name):
        raise ValueError(f"{what} {name!r} holds whitespace (MLF label lines are split on spaces)")
    return name


def _frame(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{what} must be an integer frame index, got {value!r}")
    return int(value)


def _mlf_lines(labels: Mapping[str, Sequence[tuple[int, int, str]]], units: str) -> Iterator[bytes]:
    yield b"#!MLF!#\n"
    scale = _HTK_FRAME if units == "htk" else 1
    for key, runs in labels.items():
        if not isinstance(key, str) or not key or any(c in key for c in '"\n\r'):
            raise ValueError(f"MLF key {key!r} is not a non-empty string without '\"' or line breaks")
        if not runs:
            raise ValueError(f"utterance {key!r} has no label (an MLF entry without label lines is invalid)")
        lines = [f'"*/{key}.lab"']
        for run in runs:
            try:
                start, end, state = run
            except (TypeError, ValueError):
                raise ValueError(f"utterance {key!r}: a label must be (start, end, state), got {run!r}") from None
            start, end = _frame(start, f"utterance {key!r}: start"), _frame(end, f"utterance {key!r}: end")
            _check_label_name(state, f"utterance {key!r}: state")
            if not 0 <= start < end:
                raise ValueError(f"utterance {key!r}: label ({start}, {end}, {state!r}) needs 0 <= start < end")
            if units == "frames" and end - start > _MAX_FRAME_RUN:
                raise ValueError(
                    f"utterance {key!r}: label ({start}, {end}, {state!r}) spans {end - start} frames; in frame "
                    f"units a line of more than {_MAX_FRAME_RUN} frames would be read as 100 ns times "
                    "(write units='htk')"
                )
            lines.append(f"{start * scale} {end * scale} {state}")
        lines.append(".\n")
        yield "\n".join(lines).encode("utf-8")


def write_mlf(
    path: str | os.PathLike[str],
    labels: Mapping[str, Sequence[tuple[int, int, str]]],
    *,
    units: str = "htk",
) -> None:
    """Writes an HTK master label file: ``#!MLF!#``, then per utterance a ``"*/KEY.lab"`` header, one
    ``start end state`` line per label (frames ``[start, end)``) and a ``.`` terminator (spec §2.1).

    ``labels`` maps each utterance key (directories allowed: ``"a/b/c"``) to its labels ``(start, end, state)``
    in frames. ``units='htk'`` writes HTK's 100 ns times (``frame * 100000``), ``'frames'`` the frame indices
    themselves (a label of more than 99998 frames is then refused: the reader would take it for 100 ns times).
    Labels are written as given: a reader keeps an entry only if its labels are contiguous from frame 0. Written
    to a temporary file and renamed.

    Example::

        write_mlf("train.mlf", {"spk1_utt7": [(0, 12, "s1"), (12, 25, "s2"), (25, 26, "sil")]})
    """
    if units not in MLF_UNITS:
        raise ValueError(f"units must be one of {', '.join(map(repr, MLF_UNITS))}, got {units!r}")
    _write_atomically(os.fspath(path), _mlf_lines(labels, units))


def write_state_list(path: str | os.PathLike[str], states: Iterable[str]) -> None:
    """Writes a state list (``labelMappingFile``, spec §2.2): one state name per line, its id is its position.
    Names must be non-empty, distinct and free of whitespace. Written to a temporary file and renamed.

    Example::

        write_state_list("state.list", ["sil", "s1", "s2"])
    """
    names = list(states)
    if not names:
        raise ValueError("a state list needs at least one state")
    seen: dict[str, int] = {}
    for i, name in enumerate(names):
        _check_label_name(name, f"state {i}")
        if name in seen:
            raise ValueError(f"duplicate state name {name!r} (states {seen[name]} and {i})")
        seen[name] = i
    _write_atomically(os.fspath(path), ["".join(f"{name}\n" for name in names).encode("utf-8")])
