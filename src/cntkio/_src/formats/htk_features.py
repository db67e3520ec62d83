"""HTK feature deserializer: utterances listed in SCP files, read by ``pread`` from HTK archives (spec §1).

The index is built from the SCP file(s) (:func:`cntkio._src.formats.scp.parse_scp`) and the header of every distinct
physical file. Frames are read by offset when a chunk is parsed and decoded natively with the GIL released (byte
swap, or ``(short + B) / A`` for compressed ``_C`` data, then the context window). Files are opened when a chunk
needs them, and a bounded number stays open.
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import logging
import os
import sys
import threading
from array import array
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from cntkio import _native
from cntkio._src.common.arrays import narrow_lengths
from cntkio._src.common.errors import ConfigError, FormatError, Location
from cntkio._src.common.streams import StreamDefs, StreamInformation, iter_stream_defs, parse_precision
from cntkio._src.formats import remote
from cntkio._src.formats.data_file import (
    DataFile,
    FileIdentity,
    RemoteDataFile,
    checked_name,
    open_data_file,
    pickled_as_arguments,
    read_identity,
    read_whole,
)
from cntkio._src.formats.error_ledger import ErrorLedger
from cntkio._src.formats.htk_files import HTKHeader, read_header_at
from cntkio._src.formats.identity import array_digest
from cntkio._src.formats.protocol import DenseStream, DeserializerGroup, IndexedDeserializer, ParsedChunk, SequenceIndex
from cntkio._src.formats.scp import ScpIndex, parse_scp

logger = logging.getLogger("cntkio")

DEFAULT_CHUNK_FRAMES = 90000
SHOWN_KEYS = 5
MAX_OPEN_FILES = 256
FILES_PER_READ = 32  # files one native read holds open (a chunk of one file per utterance reads in groups)


def _context(value: Any, name: str) -> tuple[int, int] | None:
    """``None``, an odd window ``W`` (``W//2`` each side) or ``(left, right)``."""
    if value is None:
        return None
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        if value < 1 or value % 2 == 0:
            raise ConfigError(
                f"stream '{name}': a context window given as one number must be odd and >= 1, got {value}"
            )
        return int(value) // 2, int(value) // 2
    try:
        left, right = value
    except (TypeError, ValueError):
        raise ConfigError(f"stream '{name}': context must be (left, right), got {value!r}") from None
    for side in (left, right):
        if not isinstance(side, (int, np.integer)) or isinstance(side, bool) or side < 0:
            raise ConfigError(f"stream '{name}': context must be two integers >= 0, got {value!r}")
    return int(left), int(right)


def context_window(dim: int, file_dim: int, context: tuple[int, int] | None, name: str, path: str) -> tuple[int, int]:
    """The context window of stream ``name`` of configured dimension ``dim`` over features of ``file_dim`` values a
    frame (those of ``path``): ``context`` when given (then ``dim`` must be ``file_dim``), none when the dimensions
    agree, else inferred from an odd multiple (CNTK's rule)."""
    if context is not None:
        if dim != file_dim:
            raise ConfigError(
                f"stream '{name}': shape {dim} differs from the feature dimension {file_dim} of '{path}' "
                f"(shape is the per-frame dimension; the context window multiplies it)"
            )
        return context
    if dim == file_dim:
        return 0, 0
    if dim % file_dim == 0 and (dim // file_dim) % 2 == 1:
        window = dim // file_dim
        logger.info(
            "stream '%s': shape %d is %d frames of the %d-dim features of '%s': context window (%d, %d) inferred",
            name, dim, window, file_dim, path, window // 2, window // 2,
        )  # fmt: skip
        return window // 2, window // 2
    raise ConfigError(
        f"stream '{name}': shape {dim} differs from the feature dimension {file_dim} of '{path}' (and is "
        "not an odd multiple of it, which would select a context window)"
    )


def _describe_kind(header: HTKHeader) -> str:
    return (
        f"{header.base_kind}{header.qualifiers} (parmKind {header.parm_kind:#o}), dim {header.dim}, "
        f"period {header.sample_period}"
    )


class _OpenFiles:
    """The HTK files of a deserializer, opened when a chunk needs them and kept open up to ``limit`` (least
    recently used closed first; files a chunk is reading are never closed). A reopened file must be the one that
    was indexed, unchanged (its :class:`FileIdentity`: inode, size, modification and change times); one kept open
    is checked after each read (:meth:`DataFile.check_unchanged`). Thread-safe."""

    def __init__(self, limit: int, kind: str = "HTK"):
        self.limit = limit
        self.kind = kind  # how messages name the files
        self.paths: list[str] = []
        # each file's identity when it was indexed (FileIdentity), as columns: no Python object per file
        self._devices, self._inodes = array("Q"), array("Q")
        self._sizes, self._mtimes, self._ctimes = array("q"), array("q"), array("q")
        self._open: OrderedDict[int, DataFile] = OrderedDict()
        self._pins: dict[int, int] = {}
        self._lock = threading.Lock()
        self.closed = False

    def add(self, data_file: DataFile) -> int:
        """Records a file opened while indexing (its identity is the reference), keeps it open if there is room;
        returns its number."""
        file_id = len(self.paths)
        self.paths.append(data_file.path)
        identity = data_file.identity
        self._devices.append(identity.device)
        self._inodes.append(identity.inode)
        self._sizes.append(identity.size)
        self._mtimes.append(identity.mtime_ns)
        self._ctimes.append(identity.ctime_ns)
        with self._lock:
            self._open[file_id] = data_file
            self._trim()
        return file_id

    def identities(self) -> bytes:
        """Every file's size and modification time, as bytes (for fingerprints)."""
        return self._sizes.tobytes() + self._mtimes.tobytes()

    def indexed(self, file_id: int) -> FileIdentity:
        """File ``file_id``'s identity when it was indexed."""
        return FileIdentity(
            self._devices[file_id], self._inodes[file_id], self._sizes[file_id], self._mtimes[file_id],
            self._ctimes[file_id],
        )  # fmt: skip

    def acquire(self, file_id: int) -> DataFile:
        """The file, open (reopened if it was closed, and then checked to be the indexed one, unchanged), pinned
        until :meth:`release`. The caller checks it after reading (:meth:`DataFile.check_unchanged`)."""
        with self._lock:
            if self.closed:
                raise ValueError(f"{self.paths[file_id]}: the deserializer is closed")
            self._pins[file_id] = self._pins.get(file_id, 0) + 1
        try:
            return self._get(file_id)
        except BaseException:
            self.release([file_id])
            raise

    def release(self, file_ids: list[int]) -> None:
        with self._lock:
            for file_id in file_ids:
                left = self._pins[file_id] - 1
                if left:
                    self._pins[file_id] = left
                else:
                    del self._pins[file_id]
            self._trim()

    def _get(self, file_id: int) -> DataFile:
        with self._lock:
            data_file = self._open.get(file_id)
            if data_file is not None:
                self._open.move_to_end(file_id)
        if data_file is not None:
            return data_file
        path = self.paths[file_id]
        data_file = open_data_file(path, self.kind)
        changes = self.indexed(file_id).changes(data_file.identity)
        if changes:
            data_file.close()
            raise FormatError(
                f"the file changed since it was indexed ({'; '.join(changes)}); build a new deserializer to read "
                "the new contents",
                Location(path, 0),
            )
        with self._lock:
            other = self._open.get(file_id)
            if other is not None:  # opened meanwhile by another thread
                data_file.close()
                return other
            self._open[file_id] = data_file
        return data_file

    def _trim(self) -> None:
        """Closes the least recently used unpinned files beyond the limit (called with the lock held)."""
        excess = len(self._open) - self.limit
        if excess <= 0:
            return
        for file_id in [f for f in self._open if f not in self._pins][:excess]:
            self._open.pop(file_id).close()

    def close(self) -> None:
        with self._lock:
            self.closed = True
            for data_file in self._open.values():
                data_file.close()
            self._open.clear()


T = TypeVar("T")
OPEN_AHEAD = 32  # remote HTK files opened (and their headers fetched) concurrently while indexing


def _opened(open_one: Callable[[str], T], paths: list[str]) -> Iterator[T | BaseException]:
    """``open_one(path)`` of each path in order (or the ``OSError``/``FormatError`` it raised): local files one
    after the other, remote ones :data:`OPEN_AHEAD` at a time on threads (each a metadata and a header request)."""

    def attempt(path: str) -> T | BaseException:
        try:
            return open_one(path)
        except (OSError, FormatError) as error:
            return error

    if not any(remote.is_remote(path) for path in paths):
        yield from (attempt(path) for path in paths)
        return
    with ThreadPoolExecutor(OPEN_AHEAD) as pool:
        for first in range(0, len(paths), OPEN_AHEAD):  # (a window: at most OPEN_AHEAD files open ahead)
            yield from pool.map(attempt, paths[first : first + OPEN_AHEAD])


HEADER_STAGE = 4096  # bytes of a remote HTK file fetched to read its header (a longer header: fetched again)


def _header_of(data_file: DataFile) -> HTKHeader:
    """The header of an open HTK file (of a remote object: its first bytes fetched, then the rest of a compressed
    file's header when it is longer)."""
    if not data_file.is_remote:
        return read_header_at(data_file.fd, data_file.path)
    with data_file.staged([(0, min(data_file.size, HEADER_STAGE))]):
        header = read_header_at(data_file.fd, data_file.path)
    if header.data_offset > HEADER_STAGE:
        with data_file.staged([(0, min(data_file.size, header.data_offset))]):
            header = read_header_at(data_file.fd, data_file.path)
    return header


@dataclass(frozen=True)
class _Runs:
    """Runs of frames a chunk reads: ``frames[r]`` frames from ``first_frames[r]`` of file ``files[r]``, the
    first holding sequence ``sequences[r]`` (for error messages)."""

    files: np.ndarray
    first_frames: np.ndarray
    frames: np.ndarray
    sequences: np.ndarray

    def part(self, start: int, stop: int) -> _Runs:
        return _Runs(
            self.files[start:stop], self.first_frames[start:stop], self.frames[start:stop], self.sequences[start:stop]
        )

    def groups(self, max_files: int) -> list[tuple[int, int]]:
        """Consecutive runs grouped so that each group reads at most ``max_files`` distinct files."""
        if len(np.unique(self.files)) <= max_files:
            return [(0, len(self.files))]
        groups: list[tuple[int, int]] = []
        start, seen = 0, set[int]()
        for r, file_id in enumerate(self.files.tolist()):
            if file_id not in seen and len(seen) == max_files:
                groups.append((start, r))
                start, seen = r, set()
            seen.add(file_id)
        groups.append((start, len(self.files)))
        return groups


def _open_file_limit() -> int:
    """How many HTK files a deserializer keeps open: a quarter of the process's file limit, at most 256."""
    soft = 1024
    try:
        import resource
    except ImportError:  # not a POSIX system
        return MAX_OPEN_FILES
    try:
        limit, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):
        return MAX_OPEN_FILES
    if limit != resource.RLIM_INFINITY and limit > 0:
        soft = limit
    return max(4, min(MAX_OPEN_FILES, soft // 4))


class FeatureStreamOptions(IndexedDeserializer):
    """The base of the HTK and Kaldi feature deserializers: the stream options they share (one dense stream listed by
    SCP files), checked and set by :meth:`_configure_feature_stream`."""

    trace_level: int
    stream_name: str
    broadcast: bool
    _config_dim: int
    _context: tuple[int, int] | None
    dtype: np.dtype[Any]
    chunk_frames: int
    max_sequence_length: int | None
    defines_mb_size: bool
    errors: ErrorLedger
    scp_files: list[str]

    def _configure_feature_stream(
        self, streams: Any, kind: str, scp_hint: str, precision: str, max_errors: int, chunk_frames: int
    ) -> str:
        """Checks the one stream of a ``kind`` ("HTK", "Kaldi") feature deserializer and sets the options above;
        returns the stream's name."""
        reader = f"{kind}FeatureDeserializer" if kind == "HTK" else f"{kind}Deserializer"
        definitions = list(iter_stream_defs(streams))
        if not definitions:
            raise ConfigError(f"{reader} needs at least one stream")
        if len(definitions) > 1:
            names = ", ".join(name for name, _ in definitions)
            raise ConfigError(
                f"{reader} reads one stream, got {len(definitions)} ({names}): "
                f"{reader}.per_stream(streams, ...) gives one deserializer per stream"
            )
        name, definition = definitions[0]
        self.stream_name = name
        if definition.field is not None:
            raise ConfigError(f"stream '{name}': field must be None for {kind} features")
        if definition.is_sparse:
            raise ConfigError(f"stream '{name}': {kind} features are dense")
        if not definition.scp:
            raise ConfigError(f"stream '{name}': {scp_hint} is required")
        if definition.shape is None and kind == "HTK":  # (Kaldi: the dimension of the matrices, _config_dim 0)
            raise ConfigError(f"stream '{name}': shape (the per-frame dimension) is required")
        self.broadcast = bool(definition.broadcast)
        self._config_dim = 0 if definition.shape is None else definition.dim()
        self._context = _context(definition.context, name)
        self.dtype = parse_precision(precision)
        if chunk_frames < 1:
            raise ConfigError(f"chunk_frames must be >= 1, got {chunk_frames}")
        self.chunk_frames = int(chunk_frames)
        limit = definition.max_sequence_length
        self.max_sequence_length = None if limit is None else int(limit)
        self.defines_mb_size = bool(definition.defines_mb_size)
        self.errors = ErrorLedger(int(max_errors), self.trace_level)
        scp = definition.scp
        self.scp_files = [os.fspath(scp)] if isinstance(scp, (str, os.PathLike)) else [os.fspath(s) for s in scp]
        return name


class HTKFeatureDeserializer(FeatureStreamOptions):
    """Reads HTK features of utterances listed in SCP files (``cntk.io.HTKFeatureDeserializer``).

    Args:
        streams: ``StreamDefs(name=StreamDef(shape=DIM, scp=PATH_OR_LIST, context=(LEFT, RIGHT)))``. ``DIM`` is
            the per-frame dimension and must equal the files' (with ``context=None``, a ``DIM`` that is an odd
            multiple ``w`` of the file's dimension selects the window ``(w//2, w//2)``, as CNTK inferred it).
            Output frames hold ``DIM * (1 + LEFT + RIGHT)`` values: frames ``t-LEFT .. t+RIGHT``, edge frames
            repeated. ``max_sequence_length`` (default: no limit): longer utterances are skipped (reported).
            ``defines_mb_size`` is passed on. ``broadcast=True`` (CNTK's ``expandToUtterance``): every SCP entry
            holds one frame (an i-vector, say), repeated to the length of the joined primary utterance; such a
            deserializer must follow the one it is joined to. One stream only: several are read by one
            deserializer each, joined by key (:meth:`per_stream`, which ``cntkio.HTKFeatureDeserializer`` calls
            when given several, as CNTK took them).
        prefix_path: CNTK's ``prefixPathInSCP`` (put in front of every physical path).
        precision: ``'float'`` (float32) or ``'double'`` (float64).
        max_errors: bad utterances (a range past the end of its file or reversed, an archive that cannot be
            opened or whose header is invalid) tolerated: skipped and counted. With 0 the first one raises a
            :class:`~cntkio.FormatError` naming the SCP file, its line and the utterance.
        chunk_frames: a new chunk starts when the current one holds more than this many frames.

    Keys are the logical names without their extension (text keys). Unranged entries (``name=path``) read the
    whole file, its frame count taken from its header. Every file must have the same kind (parmKind,
    dimension, period); each file's byte order is detected on its own. Files are read by offset (``pread``),
    decoded and expanded natively with the GIL released; at most a quarter of the process's open-file limit
    (up to 256) stays open, so a corpus of one file per utterance needs no raised limit.

    Example::

        features = HTKFeatureDeserializer(StreamDefs(feats=StreamDef(shape=40, scp="train.scp", context=(5, 5))))
        source = MinibatchSource(features, frame_mode=True)
    """

    @classmethod
    def per_stream(cls, streams: Any, **kwargs: Any) -> DeserializerGroup:
        """One deserializer per stream of ``streams`` (the other arguments shared), as a
        :class:`~cntkio.DeserializerGroup`, which :class:`~cntkio.MinibatchSource` takes as if they were listed one
        by one (joined by key, in order).

        Example::

            features = HTKFeatureDeserializer.per_stream(StreamDefs(
                mfcc=StreamDef(shape=13, scp="a.scp"), ivector=StreamDef(shape=100, scp="iv.scp", broadcast=True)))
        """
        return DeserializerGroup(cls(StreamDefs(**{name: d}), **kwargs) for name, d in iter_stream_defs(streams))

    def __init__(
        self,
        streams: Any,
        *,
        prefix_path: str | None = None,
        precision: str = "float",
        max_errors: int = 0,
        chunk_frames: int = DEFAULT_CHUNK_FRAMES,
        trace_level: int = 1,
    ):
        self._arguments = (
            (streams,),
            {
                "prefix_path": prefix_path,
                "precision": precision,
                "max_errors": max_errors,
                "chunk_frames": chunk_frames,
                "trace_level": trace_level,
            },
        )
        self.trace_level: int = int(trace_level)
        self._files = _OpenFiles(_open_file_limit())
        name = self._configure_feature_stream(streams, "HTK", "scp=PATH_OR_LIST", precision, max_errors, chunk_frames)
        if not self.scp_files:
            raise ConfigError(f"stream '{name}': scp lists no file")
        self.filename = self.scp_files[0]
        try:
            self._scp_fingerprint = [_file_fingerprint(path) for path in self.scp_files]
            listed, identities = read_whole(self.scp_files, lambda: parse_scp(self.scp_files, prefix_path=prefix_path))
            self.parsed_files = list(zip(self.scp_files, identities))
            self._build(listed)
        except BaseException:
            self.close()
            raise

    # --------------------------------------------------------------------------------- index
    def _build(self, scp: ScpIndex) -> None:
        self.duplicates = scp.duplicates
        count = len(scp)
        if count == 0:
            raise ConfigError(f"{', '.join(self.scp_files)}: no utterance listed")
        keep = np.ones(count, dtype=bool)
        used, first_use = np.unique(scp.path_ids, return_index=True)
        first_entry = np.full(len(scp.paths), -1, dtype=np.int64)
        first_entry[used] = first_use  # the first entry of each path
        # read each file's header; file_of[path_id] = its number among the readable files (-1: unusable)
        file_of = np.full(len(scp.paths), -1, dtype=np.int64)
        swapped: list[bool] = []
        samples_in: list[int] = []  # frames each file's header gives
        frames_in: list[int] = []  # frames each file really holds (fewer if it is truncated)
        surplus_in: list[int] = []  # bytes each file holds past the frames its header gives (> 0: nSamples too small)
        reference: tuple[HTKHeader, str] | None = None
        bad: dict[int, str] = {}  # entry -> why it cannot be read (reported in SCP order below)
        for path_id, opened in zip(used.tolist(), _opened(self._open, [scp.paths[p] for p in used.tolist()])):
            path = scp.paths[path_id]
            try:
                if isinstance(opened, BaseException):
                    raise opened
                data_file, header = opened
            except (OSError, FormatError) as error:
                reason = str(error) if isinstance(error, OSError) else f"{error.reason} ({error.location})"
                for i in np.flatnonzero(scp.path_ids == path_id).tolist():
                    bad[i] = f"cannot read HTK file '{path}': {reason}"
                keep[scp.path_ids == path_id] = False
                continue
            if reference is None:
                reference = (header, path)
                if self.trace_level >= 1:
                    logger.info("%s: HTK features of kind %s", self.filename, _describe_kind(header))
            elif header.kind != reference[0].kind:
                data_file.close()
                raise FormatError(
                    f"HTK kind {_describe_kind(header)} differs from {_describe_kind(reference[0])} of "
                    f"'{reference[1]}'; every file of one deserializer must have the same kind",
                    Location(path, 0, sequence_key=scp.keys.take(np.array([first_entry[path_id]]))[0]),
                )
            file_of[path_id] = self._files.add(data_file)
            swapped.append(header.big_endian != (sys.byteorder == "big"))
            samples_in.append(header.frames)
            frames_in.append(min(header.frames, max(0, (data_file.size - header.data_offset) // header.sample_size)))
            surplus_in.append(data_file.size - header.data_offset - header.frames * header.sample_size)
        if reference is None:
            for i in sorted(bad):
                self._bad(scp, i, bad[i])
            raise FormatError("no HTK file could be read", Location(self.filename, 0))
        self.header = reference[0]
        self._swap = np.array(swapped, dtype=np.uint8)
        self._configure_dimension(reference[0], reference[1])

        file_ids = file_of[scp.path_ids]
        starts = scp.starts.copy()
        ends = scp.ends.copy()
        samples = np.array(samples_in, dtype=np.int64)
        available = np.array(frames_in, dtype=np.int64)
        usable = file_ids >= 0
        unranged = usable & (starts < 0)
        reversed_range = usable & ~unranged & (ends < starts)
        starts[unranged] = 0
        ends[unranged] = samples[file_ids[unranged]] - 1
        safe_ids = np.where(usable, file_ids, 0)
        past_end = usable & ~reversed_range & (ends >= samples[safe_ids])
        truncated = usable & ~reversed_range & ~past_end & (ends >= available[safe_ids])
        empty = unranged & (ends < starts)  # an unranged file without frames
        surplus = np.array(surplus_in, dtype=np.int64)
        # the whole file is read by its header's frame count: a file holding more data than that count says is
        # damaged (or its header is), never read cut short
        longer = unranged & ~empty & (surplus[safe_ids] > 0)
        for i in np.flatnonzero(reversed_range | past_end | truncated | empty | longer).tolist():
            path = scp.paths[int(scp.path_ids[i])]
            n = int(samples[file_ids[i]])
            if reversed_range[i]:
                reason = f"SCP range [{starts[i]},{ends[i]}] of '{path}': start > end"
            elif empty[i]:
                reason = f"HTK file '{path}' holds no frame"
            elif longer[i]:
                claimed = n * self.header.sample_size
                reason = (
                    f"HTK file '{path}' holds {claimed + int(surplus[file_ids[i]])} bytes of frame data, more than "
                    f"its header gives (nSamples {n} x sampleSize {self.header.sample_size} = {claimed} bytes): "
                    f"read by its header it would be cut short; list it with a frame range to read part of it"
                )
            elif past_end[i]:
                reason = f"frame range [{starts[i]},{ends[i]}] is past the end of '{path}', which holds {n} frames"
            else:
                reason = (
                    f"frame range [{starts[i]},{ends[i]}] is past the end of the data of '{path}' (truncated: its "
                    f"header says {n} frames, {int(available[file_ids[i]])} are there)"
                )
            bad[i] = reason
        keep &= ~(reversed_range | past_end | truncated | empty | longer)
        lengths = ends - starts + 1
        if self.broadcast:
            for i in np.flatnonzero(keep & (lengths != 1)).tolist():
                raise FormatError(
                    f"stream '{self.stream_name}' has broadcast=True, so every SCP entry must hold exactly one "
                    f"frame; this one holds {lengths[i]}",
                    scp.location(i),
                )
        for i in sorted(bad):
            self._bad(scp, i, bad[i])

        too_long = keep & (lengths > (self.max_sequence_length or np.iinfo(np.int64).max))
        self.skipped_too_long = int(too_long.sum())
        if self.skipped_too_long:
            first = scp.keys.take(np.flatnonzero(too_long)[:SHOWN_KEYS])
            logger.warning(
                "%s: %d utterance(s) longer than max_sequence_length=%d frames skipped: %s%s",
                self.filename, self.skipped_too_long, self.max_sequence_length, ", ".join(first),
                ", ..." if self.skipped_too_long > len(first) else "",
            )  # fmt: skip
        keep &= ~too_long
        kept = np.flatnonzero(keep)
        if len(kept) == 0:
            raise ConfigError(f"{', '.join(self.scp_files)}: no usable utterance")
        self._file_ids = _narrow(file_ids[kept])
        self._starts = _narrow(starts[kept])
        lengths = lengths[kept]
        keys = scp.keys if len(kept) == count else scp.keys.subset(kept)
        self._index = SequenceIndex(_chunk_starts(lengths, self.chunk_frames), narrow_lengths(lengths), keys)

    def _open(self, path: str) -> tuple[DataFile, HTKHeader]:
        data_file = open_data_file(path, "HTK")
        try:
            return data_file, _header_of(data_file)
        except BaseException:
            data_file.close()
            raise

    def _bad(self, scp: ScpIndex, i: int, reason: str) -> None:
        location = scp.location(i)
        if self.errors.max_errors == 0:
            raise FormatError(reason, location)
        self.errors.add(("utterance", int(scp.source_ids[i]), int(scp.lines[i])), lambda: FormatError(reason, location))

    def _configure_dimension(self, header: HTKHeader, path: str) -> None:
        file_dim = header.dim
        left, right = context_window(self._config_dim, file_dim, self._context, self.stream_name, path)
        self.context = (left, right)
        self.frame_dim = file_dim
        width = file_dim * (1 + left + right)
        self.info = StreamInformation(
            self.stream_name, 0, "dense", self.dtype, (width,), defines_mb_size=self.defines_mb_size
        )
        self._infos = [self.info]

    # ------------------------------------------------------------------------------- protocol
    def identity(self) -> dict[str, Any]:
        """The index and where each utterance lies (its file's number and size, its first frame): SCP files name
        the HTK files by paths that a copy of the data elsewhere changes, and there may be 10^5 of them."""
        sizes = np.frombuffer(self._files._sizes, dtype=np.int64)
        return {**super().identity(), "layout": array_digest([self._file_ids, self._starts, sizes])}

    def fingerprint(self) -> list[Any]:
        """The class, the SCP files (names, sizes, modification times), and a digest of every HTK file's name,
        size and modification time."""
        digest = hashlib.sha256()
        for path in self._files.paths:
            digest.update(os.path.basename(path).encode("utf-8", "surrogateescape") + b"\0")
        digest.update(self._files.identities())
        scp = [part for entry in self._scp_fingerprint for part in entry]
        return [type(self).__name__, *scp, len(self._files.paths), digest.hexdigest()[:32]]

    @property
    def source_name(self) -> str:
        return self.filename

    def get_chunk(self, chunk_id: int) -> ParsedChunk:
        a, b = self._chunk_range(chunk_id)
        file_ids = self._file_ids[a:b]
        starts = self._starts[a:b].astype(np.int64)
        lengths = np.asarray(self._index.lengths[a:b], dtype=np.int64)
        offsets = np.zeros(b - a + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        # runs of utterances stored one after the other in the same file are read as one
        first = np.flatnonzero(
            np.concatenate(([True], (file_ids[1:] != file_ids[:-1]) | (starts[1:] != starts[:-1] + lengths[:-1])))
        )
        runs = _Runs(file_ids[first], starts[first], np.add.reduceat(lengths, first), a + first)
        left, right = self.context
        as_double = self.dtype == np.float64
        groups = runs.groups(FILES_PER_READ)
        if len(groups) == 1:
            values = self._read(runs, offsets, left, right, as_double)
        else:  # many files (one per utterance): read a few at a time, then apply the context window
            frames = np.concatenate([self._read(runs.part(r0, r1), None, 0, 0, False) for r0, r1 in groups])
            expand = left or right or as_double
            values = _native.htk_expand(frames, offsets, left, right, as_double) if expand else frames
        values.flags.writeable = False
        offsets.flags.writeable = False
        return ParsedChunk({self.stream_name: DenseStream(values, offsets)})

    def _read(self, runs: _Runs, offsets: np.ndarray | None, left: int, right: int, as_double: bool) -> np.ndarray:
        """The frames of ``runs`` (each run one sequence when ``offsets`` is None), expanded by the window; the
        files are open (pinned) only meanwhile."""
        used, local = np.unique(runs.files, return_inverse=True)
        ids = used.tolist()
        if offsets is None:
            offsets = np.concatenate(([0], np.cumsum(runs.frames)))
        files: list[DataFile] = []
        first_sequences = runs.sequences[np.unique(local, return_index=True)[1]].tolist()  # of each file read
        try:
            for file_id, sequence in zip(ids, first_sequences):
                files.append(self._acquire(file_id, sequence))
            try:
                wanted = []  # (remote objects: the runs' bytes, and headers, of every file fetched together)
                for j, data_file in enumerate(files):
                    if isinstance(data_file, RemoteDataFile):
                        mine, frame = local == j, self.header.sample_size
                        first = self.header.data_offset + runs.first_frames[mine].astype(np.int64) * frame
                        ends = first + runs.frames[mine].astype(np.int64) * frame
                        head = min(data_file.size, max(HEADER_STAGE, self.header.data_offset))  # (as _header_of)
                        header = [(0, head)] if self.header.compressed else []
                        wanted.append((data_file.object, header + list(zip(first.tolist(), ends.tolist()))))
                with remote.staged_together(wanted):
                    scale = bias = _NO_VECTORS
                    if self.header.compressed:  # each file's A/B vectors, read again with its header
                        headers = [_header_of(f) for f in files]
                        scale = np.stack([h.scale for h in headers])  # type: ignore[misc]
                        bias = np.stack([h.bias for h in headers])  # type: ignore[misc]
                    values, short = _native.htk_read(
                        np.array([f.fd for f in files], dtype=np.int32),
                        self._swap[used],
                        np.full(len(ids), self.header.data_offset, dtype=np.int64),
                        scale,
                        bias,
                        self.header.compressed,
                        self.frame_dim,
                        local.astype(np.int32),
                        runs.first_frames,
                        runs.frames,
                        offsets,
                        left,
                        right,
                        as_double,
                    )
            finally:  # after the read (one fstat a file): a change before or during it is seen, and explains errors
                for data_file, sequence in zip(files, first_sequences):
                    self._check_unchanged(data_file, sequence)
        finally:
            self._files.release(ids[: len(files)])
        if short is not None:  # cannot happen after the index checks unless the file changed without a new ctime
            run, offset = short
            raise FormatError(
                "truncated HTK file: it ended before the frames of this utterance",
                Location(
                    files[int(local[run])].path,
                    int(offset),
                    sequence_key=self._index.keys.take(np.array([runs.sequences[run]]))[0],
                ),
            )
        assert values is not None
        return values

    def _check_unchanged(self, data_file: DataFile, sequence: int) -> None:
        """Raises if an HTK file changed since it was indexed; the error names the first utterance read from it."""
        try:
            data_file.check_unchanged("indexed")
        except FormatError as error:
            key = self._index.keys.take(np.array([sequence]))[0]
            raise FormatError(error.reason, dataclasses.replace(error.location, sequence_key=key)) from None

    def _acquire(self, file_id: int, sequence: int) -> DataFile:
        """An HTK file a chunk reads; errors name the first utterance read from it."""
        try:
            return self._files.acquire(file_id)
        except (OSError, FormatError) as error:
            key = self._index.keys.take(np.array([sequence]))[0]
            path = self._files.paths[file_id]
            if isinstance(error, OSError):
                cause = getattr(error.__cause__, "errno", getattr(error, "errno", None))
                gone = cause in (errno.ENOENT, errno.EACCES, errno.ENOTDIR)
                reason = f"{error} (it could be read when it was indexed)" if gone else str(error)
                raise FormatError(reason, Location(path, 0, sequence_key=key)) from None
            raise FormatError(error.reason, dataclasses.replace(error.location, sequence_key=key)) from None

    def describe(self) -> dict[str, Any]:
        """Summary (for ``cntkio inspect``)."""
        return {
            "scp": list(self.scp_files),
            "files": len(self._files.paths),
            "utterances": self._index.num_sequences,
            "frames": int(np.asarray(self._index.lengths, dtype=np.int64).sum()),
            "chunks": self.num_chunks(),
            "kind": _describe_kind(self.header),
            "context": self.context,
            "broadcast": self.broadcast,
            "index_bytes": self._index.nbytes + self._file_ids.nbytes + self._starts.nbytes + self._swap.nbytes,
            "skipped_errors": self.errors.count,
            "skipped_too_long": self.skipped_too_long,
            "duplicates_dropped": 0 if self.duplicates is None else self.duplicates.entries,
        }

    def close(self) -> None:
        """Closes the files (reading a chunk afterwards raises)."""
        self._files.close()

    def __del__(self) -> None:
        files = getattr(self, "_files", None)
        if files is not None:
            files.close()

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickles as its arguments; the copy indexes the files again and refuses any that changed."""
        return pickled_as_arguments(self)


_NO_VECTORS = np.zeros((0, 0), dtype=np.float32)


def _narrow(values: np.ndarray) -> np.ndarray:
    """Non-negative int64 values as int32 when they fit."""
    if not len(values) or int(values.max()) < 2**31:
        return values.astype(np.int32)
    return values


def _file_fingerprint(path: str) -> list[Any]:
    if remote.is_remote(path):
        identity = read_identity(path)
        return [os.path.basename(path), identity.size, identity.inode]
    info = os.stat(checked_name(path, "SCP file"))
    return [os.path.basename(path), info.st_size, info.st_mtime_ns]


def _chunk_starts(lengths: np.ndarray, chunk_frames: int) -> np.ndarray:
    """Utterances in order; a new chunk starts when the current one already holds more than ``chunk_frames``."""
    starts = [0]
    filled = 0
    for i, length in enumerate(lengths.tolist()):
        if filled > chunk_frames:
            starts.append(i)
            filled = 0
        filled += length
    starts.append(len(lengths))
    return np.array(starts, dtype=np.int64)


__all__: Sequence[str] = ["HTKFeatureDeserializer"]
