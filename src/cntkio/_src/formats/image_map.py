"""CNTK's image inputs as columns: ImageDeserializer map files (spec/image.md §1) and Base64ImageDeserializer files
(§2), scanned by the native scanners of src/native/image_index.cpp (pread in blocks, the GIL released); Python only
assembles the columns. Nothing per image is kept as a Python object: keys are :class:`NumericKeys` or
:class:`TextKeys`, paths and archives :class:`Texts` (distinct texts packed in one blob) with int32 ids.

Rules shared by both formats (where CNTK's behaviour is not kept, it says so):

* Lines end at ``\\n``. A UTF-8 byte order mark at the start of the file is skipped (it counts in byte offsets, not
  in columns). A blank line (empty, or only spaces, tabs, ``\\r``, ``\\v``, ``\\f``) is skipped but still counted:
  line numbers, and keys that are line indices, are physical. (CNTK fails on a blank map line; cntkio skips it, as
  it does blank CTF lines, fix 2 of the spec README.)
* Every error is a :class:`FormatError` naming the file, the byte offset, the 1-based line (CNTK's image messages
  count lines from 0), the 1-based column in characters and, where known, the sequence key.
* A class id (only read when ``label_dim`` is given) is strtoull's number, but it must be the whole field: optional
  leading whitespace and ``+``, ASCII digits, optional trailing spaces and ``\\r``. CNTK takes ``"3abc"`` as 3;
  cntkio reports it. A class id ``>= label_dim`` (or ``>= 2**64``) is an error. Without ``label_dim`` the label
  column must still be there and not be empty, but it is not read (``labels`` is all -1): there is no hidden label
  dimension (fix 20).
"""

from __future__ import annotations

import lzma
import operator
import os
import shutil
import stat
import tempfile
import threading
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from cntkio import _native
from cntkio._src.common.errors import ConfigError, FormatError, Location
from cntkio._src.common.keys import KeyColumn, NumericKeys, TextKeys
from cntkio._src.formats import remote
from cntkio._src.formats.data_file import (
    FileIdentity,
    RemoteDataFile,
    changes_since_pickled,
    check_open_file,
    refuse_remote,
    require_regular_file,
)

MULTI_VIEW_COPIES = 10  # sequences per map line with multiViewCrop (the 10 crops of Crop's multiview10)


class Texts:
    """Texts packed as UTF-8 bytes: ``blob[offsets[i]:offsets[i + 1]]`` is text ``i``. ``texts[i]`` is it as a
    ``str`` in which bytes that are not UTF-8 are lone surrogates (``surrogateescape``, as ``os`` functions take
    file names), ``texts.raw(i)`` as ``bytes``."""

    def __init__(self, blob: np.ndarray, offsets: np.ndarray):
        self.blob = blob  # uint8
        self.offsets = offsets  # int64, len + 1

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def raw(self, i: int) -> bytes:
        if not -len(self) <= i < len(self):
            raise IndexError(f"text index {i} out of range (0..{len(self) - 1})")
        i %= len(self)
        return bytes(self.blob[int(self.offsets[i]) : int(self.offsets[i + 1])])

    def __getitem__(self, i: int) -> str:
        return self.raw(operator.index(i)).decode("utf-8", "surrogateescape")

    def __iter__(self) -> Iterator[str]:
        return (self[i] for i in range(len(self)))

    def tolist(self) -> list[str]:
        return list(self)

    def __repr__(self) -> str:
        return f"Texts({len(self)} texts, {len(self.blob)} bytes)"


def _encode(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


def _label_dim(label_dim: int | None) -> int:
    """``label_dim`` as the native scanners take it (-1: no labels)."""
    if label_dim is None:
        return -1
    if isinstance(label_dim, bool):
        raise ConfigError(f"label_dim must be a positive integer or None, got {label_dim!r}")
    try:
        value = operator.index(label_dim)
    except TypeError:
        raise ConfigError(f"label_dim must be a positive integer or None, got {label_dim!r}") from None
    if value < 1 or value >= 2**63:
        raise ConfigError(f"label_dim must be a positive integer or None, got {label_dim!r}")
    return value


def _raise_fatal(file: str, fatal: tuple[str, int, int, int, bytes | None, bytes | None, int]) -> None:
    message, offset, line, column, detail, key, key_index = fatal
    if detail is not None:
        message = message.replace("{}", repr(detail.decode("utf-8", "surrogateescape")), 1)
    sequence_key: object = None
    if key is not None:
        sequence_key = key.decode("utf-8", "backslashreplace")
    elif key_index >= 0:
        sequence_key = key_index
    raise FormatError(message, Location(file, offset, line, column, sequence_key=sequence_key))


# ------------------------------------------------------------------------------------------------ image maps
@dataclass(frozen=True, eq=False)
class ImageMap:
    """The images of an ImageDeserializer map file, one row per map line, as columns.

    * ``keys``: :class:`NumericKeys` (int64) of the 0-based physical line index for a 2-column file (CNTK's key);
      :class:`TextKeys` of the key field for a 3-column file. A 3-column key stays text even when it looks like a
      number: the composite join compares numeric keys with text keys by their decimal text, so ``"7"`` meets 7
      (``"007"`` does not).
    * ``container_ids`` int32: -1 for a plain file, else the zip archive ``containers[container_ids[i]]``.
      ``paths[path_ids[i]]`` (``path_ids`` int32) is the plain file's path or the item's name inside the archive.
      ``paths`` and ``containers`` hold distinct texts (in first-seen order).
    * ``labels`` int64: the class id, -1 for every row when the map was parsed without ``label_dim``.
    * ``lines`` int32 (1-based) and ``offsets`` int64 (byte offset of the line): where each row was written.
    * ``views``: sequences per row, 1, or 10 with ``multi_view`` (CNTK's ``multiViewCrop``): sequence ``s`` is view
      ``s % views`` of row ``s // views`` (see :meth:`rows_of`, :meth:`views_of`); nothing is copied 10 times.

    Paths are kept as written (after ``...`` expansion); relative ones are relative to the working directory at
    parse time, ``cwd``, as CNTK opens them relative to its working directory. :meth:`file_path` and
    :meth:`container_path` give them resolved against ``cwd``, so a worker with another working directory opens
    the same files.
    """

    file: str
    directory: str  # what a leading "..." became
    cwd: str
    columns: int  # 2 or 3 (0 for a map without lines)
    keys: KeyColumn
    paths: Texts
    path_ids: np.ndarray  # int32
    containers: Texts
    container_ids: np.ndarray  # int32, -1: plain file
    labels: np.ndarray  # int64, -1 without label_dim
    lines: np.ndarray  # int32
    offsets: np.ndarray  # int64
    label_dim: int | None
    views: int

    def __len__(self) -> int:
        return len(self.path_ids)

    @property
    def num_sequences(self) -> int:
        """Sequences the map gives: rows x views."""
        return len(self) * self.views

    def rows_of(self, sequences: Any) -> Any:
        """The map row of each sequence index (an int or an integer array)."""
        return sequences // self.views

    def views_of(self, sequences: Any) -> Any:
        """The view id (0..views-1: the multiview10 crop) of each sequence index (an int or an integer array)."""
        return sequences % self.views

    def is_zip(self, row: int) -> bool:
        return bool(self.container_ids[row] >= 0)

    def name(self, row: int) -> str:
        """The image as the map names it (after ``...`` expansion): a path, or ``archive@item``."""
        path = self.paths[int(self.path_ids[row])]
        container = int(self.container_ids[row])
        return path if container < 0 else f"{self.containers[container]}@{path}"

    def file_path(self, row: int) -> str:
        """The absolute path of a plain image file (resolved against ``cwd``)."""
        if self.is_zip(row):
            raise ValueError(f"row {row} is an item of a zip archive: {self.name(row)}")
        path = self.paths[int(self.path_ids[row])]
        return path if remote.is_remote(path) else os.path.join(self.cwd, path)

    def item(self, row: int) -> str:
        """The name of a zipped image inside its archive."""
        if not self.is_zip(row):
            raise ValueError(f"row {row} is a plain file: {self.name(row)}")
        return self.paths[int(self.path_ids[row])]

    def container_path(self, container: int) -> str:
        """The absolute path of zip archive ``container`` (resolved against ``cwd``)."""
        refuse_remote(self.containers[container], "zip archives of images")
        return os.path.join(self.cwd, self.containers[container])

    def location(self, row: int) -> Location:
        """Where row ``row`` was written, with its key (for error messages)."""
        return Location(self.file, int(self.offsets[row]), int(self.lines[row]), 1, sequence_key=self.keys[row])


def _scan_source(path: str, scan: Callable[[int, int], _native.ImageMapScanResult]) -> _native.ImageMapScanResult:
    """Runs ``scan(fd, size)`` on the file, or on a copy of it when it is a pipe (read once), or on a remote object
    (fetched whole); anything else (a device, a directory) is refused before it is opened."""
    if remote.is_remote(path):
        listing = RemoteDataFile(path, "image map", allow_empty=True)
        try:
            with listing.staged([(0, listing.size)]):
                result = scan(listing.fd, listing.size)
            listing.check_unchanged("read")
            return result
        finally:
            listing.close()
    require_regular_file(path, "image map", pipe=True)
    with open(path, "rb") as file:
        info = os.fstat(file.fileno())
        if stat.S_ISREG(info.st_mode):
            return scan(file.fileno(), info.st_size)
        with tempfile.TemporaryFile() as copy:
            shutil.copyfileobj(file, copy)
            copy.flush()
            return scan(copy.fileno(), copy.tell())


def parse_image_map(
    path: str | os.PathLike[str], *, label_dim: int | None, multi_view: bool = False, block: int = 4 << 20
) -> ImageMap:
    """Parses an ImageDeserializer map file (spec/image.md §1) with the native scanner.

    Lines are ``path\\tlabel`` (2 columns; the key is the 0-based line index) or ``key\\tpath\\tlabel`` (3 columns).
    The first line decides the column count and every line must have the same (CNTK allows a mix; cntkio reports
    it, since a mix gives keys of two kinds). One ``\\r`` at the end of a line is dropped: it would end the label,
    which ignores it, so CRLF files work; a ``\\r`` anywhere else stays in its field. An empty key, path or label
    is an error, as is any other column count.

    A path is split at its first ``@`` into a zip archive and an item: the item is the text after the ``@`` minus
    its first byte (normally ``/``; CNTK drops one byte, whatever it is), with ``\\`` made ``/``; an empty archive or
    item is an error. A leading
    ``...`` of a plain path or of an archive becomes the map file's directory (``.`` when the map is given without
    one); the split comes first, so an ``@`` in that directory does no harm. A ``...`` elsewhere is kept.

    With ``label_dim`` every class id must be below it; without, labels are not read. ``multi_view`` makes every
    row 10 sequences (``views``). A map given as a pipe is read once. Example::

        images = parse_image_map("train_map.txt", label_dim=1000)
        archives = ZipArchives(images)
        archives.check(images)  # every zipped image is there (CNTK finds a missing one only when reading it)
        data = read_image_bytes(images, 0, archives)
    """
    file = os.fspath(path)
    dim = _label_dim(label_dim)
    directory = os.path.dirname(file) or "."
    columns = _scan_source(file, lambda fd, size: _native.image_map_scan(fd, size, _encode(directory), dim, block))
    if columns.fatal is not None:
        _raise_fatal(file, columns.fatal)
    keys: KeyColumn
    keys = TextKeys(columns.key_blob, columns.key_offsets) if columns.columns == 3 else NumericKeys(columns.key_index)
    return ImageMap(
        file=file,
        directory=directory,
        cwd=os.getcwd(),
        columns=int(columns.columns),
        keys=keys,
        paths=Texts(columns.path_blob, columns.path_offsets),
        path_ids=columns.path_ids,
        containers=Texts(columns.container_blob, columns.container_offsets),
        container_ids=columns.container_ids,
        labels=columns.labels,
        lines=columns.lines,
        offsets=columns.offsets,
        label_dim=None if dim < 0 else dim,
        views=MULTI_VIEW_COPIES if multi_view else 1,
    )


# what reading a zip item raises besides a missing name: I/O, a damaged archive, a damaged or cut compressed item
# (zlib, lzma, EOF), an unsupported compression, an encrypted item
_UNREADABLE_ITEM = (
    OSError, zipfile.BadZipFile, zlib.error, lzma.LZMAError, EOFError, NotImplementedError, RuntimeError,
)  # fmt: skip


class ZipArchives:
    """The zip archives of an image map, each opened once per process (``zipfile.ZipFile``, on first use).

    Picklable by path: a pickled copy holds the archive paths only, and opens them again where it is unpickled (in
    a worker); after a fork the child opens its own handles too. Reads may come from several threads.
    A missing or unreadable archive, or a missing item, is a :class:`FormatError` naming the map file, the line
    and the key of the image (fatal in CNTK).

    An archive is read through the table of items it had when it was first opened, so each one's
    :class:`~cntkio._src.formats.data_file.FileIdentity` then is kept (also in pickled copies and after a fork): an
    archive opened again must still have it, and :meth:`check_unchanged` (after a chunk's reads) refuses one
    changed since, even with its size and modification time put back.
    """

    def __init__(self, image_map: ImageMap):
        self.map_file = image_map.file
        self.names = image_map.containers.tolist()  # as written (for messages)
        self.paths = [image_map.container_path(c) for c in range(len(image_map.containers))]
        self._identities: dict[int, FileIdentity] = {}  # of each archive when first opened
        self._reset()

    def _reset(self) -> None:
        self._open: dict[int, zipfile.ZipFile] = {}
        self._pid = os.getpid()
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        return {"map_file": self.map_file, "names": self.names, "paths": self.paths, "_identities": self._identities}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset()

    def __enter__(self) -> ZipArchives:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Closes the archives this process opened (they are opened again when used)."""
        with self._lock:
            if self._pid == os.getpid():
                for archive in self._open.values():
                    archive.close()
            self._open.clear()

    def archive(self, container: int, location: Location | None = None) -> zipfile.ZipFile:
        """Archive ``container``, opened on first use in this process."""
        if self._pid != os.getpid():  # forked: the parent's handles share its file offsets
            self._reset()
        archive = self._open.get(container)
        if archive is not None:
            return archive
        with self._lock:
            archive = self._open.get(container)
            if archive is None:
                where = location or Location(self.map_file, 0)
                require_regular_file(self.paths[container], "zip archive", where)
                try:
                    archive = zipfile.ZipFile(self.paths[container])
                except (OSError, zipfile.BadZipFile) as error:
                    reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
                    raise FormatError(f"cannot open zip archive {self.names[container]!r}: {reason}", where) from error
                self._check_reopened(container, archive)
                self._open[container] = archive
        return archive

    def _check_reopened(self, container: int, archive: zipfile.ZipFile) -> None:
        """Records an archive's identity when first opened; refuses it opened again (in a worker) if it changed."""
        assert archive.fp is not None
        now = FileIdentity.of(os.fstat(archive.fp.fileno()))
        then = self._identities.setdefault(container, now)
        changes = changes_since_pickled(then, now)
        if changes:
            archive.close()
            raise FormatError(
                f"zip archive {self.names[container]!r} changed since it was first opened ({'; '.join(changes)}); "
                "build a new deserializer to read the new contents",
                Location(self.paths[container], 0),
            )

    def check_unchanged(self, containers: Iterable[int]) -> None:
        """Raises a :class:`FormatError` if one of the ``containers`` open in this process changed since it was
        first opened (one ``fstat`` each): called after reading their items."""
        if self._pid != os.getpid():  # forked and nothing read yet: the handles are the parent's
            return
        for container in containers:
            archive = self._open.get(container)
            if archive is not None and archive.fp is not None:
                check_open_file(archive.fp.fileno(), self.paths[container], self._identities[container], "opened")

    def _missing(self, container: int, item: str, location: Location | None) -> FormatError:
        return FormatError(
            f"image {item!r} is not in zip archive {self.names[container]!r}", location or Location(self.map_file, 0)
        )

    def read(self, container: int, item: str, location: Location | None = None) -> bytes:
        """The bytes of ``item`` of archive ``container``; ``location`` (the map line) goes into errors."""
        archive = self.archive(container, location)
        try:
            return archive.read(item)
        except KeyError:
            raise self._missing(container, item, location) from None
        except _UNREADABLE_ITEM as error:
            raise FormatError(
                f"cannot read image {item!r} of zip archive {self.names[container]!r}: {error}",
                location or Location(self.map_file, 0),
            ) from error

    def check(self, image_map: ImageMap) -> None:
        """Checks at index time that every archive opens and holds every item the map names; raises a
        :class:`FormatError` for the first row (in map order) that fails. The items of an archive are matched
        against its member names by the native key join (no Python per map row)."""
        zipped = np.flatnonzero(image_map.container_ids >= 0)
        if len(zipped) == 0:
            return
        containers = image_map.container_ids[zipped]
        order = np.argsort(containers, kind="stable")
        zipped, containers = zipped[order], containers[order]
        bounds = np.flatnonzero(np.diff(containers)) + 1
        first_bad = -1
        for rows in np.split(zipped, bounds):
            container = int(image_map.container_ids[rows[0]])
            try:
                archive = self.archive(container, image_map.location(int(rows[0])))
            except FormatError:
                bad = int(rows[0])
            else:
                ids = image_map.path_ids[rows]
                unique = np.unique(ids)
                names = [name.encode("utf-8", "surrogateescape") for name in archive.namelist()]
                match, _, _ = _native.join_keys(_subset(image_map.paths, unique), _packed(names), True, False)
                missing = unique[match < 0]
                if len(missing) == 0:
                    continue
                bad = int(rows[np.isin(ids, missing)].min())
            first_bad = bad if first_bad < 0 else min(first_bad, bad)
        if first_bad < 0:
            return
        container = int(image_map.container_ids[first_bad])
        location = image_map.location(first_bad)
        self.archive(container, location)  # raises for an archive that does not open
        raise self._missing(container, image_map.item(first_bad), location)


def _packed(texts: list[bytes]) -> tuple[int, np.ndarray, np.ndarray]:
    """Byte strings as a native text key column (2, blob, offsets)."""
    offsets = np.zeros(len(texts) + 1, dtype=np.int64)
    np.cumsum([len(t) for t in texts], out=offsets[1:])
    return 2, np.frombuffer(b"".join(texts), dtype=np.uint8), offsets


def _subset(texts: Texts, ids: np.ndarray) -> tuple[int, np.ndarray, np.ndarray]:
    """Texts ``ids`` of ``texts`` as a native text key column (2, blob, offsets), gathered with NumPy."""
    starts = texts.offsets[ids]
    lengths = texts.offsets[ids + 1] - starts
    offsets = np.zeros(len(ids) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    gather = np.repeat(starts - offsets[:-1], lengths) + np.arange(int(offsets[-1]), dtype=np.int64)
    return 2, np.ascontiguousarray(texts.blob[gather], dtype=np.uint8), offsets


def read_image_bytes(image_map: ImageMap, row: int, archives: ZipArchives | None = None) -> bytes:
    """The encoded bytes of image ``row``: a plain file (resolved against the map's ``cwd``), or an item of a zip
    archive (read through ``archives``, required then). A file that cannot be read is a :class:`FormatError`
    (fatal in CNTK: "Cannot open file")."""
    container = int(image_map.container_ids[row])
    if container >= 0:
        if archives is None:
            raise ValueError(f"row {row} is in zip archive {image_map.containers[container]!r}: pass ZipArchives")
        return archives.read(container, image_map.item(row), image_map.location(row))
    path = image_map.file_path(row)
    if remote.is_remote(path):  # one ranged read of the whole object, retried (read whole and current, as a file)
        try:
            return remote.read_object(path)
        except OSError as error:
            name = image_map.paths[int(image_map.path_ids[row])]
            raise FormatError(f"cannot read image {name!r}: {error}", image_map.location(row)) from error
    require_regular_file(path, "image file", image_map.location(row))  # a FIFO would hang, /dev/zero never end
    try:
        return _native.read_file(os.fsencode(path))
    except OSError as error:
        require_regular_file(path, "image file", image_map.location(row))  # replaced by a FIFO or device since
        name = image_map.paths[int(image_map.path_ids[row])]
        raise FormatError(
            f"cannot open image file {name!r}: {error.strerror or error}", image_map.location(row)
        ) from error


# ------------------------------------------------------------------------------------------------ base64 files
@dataclass(frozen=True, eq=False)
class Base64Index:
    """The sequences of a Base64ImageDeserializer file, one per line, as columns.

    * ``keys``: without keys (2 fields), :class:`NumericKeys` (int64) of the 0-based physical line index; with keys,
      :class:`NumericKeys` of their values (int64, or uint64 when one is 2^63 or more) when every key is 1 to 20
      ASCII digits that fit in 64 bits (``"007"`` is 7), else :class:`TextKeys`.
    * ``labels`` int64 (-1 for every row without ``label_dim``).
    * ``payload_offsets`` / ``payload_lengths`` int64: the byte range of the base64 field (up to the ``\\n``; a
      trailing ``\\r`` is in it, the decoder drops it). Decode with :func:`decode_base64_batch` or
      :func:`decode_base64_image_bytes`.
    * ``lines`` int32 (1-based) and ``offsets`` int64 (byte offset of the line).
    """

    file: str
    has_keys: bool
    keys: KeyColumn
    labels: np.ndarray
    payload_offsets: np.ndarray
    payload_lengths: np.ndarray
    lines: np.ndarray
    offsets: np.ndarray
    label_dim: int | None

    def __len__(self) -> int:
        return len(self.lines)

    def location(self, row: int) -> Location:
        """Where sequence ``row``'s base64 data starts (for error messages: a payload that does not decode)."""
        offset = int(self.payload_offsets[row])
        column = offset - int(self.offsets[row]) + 1  # the fields before the payload are ASCII in practice
        return Location(self.file, offset, int(self.lines[row]), column, sequence_key=self.keys[row])

    def decode_rows(self, fd: int, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The payloads of ``rows`` decoded in one native call (see :func:`decode_base64_batch`)."""
        rows = np.asarray(rows, dtype=np.int64)
        return decode_base64_batch(fd, self.payload_offsets[rows], self.payload_lengths[rows])


def index_base64(
    path: str | os.PathLike[str], *, label_dim: int | None, block: int = 4 << 20, fd: int | None = None
) -> Base64Index:
    """Indexes a Base64ImageDeserializer file (spec/image.md §2) with the native scanner: one pass, pread in blocks,
    the GIL released; the payloads are not read into memory.

    Lines are ``label\\tbase64`` or ``key\\tlabel\\tbase64``; the first line decides which (3 fields: keys), and
    every line must have as many fields. An empty key or label is an error; an empty payload is not (it fails to
    decode later, an invalid sequence as in CNTK). Two consecutive lines with the same key are an error: CNTK's
    CTF indexer would make them one sequence of two images, which an image stream cannot deliver (a repeat that is
    not consecutive is a duplicate key, left to the join). The file must be a regular file (it is read again by
    offset when decoding). ``fd``: the file already open (as the reader that decodes it has it), read instead of
    opening ``path`` again.
    """
    file = os.fspath(path)
    dim = _label_dim(label_dim)
    if fd is not None:
        columns = _native.base64_index_scan(fd, os.fstat(fd).st_size, dim, block)
    else:
        require_regular_file(file, "Base64 image file")  # read by offset; opening a FIFO would wait
        with open(file, "rb") as handle:
            columns = _native.base64_index_scan(handle.fileno(), os.fstat(handle.fileno()).st_size, dim, block)
    if columns.fatal is not None:
        _raise_fatal(file, columns.fatal)
    keys: KeyColumn
    if columns.numeric_keys:
        values = columns.key_values
        if len(values) == 0 or int(values.max()) < 2**63:
            values = values.view(np.int64)
        keys = NumericKeys(values)
    else:
        keys = TextKeys(columns.key_blob, columns.key_offsets)
    return Base64Index(
        file=file,
        has_keys=bool(columns.has_keys),
        keys=keys,
        labels=columns.labels,
        payload_offsets=columns.payload_offsets,
        payload_lengths=columns.payload_lengths,
        lines=columns.lines,
        offsets=columns.offsets,
        label_dim=None if dim < 0 else dim,
    )


def decode_base64(data: bytes) -> bytes | None:
    """``data`` base64-decoded, or None when it is invalid. The standard alphabet with ``=`` padding; trailing bytes
    that are neither (such as ``\\r``) are dropped first; then the length must be a multiple of 4 and ``=`` may only
    be the last one or two bytes. Equals ``base64.b64decode(data, validate=True)`` on what it accepts."""
    return _native.base64_decode(bytes(data))


def decode_base64_image_bytes(fd: int, offset: int, length: int) -> bytes | None:
    """Bytes ``[offset, offset + length)`` of the file open as ``fd`` decoded as :func:`decode_base64` does (read
    and decoded natively, the GIL released), or None when invalid. ``EOFError`` (``_native.ShortRead``) when the
    file ends before the range does."""
    return _native.base64_decode_file(fd, offset, length)


def decode_base64_batch(fd: int, offsets: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Many payloads of the file open as ``fd`` (a chunk's rows) decoded in one native call, the GIL released.
    Returns ``(blob uint8, out_offsets int64 (n + 1), ok uint8)``: payload ``i`` decoded is
    ``blob[out_offsets[i]:out_offsets[i + 1]]`` when ``ok[i]``, empty otherwise. Rows in file order are read with
    one pread."""
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    lengths = np.ascontiguousarray(lengths, dtype=np.int64)
    return _native.base64_decode_batch(fd, offsets, lengths)
