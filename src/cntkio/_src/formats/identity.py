"""What a checkpoint says about the data it was taken on: an identity by content, not by place or time.

A checkpoint must restore on another node's copy of the same data (new paths, new modification times, renamed
files) and be refused on other data or with another configuration that shapes the order, naming what differs.
Each deserializer answers :meth:`~cntkio.Deserializer.identity`, a small JSON dict:

* ``kind``: the format (a plug-in's module and class);
* ``options``: the format's options that shape its index (which streams, the chunk size, ...);
* ``files`` (file formats): one entry per file, in order: ``{"name", "bytes", "digest"}`` — the digest covers the
  file's size, :data:`SAMPLED_RANGES` ranges of :data:`RANGE_BYTES` bytes spread evenly over it (the whole file
  when it is smaller) and what the index knows of the file's layout (e.g. each sequence's byte count). More than
  :data:`LISTED_FILES` files are listed as that many groups of consecutive files (``"first"``, ``"files"``);
* ``index``: sequences and chunks, and a digest of the chunk boundaries, the lengths and the keys.

Names are shown in messages but never compared: a renamed or moved copy restores. Index arrays are digested with
CRC-32C per array (native, a few GB/s, no per-sequence Python) inside a SHA-256 of their types and shapes; the
sampled bytes with SHA-256: a few ms per million sequences and a fixed number of small reads per file, made once
per deserializer when a source opens (:func:`identity_of`). A format with an index cache makes both digests when it
builds the index and keeps them in the cache, valid exactly as long as the cached index (the same file by inode,
size and times): after a warm open the identity only checks each file unchanged. What the identity cannot see:
a same-size edit of a large file that keeps every sequence's byte count, length and key and falls outside the
sampled ranges (on the node that indexed the file, reading detects any in-place rewrite by its change time).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from cntkio import _native
from cntkio._src.common.keys import KeyColumn, RangeKeys

if TYPE_CHECKING:
    from cntkio._src.formats.data_file import DataFile

SAMPLED_RANGES = 65  # ranges read per file (an odd count: the first, the middle and the last bytes are among them)
RANGE_BYTES = 4096  # bytes per range; files up to SAMPLED_RANGES * RANGE_BYTES are read whole
LISTED_FILES = 256  # files listed one by one; more are listed as this many groups (the state stays small)
DIGEST_CHARS = 16
DIGEST_SCHEME = 1  # how the digests are made; an index cache keeps digests of this scheme (bump when they change)


def _hex(digest: Any) -> str:
    return str(digest.hexdigest()[:DIGEST_CHARS])


def array_digest(items: Iterable[np.ndarray | bytes | str | int]) -> str:
    """A digest of arrays (their dtype, shape and the CRC-32C of their bytes), bytes and scalars, in order."""
    outer = hashlib.sha256()
    for item in items:
        if isinstance(item, np.ndarray):
            crc = _native.crc32c(np.ascontiguousarray(item).reshape(-1).view(np.uint8))
            outer.update(f"a{item.dtype.str}{item.shape}:{crc};".encode())
        elif isinstance(item, bytes):
            outer.update(b"b%d:" % len(item) + item)
        else:
            outer.update(f"s{item!r};".encode())
    return _hex(outer)


def key_parts(keys: KeyColumn) -> list[np.ndarray | bytes | str | int]:
    """A key column as digestible parts: its native form (integers, or UTF-8 texts and their offsets); a range of
    numbers as its bounds."""
    if isinstance(keys, RangeKeys):
        return ["range", keys.first, len(keys)]
    kind, values, offsets = keys.native()
    return [kind, values] if offsets is None else [kind, values, offsets]


def index_digest(deserializer: Any) -> str:
    """The digest of a deserializer's chunk boundaries, lengths and keys, computed once and kept (in its
    ``_cntkio_index_digest``). A format with an index cache computes it when it builds the index, keeps it in the
    cache (:data:`DIGEST_SCHEME`) and sets it when it loads the index from there, so a warm open does not digest."""
    attributes = getattr(deserializer, "__dict__", {})
    digest: str | None = attributes.get("_cntkio_index_digest")
    if digest is None:
        index = deserializer.sequence_index()
        digest = array_digest([np.asarray(index.chunk_starts), np.asarray(index.lengths), *key_parts(index.keys)])
        attributes["_cntkio_index_digest"] = digest
    return digest


def index_identity(deserializer: Any, digest: str | None = None) -> dict[str, Any]:
    """Sequences and chunks of a deserializer's index, and a digest of its chunk boundaries, lengths and keys
    (:func:`index_digest`, or ``digest`` when the caller has one that determines them, e.g. its shards')."""
    index = deserializer.sequence_index()
    return {
        "sequences": int(index.num_sequences),
        "chunks": len(index.chunk_starts) - 1,
        "digest": index_digest(deserializer) if digest is None else digest,
    }


def file_entry(
    data_file: DataFile, layout: Sequence[np.ndarray | bytes | str | int] = (), known: str | None = None
) -> dict[str, Any]:
    """One file's entry: its base name (shown, not compared), size and a digest of sampled bytes (read with
    ``pread``, or by range from a remote object: the same digest for a local copy and the bucket) and of ``layout``
    (what the index knows of where the file's sequences lie). The file must be as it was indexed
    (:meth:`DataFile.check_unchanged`: its bytes are then those the index describes). ``known``: the
    digest made so before, when the file was indexed (kept in an index cache beside the index, and valid exactly as
    long as it: the cache is used only for the file it was built from, by inode, size and times); then nothing is
    read."""
    data_file.check_unchanged("indexed")
    size = data_file.size
    name = os.path.basename(data_file.path)
    if known is not None:
        return {"name": name, "bytes": int(size), "digest": known}
    digest = hashlib.sha256(b"%d;" % size)
    if size <= SAMPLED_RANGES * RANGE_BYTES:
        ranges = [(0, size)]
    else:
        starts = np.linspace(0, size - RANGE_BYTES, SAMPLED_RANGES).astype(np.int64).tolist()
        ranges = [(start, start + RANGE_BYTES) for start in starts]
    for part in _read(data_file, ranges):
        digest.update(part)
    if layout:
        digest.update(array_digest(layout).encode())
    return {"name": name, "bytes": int(size), "digest": _hex(digest)}


def _read(data_file: DataFile, ranges: list[tuple[int, int]]) -> list[bytes]:
    """The sampled ranges' bytes (a remote object's fetched together)."""
    return data_file.read_ranges(ranges)


def listed(files: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """File entries as a checkpoint keeps them: one by one, or :data:`LISTED_FILES` groups of consecutive files
    (each naming its first and last file) when there are more."""
    if len(files) <= LISTED_FILES:
        return files
    bounds = np.linspace(0, len(files), LISTED_FILES + 1).astype(np.int64).tolist()
    groups = []
    for a, b in itertools.pairwise(bounds):
        members = files[a:b]
        groups.append(
            {
                "name": f"{members[0]['name']} ... {members[-1]['name']}",
                "first": a,
                "files": b - a,
                "bytes": sum(int(f["bytes"]) for f in members),
                "digest": _hex(hashlib.sha256(" ".join(f"{f['bytes']}:{f['digest']}" for f in members).encode())),
            }
        )
    return groups


def identity_of(deserializer: Any) -> dict[str, Any]:
    """``deserializer.identity()`` as plain JSON values, computed once per deserializer (immutable once built;
    a plug-in with ``__slots__`` is asked every time)."""
    attributes = getattr(deserializer, "__dict__", {})
    cached: dict[str, Any] | None = attributes.get("_cntkio_identity")
    if cached is None:
        cached = json.loads(json.dumps(deserializer.identity(), sort_keys=True, default=str))
        attributes["_cntkio_identity"] = cached
    return cached


# --- comparing ---------------------------------------------------------------------------------------------------
_ORDER_OPTIONS = {
    "enabled": "randomize",
    "window": "the randomization window",
    "sample_window": "the randomization window's unit (True: samples, False: chunks)",
    "seed": "randomization_seed",
    "compat": "compat (CNTK's own randomization)",
    "bucket_samples": "bucket_by_length",
    "frame_mode": "frame_mode",
    "truncation_length": "truncation_length",
}
_CORPUS_FIELDS = {
    "first_sequence": "the first sequence read (data_slice)",
    "sequences": "the sequences read (data_slice, or sequences the join of the deserializers dropped)",
    "chunks": "the chunks read (data_slice)",
    "samples": "the samples in a sweep (data_slice, length_mismatch)",
    "length_mismatch": "length_mismatch",
}


def _without_names(value: Any) -> Any:
    """The identity as compared: file names (and groups' name spans) left out."""
    if isinstance(value, Mapping):
        return {k: _without_names(v) for k, v in value.items() if k != "name"}
    if isinstance(value, (list, tuple)):
        return [_without_names(v) for v in value]
    return value


def _canonical(value: Any) -> str:
    return json.dumps(_without_names(value), sort_keys=True, default=str)


def same(then: Any, now: Any) -> bool:
    """Whether two identities (a checkpoint's and a source's) describe the same data and order."""
    return _canonical(then) == _canonical(now)


def differences(then: Any, now: Any, when: tuple[str, str] = ("at checkpoint time", "now")) -> list[str]:
    """What differs between two identities — a checkpoint's (``then``, untrusted) and a source's (``now``) — each
    named: an option, a deserializer's option, a file (by its position and its name in ``then``), an index.
    ``when`` words the two sides in messages. Empty when they are :func:`same`."""
    if same(then, now):
        return []
    return _Comparison(when).identities(then, now) or [
        f"the data or the configuration differs (the fingerprint {when[0]} is not one of this cntkio)"
    ]


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _shown(value: Any) -> str:
    text = "not set" if value is None else json.dumps(value, default=str)
    return text if len(text) <= 200 else text[:200] + "..."


def _counts(index: Any) -> str:
    index = _mapping(index)
    return f"{index.get('sequences')} sequences in {index.get('chunks')} chunks"


def _file_count(entries: Any) -> int | str:
    """Files a list of entries stands for (a group counts its files); "no" when it is not a list."""
    if not isinstance(entries, list):
        return "no"
    sizes = [_mapping(entry).get("files", 1) for entry in entries]
    return sum(size for size in sizes if isinstance(size, int))


class _Comparison:
    def __init__(self, when: tuple[str, str]):
        self.then, self.now = when

    def changed(self, what: str, a: Any, b: Any) -> str:
        return f"{what}: {a} {self.then}, {b} {self.now}"

    def identities(self, then: Any, now: Any) -> list[str]:
        then, now = _mapping(then), _mapping(now)
        found = self.options(then.get("order"), now.get("order"), _ORDER_OPTIONS, "")
        old, new = then.get("deserializers"), now.get("deserializers")
        data: list[str] = []
        if not isinstance(old, list) or not isinstance(new, list) or len(old) != len(new):
            count = [len(d) if isinstance(d, list) else "no" for d in (old, new)]
            data.append(self.changed("deserializers", f"{count[0]}", f"{count[1]}"))
        else:
            for number, (a, b) in enumerate(zip(old, new)):
                data += self.deserializer(number, a, b)
        # what the slice and the join made of the data: its counts differ anyway when the data does
        shown = {"length_mismatch"} if data else set(_CORPUS_FIELDS)
        before, after = (
            {k: v for k, v in _mapping(c).items() if k in shown} for c in (then.get("corpus"), now.get("corpus"))
        )
        found += self.options(before, after, _CORPUS_FIELDS, "")
        return found + data

    def options(self, then: Any, now: Any, labels: Mapping[str, str], prefix: str) -> list[str]:
        then, now = _mapping(then), _mapping(now)
        return [
            self.changed(prefix + labels.get(key, key), _shown(then.get(key)), _shown(now.get(key)))
            for key in sorted(set(then) | set(now), key=str)
            if not same(then.get(key), now.get(key))
        ]

    def deserializer(self, number: int, then: Any, now: Any) -> list[str]:
        if same(then, now):
            return []
        then, now = _mapping(then), _mapping(now)
        if then.get("kind") != now.get("kind"):
            return [self.changed(f"deserializer {number}", then.get("kind"), now.get("kind"))]
        what = f"deserializer {number} ({now.get('kind')})"
        found = self.options(then.get("options"), now.get("options"), {}, f"{what}: option ")
        if then.get("files") is not None or now.get("files") is not None:
            found += self.files(what, then.get("files"), now.get("files"))
        if not found and not same(then.get("index"), now.get("index")):
            found.append(self.changed(f"{what}: its index", _counts(then.get("index")), _counts(now.get("index"))))
        others = sorted((set(then) | set(now)) - {"kind", "options", "files", "index"}, key=str)
        found += [f"{what}: its {key} differ" for key in others if not same(then.get(key), now.get(key))]
        return found

    def files(self, what: str, then: Any, now: Any) -> list[str]:
        counts = [_file_count(entries) for entries in (then, now)]
        if counts[0] != counts[1] or not isinstance(then, list) or not isinstance(now, list) or len(then) != len(now):
            return [self.changed(f"{what}: files", counts[0], counts[1])]
        found = []
        for number, (a, b) in enumerate(zip(then, now)):
            if same(a, b):
                continue
            a, b = _mapping(a), _mapping(b)
            if "files" in a:  # a group of consecutive files
                first, members = a.get("first"), a.get("files")
                span = "?"
                if isinstance(first, int) and isinstance(members, int):
                    span = f"{first} to {first + members - 1}"
                place = f"files {span} ({a.get('name')!r} {self.then})"
            else:
                place = f"file {number} ({a.get('name')!r} {self.then}, {b.get('name')!r} {self.now})"
            change = (
                f"{a.get('bytes')} bytes {self.then}, {b.get('bytes')} {self.now}"
                if a.get("bytes") != b.get("bytes")
                else "its bytes or its sequences' layout differ"
            )
            found.append(f"{what}: {place} differs: {change}")
        return found
