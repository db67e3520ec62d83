"""``cntkio inspect`` and ``validate`` for the formats other than CTF: CBF, HTK features listed in SCP files, MLF
labels, image map files and Base64 image files; and any deserializer (a reader section's, say).

Each function returns a :class:`~cntkio._src.cli.inspect_ctf.Report`. Streams are read chunk by chunk through the
format's
deserializer (:class:`~cntkio._src.cli.inspect_ctf.ChunkScan`); label statistics come from the parsed index's columns
with NumPy. ``full=True`` (``validate``) also decodes every image; inspection decodes a few to show their sizes.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import sys
from collections.abc import Callable
from importlib.util import find_spec
from typing import Any

import numpy as np

from cntkio._src.cli.inspect_ctf import (
    FROM_FILE,
    ChunkScan,
    Progress,
    Report,
    StreamSpec,
    StreamStats,
    length_summary,
    streamdefs_snippet,
)
from cntkio._src.common.errors import FormatError, Location
from cntkio._src.common.streams import StreamDef, StreamDefs
from cntkio._src.formats import registry
from cntkio._src.formats.cbf import CBFDeserializer
from cntkio._src.formats.error_ledger import ErrorLedger
from cntkio._src.formats.htk_features import HTKFeatureDeserializer
from cntkio._src.formats.htk_files import read_header
from cntkio._src.formats.image_map import (
    Base64Index,
    ImageMap,
    ZipArchives,
    decode_base64_image_bytes,
    index_base64,
    parse_image_map,
    read_image_bytes,
)
from cntkio._src.formats.image_map_check import map_errors
from cntkio._src.formats.kaldi import KaldiDeserializer
from cntkio._src.formats.mlf import MAX_DIM, parse_mlf, read_state_list
from cntkio._src.formats.protocol import Deserializer
from cntkio._src.formats.scp import parse_scp

SAMPLE_IMAGES = 8  # images decoded by inspect to show their sizes
TOP_LABELS = 10  # most frequent labels listed
HEADER_TRIES = 100  # SCP entries tried to find a readable feature file (its dimension)
_ANY_LABEL = 2**63 - 1  # the largest label_dim the image scanners take: every class id is read
_LABEL_NAME = re.compile(rb"(?m)^[ \t]*\d+[ \t]+\d+[ \t]+(\S+)")


def inspect_deserializer(
    reader: Deserializer, report: Report, *, progress: Progress | None = None, preview: int = 0
) -> Report:
    """Reads every chunk of ``reader`` into ``report``: stream statistics, sequence lengths, preview, and every
    error (counted by the reader's error budget, raised by a chunk, or an MLF entry left out)."""
    report.streams = [
        StreamStats(StreamSpec(info.name, int(np.prod(info.shape)), info.is_sparse, info.alias or info.name, FROM_FILE))
        for info in reader.stream_infos()
    ]
    budget = getattr(reader, "errors", None)
    if isinstance(budget, ErrorLedger):
        budget.max_errors = sys.maxsize  # every bad record is listed, none raises
    scan = ChunkScan(reader, report, preview)
    chunks = reader.num_chunks()
    errors: list[FormatError] = []
    if progress is not None:
        progress("reading", 0, chunks)
    for chunk_id in range(chunks):
        if not scan.read(chunk_id) and report.fatal is not None:
            errors.append(report.fatal)  # a chunk that cannot be read: listed, and the next ones are read
            report.fatal = None
        if progress is not None:
            progress("reading", chunk_id + 1, chunks)
    if isinstance(budget, ErrorLedger):
        errors += budget.errors  # (an MLF's invalid entries among them)
    else:
        errors += [entry.error() for entry in getattr(reader, "invalid", [])]
    report.errors = errors
    report.sequence_lengths = scan.lengths()
    report.summary["sequences"] = report.summary.get("sequences", reader.sequence_index().num_sequences) - scan.empty
    return report


def inspect_reader(reader: Deserializer, *, progress: Progress | None = None) -> Report:
    """Any deserializer (one a config made, say), read through: a report named after its data (file)."""
    name = reader.source_name
    size = os.path.getsize(name) if os.path.isfile(name) else 0
    report = Report(name, size, False, [], format=type(reader).__name__)
    describe = getattr(reader, "describe", None)
    report.summary = dict(describe()) if callable(describe) else {}
    return inspect_deserializer(reader, report, progress=progress)


def inspect_cbf(path: str, *, progress: Progress | None = None, preview: int = 0) -> Report:
    """A CBF file: its streams (as stored), chunks and sequences, every chunk decoded."""
    report = Report(path, os.path.getsize(path), False, [], format=registry.CBF.name)
    try:
        reader = CBFDeserializer(path, trace_level=0)
    except FormatError as e:
        report.fatal = e
        return report
    try:
        report.summary = reader.describe()
        report.summary["precision"] = {info.name: str(info.dtype) for info in reader.stream_infos()}
        inspect_deserializer(reader, report, progress=progress, preview=preview)
        report.snippet = streamdefs_snippet("CBFDeserializer", path, [s.spec for s in report.streams])
    finally:
        reader.close()
    return report


def inspect_scp(path: str, *, progress: Progress | None = None, preview: int = 0) -> Report:
    """HTK features listed in an SCP file: the dimension from the first readable file, then every utterance read
    (missing files and bad ranges are errors)."""
    report = Report(path, os.path.getsize(path), False, [], format=registry.SCP.name)
    try:
        entries = parse_scp(path)
    except FormatError as e:
        report.fatal = e
        return report
    dim, problem = None, ""
    for i in range(min(len(entries), HEADER_TRIES)):
        feature_file = entries.paths[int(entries.path_ids[i])]
        try:
            dim = read_header(feature_file).dim
            break
        except (OSError, FormatError) as e:
            problem = problem or f"{feature_file}: {getattr(e, 'strerror', None) or e}"
    if dim is None:
        reason = f"none of the first {min(len(entries), HEADER_TRIES)} feature files can be read (first: {problem})"
        report.fatal = FormatError(reason, entries.location(0) if len(entries) else Location(path, 0))
        return report
    streams = StreamDefs(features=StreamDef(shape=dim, scp=path))
    return _inspect_features(report, lambda: HTKFeatureDeserializer(streams, max_errors=sys.maxsize, trace_level=0),
                             progress, preview)  # fmt: skip


def _inspect_features(
    report: Report, open_reader: Callable[[], Any], progress: Progress | None, preview: int
) -> Report:
    """``report`` of a feature deserializer (HTK, Kaldi) of one stream ``features``: opened by ``open_reader`` (a
    :class:`FormatError` is the report's fatal error), summarized, every utterance read, and a snippet opening it."""
    try:
        reader = open_reader()
    except FormatError as e:
        report.fatal = e
        return report
    try:
        report.summary = reader.describe()
        report.summary["sequences"] = report.summary["utterances"]
        inspect_deserializer(reader, report, progress=progress, preview=preview)
        name = type(reader).__name__
        report.snippet = (
            f"from cntkio import {name}, StreamDef, StreamDefs\n\n"
            f"reader = {name}(StreamDefs(features=StreamDef(shape={reader.frame_dim}, "
            f"scp={json.dumps(report.file)})))\n"
        )
    finally:
        reader.close()
    return report


def inspect_kaldi(path: str, *, progress: Progress | None = None, preview: int = 0) -> Report:
    """Kaldi features, a binary archive or a feats.scp listing archives: every matrix read (the dimension that of the
    first usable one; matrices of other column counts, bad offsets and unreadable archives are errors)."""
    report = Report(path, os.path.getsize(path), False, [], format=registry.KALDI.name)
    streams = StreamDefs(features=StreamDef(scp=path))
    return _inspect_features(report, lambda: KaldiDeserializer(streams, max_errors=sys.maxsize, trace_level=0),
                             progress, preview)  # fmt: skip


def inspect_mlf(path: str, *, labels: str | None = None, preview: int = 0) -> Report:
    """An MLF file: entries, frames and the label distribution. Without a state list (``labels``), label lines
    with class ids use them; names alone are numbered in sorted order (ids that are not the model's)."""
    report = Report(path, os.path.getsize(path), False, [], format=registry.MLF.name)
    states = read_state_list(labels) if labels is not None else None
    try:
        index = parse_mlf(path, states, len(states) if states else MAX_DIM, max_errors=None)
        if states is None and not len(index) and index.invalid:
            states = _label_names(path)
            report.notes.append(
                f"no state list (--labels): the {len(states)} label names found are numbered in sorted order"
            )
            index = parse_mlf(path, states, max(len(states), 1), max_errors=None)
    except FormatError as e:
        report.fatal = e
        return report
    lengths = index.lengths.astype(np.int64)
    frames = np.bincount(index.run_states, weights=index.run_counts, minlength=1).astype(np.int64)
    used = np.flatnonzero(frames)
    dim = len(states) if states else int(used.max()) + 1 if len(used) else 1
    top = used[np.argsort(-frames[used], kind="stable")][:TOP_LABELS]
    report.summary = {
        "sequences": len(index),
        "frames": int(lengths.sum()),
        "runs": index.num_runs,
        "invalid": len(index.invalid),
        "duplicates": index.duplicates,
        "labels_used": len(used),
        "label_dim": dim,
        "top_labels": [{"label": _name(states, int(i)), "frames": int(frames[i])} for i in top],
    }
    stats = StreamStats(StreamSpec("labels", dim, True, "labels", FROM_FILE if states else "largest class id + 1"))
    if len(lengths):
        stats.samples = stats.values = stats.nonzeros = int(lengths.sum())
        stats.sequences = len(lengths)
        stats.min_samples_in_sequence, stats.max_samples_in_sequence = int(lengths.min()), int(lengths.max())
        stats.value_sum, stats.value_min, stats.value_max = float(stats.values), 1.0, 1.0
        stats.nnz_min = stats.nnz_max = 1
        stats.max_index = int(used.max())
    report.streams = [stats]
    report.errors = [entry.error() for entry in index.invalid]
    report.sequence_lengths = length_summary(lengths)
    for entry in range(min(preview, len(index))):
        ids, counts = index.runs(entry)
        runs = " ".join(f"{_name(states, int(i))}x{int(c)}" for i, c in zip(ids[:8], counts[:8]))
        report.preview.append({"key": index.keys[entry], "labels": runs + (" ..." if len(ids) > 8 else "")})
    state_list = json.dumps(labels if labels is not None else "STATES.list")
    report.snippet = (
        "from cntkio import HTKMLFDeserializer, StreamDef, StreamDefs\n\n"
        f"labels = StreamDefs(labels=StreamDef(shape={dim}, mlf={json.dumps(path)}))\n"
        f"reader = HTKMLFDeserializer({state_list}, labels)\n"
    )
    return report


def inspect_image_map(
    path: str, *, base64: bool = False, full: bool = False, progress: Progress | None = None, preview: int = 0
) -> Report:
    """An image map file (``base64=False``) or a Base64 image file: images, the label distribution, missing files
    or undecodable payloads (errors), and the sizes of a sample of images (every image with ``full``)."""
    form = registry.BASE64_IMAGE if base64 else registry.IMAGE_MAP
    report = Report(path, os.path.getsize(path), False, [], format=form.name)
    try:
        if base64:
            index = index_base64(path, label_dim=_ANY_LABEL)
            count, labels, keys = len(index), index.labels, index.keys
        else:
            images = parse_image_map(path, label_dim=_ANY_LABEL)
            count, labels, keys = len(images), images.labels, images.keys
    except FormatError as e:
        report.fatal = e
        if not base64:
            _every_map_error(report, e)
        return report
    classes, per_class = np.unique(labels, return_counts=True)
    order = np.argsort(-per_class, kind="stable")[:TOP_LABELS]
    report.summary = {
        "sequences": count,
        "classes": len(classes),
        "class_ids": f"{int(classes[0])}..{int(classes[-1])}" if len(classes) else None,
        "top_labels": [{"label": int(classes[i]), "images": int(per_class[i])} for i in order],
    }
    rows = np.arange(count) if full else np.unique(np.linspace(0, count - 1, min(count, SAMPLE_IMAGES)).astype(int))
    if base64:
        with open(path, "rb") as f:
            read = _base64_reader(f.fileno(), index)
            shapes = _decode_images(rows.tolist(), read, index.location, report, progress, name=None)
    else:
        report.summary["zip_archives"] = len(images.containers)
        report.errors, missing = _missing_images(images, progress)
        with ZipArchives(images) as archives:
            rows = rows[~np.isin(rows, missing)]
            read = _image_reader(images, archives)
            shapes = _decode_images(rows.tolist(), read, images.location, report, progress, name=images.name)
    report.summary["image_sizes"] = shapes
    report.summary["images_decoded"] = sum(shapes.values())
    for row in range(min(preview, count)):
        name = "" if base64 else images.name(row)
        report.preview.append({"key": keys[row], "label": int(labels[row]), **({"image": name} if name else {})})
    constructor = "Base64ImageDeserializer" if base64 else "ImageDeserializer"
    label_dim = int(classes[-1]) + 1 if len(classes) else 1
    report.snippet = (
        f"from cntkio import {constructor}, StreamDef, StreamDefs\n\n"
        f"reader = {constructor}({json.dumps(path)}, StreamDefs(\n"
        '    features=StreamDef(field="image", transforms=[]),  # add transforms (cntkio.transforms)\n'
        f'    labels=StreamDef(field="label", shape={label_dim}),  # shape >= {label_dim}: largest class id + 1\n'
        "))\n"
    )
    return report


def _every_map_error(report: Report, first: FormatError) -> None:
    """A map the scanner refused at its ``first`` error: every structural error of it listed (the reader refuses
    the file whole, so images are not checked until they are fixed)."""
    errors, good = map_errors(report.file, label_dim=_ANY_LABEL)
    if not errors or (errors[0].line, errors[0].reason) != (first.line, first.reason):
        return  # (not a line's error: keep the scanner's)
    report.fatal = None
    report.errors = errors
    report.summary = {"valid_lines": good, "invalid_lines": len(errors)}
    report.notes.append(
        "a reader refuses this map at its first error: fix every line listed (images are checked once it reads)"
    )


def _missing_images(images: ImageMap, progress: Progress | None) -> tuple[list[FormatError], np.ndarray]:
    """An error for every map line whose plain image file does not exist (and those rows), and for a missing zip
    archive or item (the first one: :meth:`ZipArchives.check`)."""
    plain = np.flatnonzero(images.container_ids < 0)
    paths, first = np.unique(images.path_ids[plain], return_index=True)
    absent = np.zeros(len(images.paths), dtype=bool)
    not_regular: list[int] = []  # a FIFO or device: never opened (reading it could block or never end)
    for done, (path_id, row) in enumerate(zip(paths.tolist(), plain[first].tolist())):
        absent[path_id] = not os.path.exists(images.file_path(row))
        if not absent[path_id] and not os.path.isfile(images.file_path(row)):
            not_regular.append(int(row))
        if progress is not None and done % 1024 == 0:
            progress("checking files", done, len(paths))
    bad = plain[absent[images.path_ids[plain]]]
    errors = [
        FormatError(f"image file not found: {images.paths[int(images.path_ids[row])]!r}", images.location(row))
        for row in bad.tolist()
    ]
    errors += [
        FormatError(f"not a regular file: {images.paths[int(images.path_ids[row])]!r}", images.location(row))
        for row in not_regular
    ]
    bad = np.union1d(bad, np.asarray(not_regular, dtype=bad.dtype))
    with ZipArchives(images) as archives:
        try:
            archives.check(images)
        except FormatError as e:
            errors.append(e)
    return errors, bad


def _base64_reader(fd: int, index: Base64Index) -> Callable[[int], bytes | None]:
    def read(row: int) -> bytes | None:
        return decode_base64_image_bytes(fd, int(index.payload_offsets[row]), int(index.payload_lengths[row]))

    return read


def _image_reader(images: ImageMap, archives: ZipArchives) -> Callable[[int], bytes | None]:
    def read(row: int) -> bytes | None:
        try:
            return read_image_bytes(images, row, archives)
        except FormatError:  # a zip item ZipArchives.check reported
            return b""

    return read


def _decode_images(
    rows: list[int],
    read: Callable[[int], bytes | None],
    locate: Callable[[int], Location],
    report: Report,
    progress: Progress | None,
    *,
    name: Callable[[int], str] | None,
) -> dict[str, int]:
    """Decodes images ``rows`` (bytes from ``read``): how many of each size (``WxHxC``); an error for each one that
    does not decode, naming the image (``name``: a map's image file) and its line. Without OpenCV
    (``pip install 'cntkio[image]'``) only the base64 is checked."""
    cv2: Any = None
    if find_spec("cv2") is not None:
        cv2 = importlib.import_module("cv2")
    else:
        report.notes.append("image sizes need OpenCV: pip install 'cntkio[image]'")
    shapes: dict[str, int] = {}
    if progress is not None:
        progress("decoding images", 0, len(rows))
    for done, row in enumerate(rows):
        data = read(row)
        image = None
        if data is not None and cv2 is not None:
            image = cv2.imdecode(np.frombuffer(data, dtype=np.uint8), cv2.IMREAD_UNCHANGED)
        if data is None or (cv2 is not None and (image is None or not image.size)):
            image_name = "the image" if name is None else repr(name(row))
            reason = "invalid base64" if data is None else f"cannot decode {image_name} (not a supported image?)"
            report.errors.append(FormatError(reason, locate(row)))
        elif image is not None:
            size = f"{image.shape[1]}x{image.shape[0]}x{image.shape[2] if image.ndim == 3 else 1}"
            shapes[size] = shapes.get(size, 0) + 1
        if progress is not None and done % 64 == 0:
            progress("decoding images", done + 1, len(rows))
    return shapes


def _label_names(path: str) -> list[str]:
    """The distinct label names of an MLF file's label lines (``start end name ...``), sorted; read in blocks."""
    names: set[bytes] = set()
    with open(path, "rb") as f:
        rest = b""
        while block := f.read(4 << 20):
            block = rest + block
            cut = block.rfind(b"\n") + 1
            names.update(_LABEL_NAME.findall(block, 0, cut))
            rest = block[cut:]
        names.update(_LABEL_NAME.findall(rest))
    return sorted(n.decode("utf-8", "surrogateescape") for n in names)


def _name(states: list[str] | None, label: int) -> str | int:
    return states[label] if states else label
