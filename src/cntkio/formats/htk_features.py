"""HTK feature deserializer: utterances listed in SCP files, read by ``pread`` from HTK archives (spec §1).

The index is built from the SCP file(s) (:func:`cntkio.formats.scp.parse_scp`) and the header of every distinct
physical file (each opened once and kept open). Frames are read by offset when a chunk is parsed, decoded with
NumPy (byte swap, or ``(short + B) / A`` for compressed ``_C`` data) and the context window is applied to the
whole chunk with one gather.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..arrays import narrow_lengths
from ..deserializer import DenseStream, IndexedDeserializer, ParsedChunk, SequenceIndex
from ..errors import ConfigError, ErrorBudget, FormatError, Location
from ..htk import HTKHeader, read_header_at
from ..keys import TextKeys
from ..streams import StreamInformation, iter_stream_defs, parse_precision
from .data_file import DataFile, FileBacked
from .scp import ScpIndex, parse_scp

logger = logging.getLogger("cntkio")

DEFAULT_CHUNK_FRAMES = 90000
SHOWN_KEYS = 5


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


def _describe_kind(header: HTKHeader) -> str:
    return (
        f"{header.base_kind}{header.qualifiers} (parmKind {header.parm_kind:#o}), dim {header.dim}, "
        f"period {header.sample_period}"
    )


class HTKFeatureDeserializer(FileBacked, IndexedDeserializer):
    """Reads HTK features of utterances listed in SCP files, one stream (``cntk.io.HTKFeatureDeserializer``).

    Args:
        streams: ``StreamDefs(name=StreamDef(shape=DIM, scp=PATH_OR_LIST, context=(LEFT, RIGHT)))`` with exactly
            one stream. ``DIM`` is the per-frame dimension and must equal the files' (with ``context=None``, a
            ``DIM`` that is an odd multiple ``w`` of the file's dimension selects the window ``(w//2, w//2)``,
            as CNTK inferred it). Output frames hold ``DIM * (1 + LEFT + RIGHT)`` values: frames
            ``t-LEFT .. t+RIGHT``, edge frames repeated. ``max_sequence_length`` (default: no limit):
            longer utterances are skipped (reported). ``defines_mb_size`` is passed on.
        prefix_path: CNTK's ``prefixPathInSCP`` (put in front of every physical path).
        precision: ``'float'`` (float32) or ``'double'`` (float64).
        max_errors: bad utterances (a range past the end of its file, an archive that cannot be opened or whose
            header is invalid) tolerated: skipped and counted. With 0 the first one raises a
            :class:`~cntkio.FormatError` naming the SCP file, its line and the utterance.
        chunk_frames: a new chunk starts when the current one holds more than this many frames.

    Keys are the logical names without their extension (text keys). Unranged entries (``name=path``) read the
    whole file, its frame count taken from its header. Every file must have the same kind (parmKind,
    dimension, period).

    Example::

        features = HTKFeatureDeserializer(StreamDefs(feats=StreamDef(shape=40, scp="train.scp", context=(5, 5))))
        source = MinibatchSource(features, frame_mode=True)
    """

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
        self.trace_level = int(trace_level)
        self._files: list[DataFile] = []
        definitions = list(iter_stream_defs(streams))
        if len(definitions) != 1:
            raise ConfigError(
                f"HTKFeatureDeserializer reads one stream, got {len(definitions)} "
                f"({', '.join(n for n, _ in definitions) or 'none'}); pass one deserializer per stream for now"
            )
        self.stream_name, definition = definitions[0]
        name = self.stream_name
        if definition.field is not None:
            raise ConfigError(f"stream '{name}': field must be None for HTK features")
        if definition.broadcast:
            raise ConfigError(f"stream '{name}': broadcast=True (expandToUtterance) is not supported yet")
        if definition.is_sparse:
            raise ConfigError(f"stream '{name}': HTK features are dense")
        if not definition.scp:
            raise ConfigError(f"stream '{name}': scp=PATH_OR_LIST is required")
        if definition.shape is None:
            raise ConfigError(f"stream '{name}': shape (the per-frame dimension) is required")
        self._config_dim = definition.dim()
        self._context = _context(definition.context, name)
        self.dtype = parse_precision(precision)
        if chunk_frames < 1:
            raise ConfigError(f"chunk_frames must be >= 1, got {chunk_frames}")
        self.chunk_frames = int(chunk_frames)
        limit = definition.max_sequence_length
        self.max_sequence_length = None if limit is None else int(limit)
        self.defines_mb_size = bool(definition.defines_mb_size)
        self.errors = ErrorBudget(int(max_errors), self.trace_level)
        scp = definition.scp
        self.scp_files = [os.fspath(scp)] if isinstance(scp, (str, os.PathLike)) else [os.fspath(s) for s in scp]
        if not self.scp_files:
            raise ConfigError(f"stream '{name}': scp lists no file")
        self.filename = self.scp_files[0]
        try:
            self._scp_fingerprint = [_file_fingerprint(path) for path in self.scp_files]
            self._build(parse_scp(self.scp_files, prefix_path=prefix_path))
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
        # open each file, read its header; file_of[path_id] = position in self._files (-1: unusable)
        file_of = np.full(len(scp.paths), -1, dtype=np.int64)
        headers: list[HTKHeader] = []
        frames_in: list[int] = []  # frames each file really holds (nSamples, or fewer if truncated)
        samples_in: list[int] = []
        reference: tuple[HTKHeader, str] | None = None
        bad: dict[int, str] = {}  # entry -> why it cannot be read (reported in SCP order below)
        for path_id in used.tolist():
            path = scp.paths[path_id]
            try:
                data_file, header = self._open(path)
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
            file_of[path_id] = len(self._files)
            self._files.append(data_file)
            headers.append(header)
            samples_in.append(header.frames)
            frames_in.append(min(header.frames, max(0, (data_file.size - header.data_offset) // header.sample_size)))
        if reference is None:
            for i in sorted(bad):
                self._bad(scp, i, bad[i])
            raise FormatError("no HTK file could be read", Location(self.filename, 0))
        self.header = reference[0]
        self._headers = headers
        self._configure_dimension(reference[0], reference[1])

        file_ids = file_of[scp.path_ids]
        starts = scp.starts.copy()
        ends = scp.ends.copy()
        samples = np.array(samples_in, dtype=np.int64)
        available = np.array(frames_in, dtype=np.int64)
        usable = file_ids >= 0
        unranged = usable & (starts < 0)
        starts[unranged] = 0
        ends[unranged] = samples[file_ids[unranged]] - 1
        safe_ids = np.where(usable, file_ids, 0)
        past_end = usable & (ends >= samples[safe_ids])
        truncated = usable & ~past_end & (ends >= available[safe_ids])
        empty = usable & (ends < starts)  # an unranged empty file (a ranged start > end is refused by parse_scp)
        for i in np.flatnonzero(past_end | truncated | empty).tolist():
            path = scp.paths[int(scp.path_ids[i])]
            n = int(samples[file_ids[i]])
            if empty[i]:
                reason = f"HTK file '{path}' holds no frame"
            elif past_end[i]:
                reason = f"frame range [{starts[i]},{ends[i]}] is past the end of '{path}', which holds {n} frames"
            else:
                reason = (
                    f"frame range [{starts[i]},{ends[i]}] is past the end of the data of '{path}' (truncated: its "
                    f"header says {n} frames, {int(available[file_ids[i]])} are there)"
                )
            bad[i] = reason
        keep &= ~(past_end | truncated | empty)
        for i in sorted(bad):
            self._bad(scp, i, bad[i])

        lengths = ends - starts + 1
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
        self._file_ids = file_ids[kept].astype(np.int32)
        self._starts = starts[kept]
        lengths = lengths[kept]
        keys = scp.keys if len(kept) == count else TextKeys.from_strings(scp.keys.take(kept))
        self._index = SequenceIndex(_chunk_starts(lengths, self.chunk_frames), narrow_lengths(lengths), keys)

    def _open(self, path: str) -> tuple[DataFile, HTKHeader]:
        data_file = DataFile(path, "HTK")
        try:
            return data_file, read_header_at(data_file.fd, path)
        except BaseException:
            data_file.close()
            raise

    def _bad(self, scp: ScpIndex, i: int, reason: str) -> None:
        location = scp.location(i)
        if self.errors.max_errors == 0:
            raise FormatError(reason, location)
        self.errors.add(("utterance", int(scp.source_ids[i]), int(scp.lines[i])), lambda: FormatError(reason, location))

    def _configure_dimension(self, header: HTKHeader, path: str) -> None:
        dim, file_dim, name = self._config_dim, header.dim, self.stream_name
        if self._context is not None:
            if dim != file_dim:
                raise ConfigError(
                    f"stream '{name}': shape {dim} differs from the feature dimension {file_dim} of '{path}' "
                    f"(shape is the per-frame dimension; the context window multiplies it)"
                )
            left, right = self._context
        elif dim == file_dim:
            left = right = 0
        elif dim % file_dim == 0 and (dim // file_dim) % 2 == 1:
            window = dim // file_dim
            left = right = window // 2
            logger.info(
                "stream '%s': shape %d is %d frames of the %d-dim features of '%s': context window (%d, %d) inferred",
                name, dim, window, file_dim, path, left, right,
            )  # fmt: skip
        else:
            raise ConfigError(
                f"stream '{name}': shape {dim} differs from the feature dimension {file_dim} of '{path}' (and is "
                "not an odd multiple of it, which would select a context window)"
            )
        self.context = (left, right)
        self.frame_dim = file_dim
        self.info = StreamInformation(
            name, 0, "dense", self.dtype, (file_dim * (1 + left + right),), defines_mb_size=self.defines_mb_size
        )
        self._infos = [self.info]

    # ------------------------------------------------------------------------------- protocol
    def fingerprint(self) -> list[Any]:
        files = [part for data_file in self._files for part in data_file.fingerprint()]
        return [type(self).__name__, *[p for f in self._scp_fingerprint for p in f], *files]

    @property
    def source_name(self) -> str:
        return self.filename

    def get_chunk(self, chunk_id: int) -> ParsedChunk:
        a, b = self._chunk_range(chunk_id)
        file_ids = self._file_ids[a:b]
        starts = self._starts[a:b]
        lengths = np.asarray(self._index.lengths[a:b], dtype=np.int64)
        offsets = np.zeros(b - a + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        for file_id in np.unique(file_ids).tolist():
            self._files[file_id].check_unchanged("indexed")
        frames = np.empty((int(offsets[-1]), self.frame_dim), dtype=np.float32)
        # runs of utterances stored one after the other in the same file are read with one pread
        breaks = np.flatnonzero((file_ids[1:] != file_ids[:-1]) | (starts[1:] != starts[:-1] + lengths[:-1])) + 1
        bounds = [0, *breaks.tolist(), b - a]
        for first, last in zip(bounds[:-1], bounds[1:]):
            self._read_run(int(file_ids[first]), int(starts[first]), frames[offsets[first] : offsets[last]], a + first)
        values = self._apply_context(frames, lengths, offsets)
        if values.dtype != self.dtype:
            values = values.astype(self.dtype)
        return ParsedChunk({self.stream_name: DenseStream(values, offsets)})

    def _read_run(self, file_id: int, start: int, out: np.ndarray, sequence: int) -> None:
        data_file, header = self._files[file_id], self._headers[file_id]
        count = out.shape[0]
        offset = header.data_offset + start * header.sample_size
        size = count * header.sample_size
        raw = os.pread(data_file.fd, size, offset)
        if len(raw) < size:  # cannot happen after the index checks unless the file changed under the same mtime
            raise FormatError(
                f"truncated HTK file: {size} bytes needed from offset {offset}, {len(raw)} read",
                Location(
                    data_file.path, offset + len(raw), sequence_key=self._index.keys.take(np.array([sequence]))[0]
                ),
            )
        stored = np.frombuffer(raw, dtype=header.byte_order + ("i2" if header.compressed else "f4"))
        out[...] = stored.reshape(count, header.dim)
        if header.compressed:
            assert header.scale is not None and header.bias is not None
            out += header.bias
            out /= header.scale

    def _apply_context(self, frames: np.ndarray, lengths: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        left, right = self.context
        if left == 0 and right == 0:
            return frames
        total = frames.shape[0]
        first = np.repeat(offsets[:-1], lengths)
        last = np.repeat(offsets[1:] - 1, lengths)
        window = np.arange(total, dtype=np.int64)[:, None] + np.arange(-left, right + 1, dtype=np.int64)[None, :]
        np.clip(window, first[:, None], last[:, None], out=window)
        return frames[window].reshape(total, -1)

    def describe(self) -> dict[str, Any]:
        """Summary (for ``cntkio inspect``)."""
        return {
            "scp": list(self.scp_files),
            "files": len(self._files),
            "utterances": self._index.num_sequences,
            "frames": int(np.asarray(self._index.lengths, dtype=np.int64).sum()),
            "chunks": self.num_chunks(),
            "kind": _describe_kind(self.header),
            "context": self.context,
            "skipped_errors": self.errors.count,
            "skipped_too_long": self.skipped_too_long,
            "duplicates_dropped": 0 if self.duplicates is None else self.duplicates.entries,
        }


def _file_fingerprint(path: str) -> list[Any]:
    info = os.stat(path)
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
