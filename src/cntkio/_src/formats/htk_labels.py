"""HTK master label files (MLF) as a deserializer: frame labels as one-hot sparse samples (spec/htk-and-mlf.md §2).

The MLF files are parsed once, natively, into runs of states (:func:`cntkio._src.formats.mlf.parse_mlf`); only the
runs are kept (6 bytes a run, about 24 bytes an utterance plus its key). A chunk is expanded to one value per frame
only when it is parsed, vectorised (``np.repeat``), and dropped with it.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import numpy as np

from cntkio._src.common.arrays import narrow_lengths
from cntkio._src.common.errors import ConfigError, FormatError, Location
from cntkio._src.common.streams import StreamInformation, iter_stream_defs, parse_precision
from cntkio._src.formats import remote
from cntkio._src.formats.data_file import FileIdentity, checked_name, pickled_as_arguments, read_identity, read_whole
from cntkio._src.formats.error_ledger import ErrorLedger
from cntkio._src.formats.identity import array_digest
from cntkio._src.formats.mlf import InvalidEntry, MlfIndex, check_max_errors, parse_mlf, read_state_list
from cntkio._src.formats.protocol import IndexedDeserializer, SequenceIndex, SparseStream, StreamData

logger = logging.getLogger("cntkio")


#: Bytes a parsed frame takes besides its value: an int32 column index and an int64 row pointer.
_FRAME_OVERHEAD_BYTES = 12
DEFAULT_CHUNK_SIZE_IN_BYTES = 32 * 1024 * 1024
"""Default chunk size: 32 MiB of parsed labels, about 2 million frames (5.8 hours at 100 frames/s) in float32."""


def _paths(value: Any, what: str) -> list[str]:
    """One path (a string or path-like, never split on ':') or a list of them."""
    if isinstance(value, (str, os.PathLike)):
        return [os.fspath(value)]
    if isinstance(value, (list, tuple)) and value and all(isinstance(p, (str, os.PathLike)) for p in value):
        return [os.fspath(p) for p in value]
    raise ConfigError(f"{what} must be a path or a non-empty list of paths, got {value!r}")


def _stat(path: str) -> tuple[int, int]:
    if remote.is_remote(path):  # (size and version, for fingerprints)
        identity = read_identity(path)
        return identity.size, identity.mtime_ns
    try:
        info = os.stat(checked_name(path, "MLF file"))
    except OSError as e:
        raise FileNotFoundError(f"cannot open MLF file '{path}': {e.strerror}") from e
    return info.st_size, info.st_mtime_ns


class HTKMLFDeserializer(IndexedDeserializer):
    """Frame labels from HTK master label files (``cntk.io.HTKMLFDeserializer``).

    Args:
        label_mapping_file: the state list (one state name per line, its id is its position; spec §2.2), or
            ``None``: then every label line must be ``start end name class_id`` (4 columns) and the class id is
            used.
        streams: ``StreamDefs(labels=StreamDef(shape=NUM_STATES, mlf=PATH_OR_LIST))``, exactly one stream
            (``field`` must be None). ``mlf`` is one path (a string is always one path, ``:`` included — fix
            #15) or a list of paths, read in order as one MLF. ``shape`` is the label dimension: it must equal
            the number of states of the state list; without one, class ids must be below it. At most 65535.
            ``defines_mb_size`` is honoured.
        phone_boundaries: the first frame of every label segment (every label line) gets the value 2.0 instead
            of 1.0 (CTC training). As in CNTK, ``MinibatchSource(frame_mode=True)`` refuses such labels (the 2.0
            values would come through on isolated frames, where they mean nothing). (CNTK's ``phoneBoundaries=``
            spelling is translated by ``cntkio.HTKMLFDeserializer``, deprecated.)
        chunk_size_in_bytes: utterances are grouped, in MLF order, into chunks of about this many bytes of
            *parsed* labels (per frame: the value, a 4-byte column index and an 8-byte row pointer, so 16
            bytes in float32); an utterance is never split, so a longer one is a chunk of its own. This is what
            a chunk costs in memory when the window holds it. Default 32 MiB.
        precision: ``'float'`` (float32 values) or ``'double'``.
        max_errors: invalid MLF entries tolerated (see below): skipped and counted. With 0 (the default) the first
            one raises a :class:`~cntkio.FormatError` whose location names the MLF file, the 1-based line and the
            utterance (``sequence_key``); with N the first N are skipped and the next raises
            :class:`~cntkio.MaxErrorsExceeded` (a ``FormatError`` with that entry's location).
        trace_level: 0 silent; 1 (default) one warning when entries were skipped or keys duplicated.

    Sequences: one per kept MLF entry, in file order then line order, keyed by the entry's name (``"*/a.lab"``
    -> ``"a"``, directories kept; spec §2.1), as text keys, so they join with HTK features, CTF/CBF streams or
    plug-ins keyed by the same utterance names. A sequence's length is its number of label frames (the end of
    its last label line). Each frame is one sparse sample with one non-zero: its state.

    Invalid entries (ranges not contiguous or not starting at frame 0, no label lines, every label line empty
    so zero frames, an unquoted or unterminated header, an entry not ended by ``.``, an entry cut by the end of
    the file, and an entry with a bad label line: a state missing from the state list, a class id >= the
    dimension, end < start, a malformed line) are errors counted against ``max_errors``: with the default 0 the
    first raises, naming the file, line (and column) and utterance; tolerated ones are skipped. Entries whose
    key an earlier entry already had (in the same or an earlier file) are dropped, the first kept; they are not
    errors. Both are counted and reported once (``report()``, ``invalid``, ``duplicates``, ``duplicate_keys``;
    one warning with trace_level >= 1). A file without a ``#!MLF!#`` line raises whatever ``max_errors`` is.

    CNTK required the MLF deserializer to follow a feature deserializer; here it may also be read alone (the
    primary of a source), e.g. to inspect labels.

    Example::

        labels = HTKMLFDeserializer("state.list", StreamDefs(labels=StreamDef(shape=132, mlf="train.mlf")))
        source = MinibatchSource([features, labels], frame_mode=True)

    Pickles as its arguments: the copy parses the MLF files again, refusing files that changed meanwhile.
    """

    def __init__(
        self,
        label_mapping_file: str | os.PathLike[str] | None,
        streams: Any,
        phone_boundaries: bool = False,
        *,
        chunk_size_in_bytes: int = DEFAULT_CHUNK_SIZE_IN_BYTES,
        precision: str = "float",
        max_errors: int = 0,
        trace_level: int = 1,
    ):
        self._arguments = (
            (label_mapping_file, streams, phone_boundaries),
            {
                "chunk_size_in_bytes": chunk_size_in_bytes,
                "precision": precision,
                "max_errors": max_errors,
                "trace_level": trace_level,
            },
        )
        definitions = list(iter_stream_defs(streams))
        if len(definitions) != 1:
            names = ", ".join(name for name, _ in definitions) or "none"
            raise ConfigError(f"HTKMLFDeserializer takes exactly one stream, got {len(definitions)} ({names})")
        name, definition = definitions[0]
        if definition.field is not None:
            raise ConfigError(f"HTKMLFDeserializer: stream '{name}' must not set field (got {definition.field!r})")
        if definition.mlf is None:
            raise ConfigError(f"HTKMLFDeserializer: stream '{name}' needs mlf=PATH or a list of paths")
        if definition.shape is None:
            raise ConfigError(f"HTKMLFDeserializer: stream '{name}' needs shape=NUMBER_OF_STATES")
        dim = definition.dim()
        dtype = parse_precision(precision)
        if isinstance(chunk_size_in_bytes, bool) or not isinstance(chunk_size_in_bytes, (int, np.integer)):
            raise ConfigError(f"chunk_size_in_bytes must be a positive integer, got {chunk_size_in_bytes!r}")
        if chunk_size_in_bytes <= 0:
            raise ConfigError(f"chunk_size_in_bytes must be a positive integer, got {chunk_size_in_bytes!r}")
        self.max_errors = check_max_errors(max_errors)
        self.files = _paths(definition.mlf, f"stream '{name}': mlf")
        self.phone_boundaries = bool(phone_boundaries)
        self.supports_frame_mode = not self.phone_boundaries
        self.trace_level: int = int(trace_level)
        self.label_mapping_file = None if label_mapping_file is None else os.fspath(label_mapping_file)
        self._identities = [_stat(path) for path in self.files]

        states = None
        state_identity: list[FileIdentity | None] = []
        mapping = self.label_mapping_file
        if mapping is not None:
            states, state_identity = read_whole([mapping], lambda: read_state_list(mapping))
            if len(states) != dim:
                raise ConfigError(
                    f"stream '{name}': shape={dim}, but the state list '{self.label_mapping_file}' has "
                    f"{len(states)} states; the label dimension must be the number of states"
                )
            self._state_identity: tuple[int, int] | None = _stat(mapping)
        else:
            self._state_identity = None
        self.states = states

        self.labels: MlfIndex
        self.labels, identities = read_whole(
            self.files, lambda: parse_mlf(self.files, states, dim, max_errors=self.max_errors)
        )
        self.parsed_files = list(zip([*self.files, *([mapping] if mapping else [])], identities + state_identity))
        if len(self.labels) == 0:
            raise FormatError(
                f"no usable label entries in {len(self.files)} MLF file(s) ({self.labels.report()})",
                Location(self.files[0], 0),
            )
        self._info = StreamInformation(name, 0, "sparse", dtype, (dim,), definition.defines_mb_size, alias=name)
        self._infos = [self._info]
        self._index = self._build_index(int(chunk_size_in_bytes), dtype.itemsize + _FRAME_OVERHEAD_BYTES)
        if self.trace_level >= 1 and (self.labels.invalid or self.labels.duplicates):
            logger.warning("HTKMLFDeserializer: %s", self.labels.report())
        self.errors: ErrorLedger = ErrorLedger(self.max_errors, self.trace_level)  # (MinibatchSource.error_report)
        self.errors.add_reported([entry.error() for entry in self.labels.invalid], "invalid MLF entry")

    def _build_index(self, chunk_bytes: int, frame_bytes: int) -> SequenceIndex:
        """Chunks of consecutive entries: entry i goes to chunk ``bytes before it // chunk_bytes`` (renumbered
        without gaps), so a chunk holds about ``chunk_bytes`` of parsed labels and an entry is never split."""
        lengths = self.labels.lengths.astype(np.int64, copy=False)
        before = np.cumsum(lengths) - lengths
        bucket = (before * frame_bytes) // chunk_bytes
        first = np.flatnonzero(np.concatenate(([True], bucket[1:] != bucket[:-1])))
        starts = np.append(first, len(lengths)).astype(np.int64)
        self.labels.lengths = narrow_lengths(self.labels.lengths)  # one copy, shared with the index
        return SequenceIndex(starts, self.labels.lengths, self.labels.keys)

    # ------------------------------------------------------------------------------- protocol
    def get_chunk(self, chunk_id: int) -> dict[str, StreamData]:
        """The chunk's frames as one-hot CSR rows (value 1.0; 2.0 on the first frame of each label line with
        ``phone_boundaries``)."""
        a, b = self._chunk_range(chunk_id)
        labels = self.labels
        first_run, end_run = int(labels.run_offsets[a]), int(labels.run_offsets[b])
        counts = labels.run_counts[first_run:end_run]
        indices = np.repeat(labels.run_states[first_run:end_run].astype(np.int32), counts)
        frames = len(indices)
        values = np.ones(frames, dtype=self._info.dtype)
        if self.phone_boundaries:
            values[np.cumsum(counts, dtype=np.int64) - counts] = 2.0
        indptr = np.arange(frames + 1, dtype=np.int64)
        seq_offsets = np.zeros(b - a + 1, dtype=np.int64)
        np.cumsum(labels.lengths[a:b], out=seq_offsets[1:])
        for array in (values, indices, indptr, seq_offsets):
            array.flags.writeable = False
        return {self._info.name: SparseStream(values, indices, indptr, seq_offsets, self._info.shape[0])}

    # ------------------------------------------------------------------------------- identity
    def identity(self) -> dict[str, Any]:
        """The index and every entry's labels (state runs), by content: MLF files name their entries by patterns
        or paths that a copy of the data elsewhere may change."""
        runs = array_digest([self.labels.run_offsets, self.labels.run_states, self.labels.run_counts])
        return {**super().identity(), "options": {"phone_boundaries": self.phone_boundaries}, "labels": runs}

    def fingerprint(self) -> list[Any]:
        """The class, the MLF files' names, sizes and modification times (and the state list's)."""
        parts: list[Any] = [type(self).__name__]
        for path, (size, mtime) in zip(self.files, self._identities):
            parts += [os.path.basename(path), size, mtime]
        if self.label_mapping_file is not None and self._state_identity is not None:
            parts += [os.path.basename(self.label_mapping_file), *self._state_identity]
        return parts

    @property
    def source_name(self) -> str:
        """The first MLF file."""
        return self.files[0]

    @property
    def invalid(self) -> list[InvalidEntry]:
        """The entries left out (see :class:`cntkio._src.formats.mlf.InvalidEntry`)."""
        return self.labels.invalid

    @property
    def duplicates(self) -> int:
        """How many entries were dropped because an earlier entry had their key."""
        return self.labels.duplicates

    @property
    def duplicate_keys(self) -> list[str]:
        return self.labels.duplicate_keys

    def report(self) -> str:
        """What was read and left out, in one paragraph (what the warning says)."""
        return self.labels.report()

    def describe(self) -> dict[str, Any]:
        return {
            "files": list(self.files),
            "sequences": len(self.labels),
            "frames": int(self.labels.lengths.sum()),
            "runs": self.labels.num_runs,
            "chunks": self.num_chunks(),
            "index_bytes": self._index.nbytes + self.labels.nbytes,
            "invalid": len(self.labels.invalid),
            "duplicates": self.labels.duplicates,
        }

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickles as its arguments; the copy parses the files again and refuses any that changed."""
        return pickled_as_arguments(self)
