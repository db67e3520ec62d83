"""Image deserializers (spec image.md): ``ImageDeserializer`` (map files of paths and zip items) and
``Base64ImageDeserializer`` (base64-encoded images in a text file), with CNTK's transforms.

A chunk is a few images (one by default, as in CNTK). Parsing a chunk reads each image's bytes, decodes it with
OpenCV and runs the transform pipeline (:class:`~cntkio._src.formats.image_pipeline.ImagePipeline`) into the chunk's
output buffer; OpenCV releases the GIL, so chunks decode on the parse threads in parallel. Random transforms draw
from a generator derived from (seed, sweep, key, view): the deserializer is *sweep dependent*, so each sweep sees
new augmentation, the same on any number of threads, workers or ranks, and a checkpoint restores it exactly.

An image that cannot be decoded (or whose base64 is invalid) is an invalid sequence: skipped and counted under
``max_errors`` (with 0 the first raises, naming the file, line and key).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from cntkio import _native
from cntkio._src.common.errors import ConfigError, FormatError, Location
from cntkio._src.common.keys import KeyColumn, ObjectKeys, TextKeys
from cntkio._src.common.streams import StreamInformation, iter_stream_defs, parse_precision
from cntkio._src.formats import remote
from cntkio._src.formats.data_file import (
    open_data_file,
    pickled_as_arguments,
    read_identity,
    read_whole,
    require_regular_file,
)
from cntkio._src.formats.error_ledger import ErrorLedger
from cntkio._src.formats.identity import array_digest, file_entry
from cntkio._src.formats.image_map import (
    Base64Index,
    ImageMap,
    ZipArchives,
    decode_base64_image_bytes,
    index_base64,
    parse_image_map,
    read_image_bytes,
)
from cntkio._src.formats.image_pipeline import ImagePipeline, RandomDraws, key_hash, require_cv2
from cntkio._src.formats.protocol import DenseStream, IndexedDeserializer, ParsedChunk, SequenceIndex, SparseStream
from cntkio._src.formats.shards import Sharded

logger = logging.getLogger("cntkio")

UNUSABLE = 2  # ParsedChunk.invalid: a sequence without usable data, skipped in every mode


class _Streams:
    """The image stream and the optional label stream of an image deserializer's ``StreamDefs``."""

    def __init__(self, streams: Any, kind: str):
        definitions = list(iter_stream_defs(streams))
        images = [(n, d) for n, d in definitions if d.field == "image" or (d.field is None and d.transforms)]
        labels = [(n, d) for n, d in definitions if d.field == "label"]
        others = [n for n, d in definitions if (n, d) not in images and (n, d) not in labels]
        if len(images) != 1 or len(labels) > 1 or others:
            names = ", ".join(n for n, _ in definitions) or "none"
            raise ConfigError(
                f"{kind} needs exactly one image stream (field='image') and at most one label stream "
                f"(field='label'); got {names}"
            )
        self.image_name, image = images[0]
        self.transforms = list(image.transforms or [])
        self.label_name: str | None = None
        self.label_dim: int | None = None
        if labels:
            label_name, label = labels[0]
            if label.shape is None:
                raise ConfigError(f"{kind}: label stream '{label_name}' needs shape=NUMBER_OF_CLASSES")
            self.label_name, self.label_dim = label_name, label.dim()


class ImageDeserializerBase(IndexedDeserializer):
    """The part both image formats share: streams, decoding, transforms, labels and invalid images."""

    duplicate_key_copy = "last"  # CNTK's image map lookups find the last line holding a key
    _kind = "image"

    def __init__(
        self,
        map_file: str | os.PathLike[str],
        streams: Any = None,
        *,
        grayscale: bool = False,
        precision: str = "float",
        layout: str = "chw",
        channel_order: str = "bgr",
        dtype: Any = None,
        seed: int = 0,
        images_per_chunk: int = 1,
        max_errors: int = 0,
        trace_level: int = 1,
    ):
        options = {
            "grayscale": grayscale, "precision": precision, "layout": layout, "channel_order": channel_order,
            "dtype": dtype, "seed": seed, "images_per_chunk": images_per_chunk, "max_errors": max_errors,
            "trace_level": trace_level,
        }  # fmt: skip
        self._arguments = ((map_file, streams), {**getattr(self, "_format_options", {}), **options})
        self.filename = os.fspath(map_file)
        self.trace_level: int = int(trace_level)
        config = _Streams(streams, type(self).__name__)
        precision_dtype = parse_precision(precision)
        self.pipeline = ImagePipeline(
            config.transforms,
            grayscale=bool(grayscale),
            layout=layout,
            channel_order=channel_order,
            dtype=precision_dtype if dtype is None else dtype,
        )
        self.grayscale = bool(grayscale)
        self.seed = int(seed)
        self.sweep_dependent = self.pipeline.is_random
        self.errors: ErrorLedger = ErrorLedger(int(max_errors), self.trace_level)
        self._config = config
        keys, labels, views = self._index_images(config)
        self._finish_index(keys, labels if config.label_dim is not None else None, views, images_per_chunk)

    def _finish_index(self, keys: KeyColumn, labels: np.ndarray | None, views: int, images_per_chunk: int) -> None:
        """The streams and the index (``views`` sequences an image; chunks of ``images_per_chunk`` images)."""
        config = self._config
        count = len(keys)
        self._views = views
        self._labels = labels
        self._image_keys = keys
        shape = self.pipeline.output_shape()
        self._fixed_shape = shape is not None
        if shape is None:
            shape = self._shape_of_first_image()
        self.image_shape = shape
        infos = [StreamInformation(config.image_name, 0, "dense", self.pipeline.dtype, shape)]
        if config.label_name is not None and config.label_dim is not None:
            label_dtype = self.pipeline.dtype if self.pipeline.dtype != np.uint8 else np.dtype(np.float32)
            infos.append(StreamInformation(config.label_name, 1, "sparse", label_dtype, (config.label_dim,)))
        self._infos = infos
        if images_per_chunk < 1:
            raise ConfigError(f"images_per_chunk must be >= 1, got {images_per_chunk}")
        self.images_per_chunk = int(images_per_chunk)
        chunk_starts = np.arange(0, count + self.images_per_chunk, self.images_per_chunk, dtype=np.int64)
        chunk_starts[-1] = count
        chunk_starts = np.unique(chunk_starts) * views
        sequence_keys = keys if views == 1 else _ViewKeys(keys, views)
        self._index = SequenceIndex(chunk_starts, np.ones(count * views, dtype=np.int32), sequence_keys)

    def identity(self) -> dict[str, Any]:
        """The index and the labels (the images are named in the map, not digested: there may be millions)."""
        identity = super().identity()
        if self._labels is not None:
            identity["labels"] = array_digest([self._labels])
        return identity

    # --- per format -------------------------------------------------------------------------------------------
    def _index_images(self, config: _Streams) -> tuple[KeyColumn, np.ndarray, int]:
        """Indexes the file: the images' keys, labels (read only with a label stream) and sequences per image."""
        raise NotImplementedError

    def _read(self, image: int) -> bytes | None:
        """The encoded bytes of image ``image`` (None: unreadable: an invalid sequence)."""
        raise NotImplementedError

    def _where(self, image: int) -> Location:
        """Where image ``image`` is named (file, line, key) for errors."""
        raise NotImplementedError

    def _image_name(self, image: int) -> str:
        """Image ``image`` in messages: the file (or zip item) it is read from, where it has one of its own."""
        return "the image"

    def _check_unchanged(self, first: int, end: int) -> None:
        """After images ``first .. end - 1`` were read: raises if a file read by offset (through an index made when
        it was opened) changed meanwhile (one ``fstat`` a file, not an image)."""
        raise NotImplementedError

    # --- decoding ---------------------------------------------------------------------------------------------
    def _decode(self, data: bytes | None) -> np.ndarray | None:
        if data is None:
            return None
        fast = _jpeg_decoder() if data[:2] == b"\xff\xd8" and not _may_hold_exif(data) else None
        if fast is not None:  # a JPEG without EXIF (whose orientation OpenCV would apply): libjpeg-turbo directly
            try:
                image = fast.decode_jpeg(data, colorspace="GRAY" if self.grayscale else "BGR")
            except (ValueError, RuntimeError):
                image = None  # not decodable this way (CMYK, damaged): OpenCV decides
            if image is not None:
                decoded: np.ndarray = image[:, :, 0] if self.grayscale else image
                return decoded
        cv2 = require_cv2()
        flags = cv2.IMREAD_GRAYSCALE if self.grayscale else cv2.IMREAD_COLOR
        try:
            image = cv2.imdecode(np.frombuffer(data, dtype=np.uint8), flags)
        except cv2.error:
            return None
        return image if image is not None and image.size else None

    def _shape_of_first_image(self) -> tuple[int, ...]:
        """Without a transform fixing the size, every image must have the first decodable image's shape."""
        for image in range(len(self._image_keys)):
            decoded = self._decode(self._read(image))
            if decoded is not None:
                shape = self.pipeline.output_shape(decoded.shape)
                if shape is None:
                    break
                return shape
        raise ConfigError(
            f"{self.source_name}: the image size is not fixed (add a scale transform or a fixed crop size) and no "
            "image could be decoded to learn it"
        )

    def _staged(self, first: int, end: int) -> contextlib.AbstractContextManager[None]:
        """Images ``[first, end)`` made readable at once (a remote Base64 file: their bytes fetched together)."""
        del first, end
        return contextlib.nullcontext()

    def get_chunk(self, chunk_id: int) -> ParsedChunk:
        return self.get_chunk_of_sweep(chunk_id, 0)

    def get_chunk_of_sweep(self, chunk_id: int, sweep: int) -> ParsedChunk:
        a, b = self._chunk_range(chunk_id)  # sequences (views of images)
        views = self._views
        count = b - a
        dtype = self.pipeline.dtype  # every row is written below, into a buffer an earlier chunk gave back
        values = _native.reusable_buffer(count * math.prod(self.image_shape) * dtype.itemsize).view(dtype)
        values = values.reshape(count, *self.image_shape)
        invalid = np.zeros(count, dtype=np.uint8)
        with self._staged(a // views, (b + views - 1) // views):  # (remote: the chunk's images fetched at once)
            for first in range(0, count, views):
                image = (a + first) // views
                decoded = self._decode(self._read(image))
                if decoded is None:
                    reason = f"cannot decode {self._image_name(image)} (not a supported image, or truncated)"
                    self._bad(image, reason, self._where(image), chunk_id)
                    invalid[first : first + views] = UNUSABLE
                    values[first : first + views] = 0  # never delivered (skipped), but defined
                    continue
                if not self._fixed_shape and self.pipeline.output_shape(decoded.shape) != self.image_shape:
                    raise FormatError(
                        f"image of {decoded.shape[1]}x{decoded.shape[0]} pixels gives samples of shape "
                        f"{self.pipeline.output_shape(decoded.shape)}, not the stream's {self.image_shape}: without a "
                        "scale transform every image must have the same size",
                        self._where(image),
                    )
                key = key_hash(self._image_keys[image])
                for view in range(views):
                    draws = RandomDraws((self.seed, sweep, key, view))
                    self.pipeline.run(decoded, draws, view, out=values[first + view])
        self._check_unchanged(a // views, (b + views - 1) // views)  # after the reads: a change during them too
        offsets = np.arange(count + 1, dtype=np.int64)
        result = ParsedChunk({self._config.image_name: DenseStream(values, offsets)}, invalid=invalid)
        if self._config.label_name is not None:
            assert self._labels is not None and self._config.label_dim is not None
            images = (a + np.arange(count)) // views
            classes = self._labels[images].astype(np.int32)
            label_values = np.ones(count, dtype=self._infos[1].dtype)
            result[self._config.label_name] = SparseStream(
                label_values, classes, offsets.copy(), offsets.copy(), self._config.label_dim
            )
        return result

    def _bad(self, image: int, reason: str, location: Location, chunk: int) -> None:
        if self.errors.max_errors == 0:
            raise FormatError(reason, location)
        self.errors.add(("image", image), lambda: FormatError(reason, location), kind="bad image", chunk=chunk)

    @property
    def source_name(self) -> str:
        return str(getattr(self, "filename", type(self).__name__))


def _may_hold_exif(jpeg: bytes) -> bool:
    """Whether a JPEG's header segments (those before the scan) hold EXIF data (an APP1 segment starting
    ``Exif\\0\\0``), whose orientation OpenCV applies; also True when the header cannot be walked (OpenCV decides)."""
    at, size = 2, len(jpeg)
    while at + 4 <= size:
        if jpeg[at] != 0xFF:
            return True
        marker = jpeg[at + 1]
        if marker == 0xFF:  # a fill byte
            at += 1
            continue
        if marker == 0xDA:  # start of scan: the header is over
            return False
        if marker == 0xE1 and jpeg[at + 4 : at + 10] == b"Exif\0\0":
            return True
        at += 2 + int.from_bytes(jpeg[at + 2 : at + 4], "big")
    return True


def _jpeg_decoder() -> Any:
    """``simplejpeg`` when installed (libjpeg-turbo without OpenCV's overhead: the same pixels, ~15% faster), else
    None."""
    global _SIMPLEJPEG
    if _SIMPLEJPEG is False:
        try:
            import simplejpeg

            _SIMPLEJPEG = simplejpeg
        except ImportError:
            _SIMPLEJPEG = None
    return _SIMPLEJPEG


_SIMPLEJPEG: Any = False  # not looked for yet


class _ViewKeys(KeyColumn):
    """The keys of multi-view sequences: each image's key, once per view (``views`` consecutive sequences)."""

    def __init__(self, keys: KeyColumn, views: int):
        self.keys, self.views = keys, views

    def __len__(self) -> int:
        return len(self.keys) * self.views

    def take(self, indices: np.ndarray) -> list[Any]:
        return self.keys.take(np.asarray(indices, dtype=np.int64) // self.views)

    def slice(self, start: int, stop: int) -> KeyColumn:
        return ObjectKeys(self.take(np.arange(start, stop)))

    @property
    def is_text(self) -> bool:
        return self.keys.is_text

    def native(self) -> tuple[int, np.ndarray, np.ndarray | None]:
        rows = np.repeat(np.arange(len(self.keys), dtype=np.int64), self.views)
        if isinstance(self.keys, TextKeys):
            return self.keys.subset(rows).native()
        kind, values, _ = self.keys.native()
        return kind, np.ascontiguousarray(values[rows]), None


_OUTPUT_OPTIONS = """
        grayscale: decode as one channel (``channels=1`` in the scale transform).
        precision: ``'float'`` (float32) or ``'double'``; the output values' type unless ``dtype`` is given.
        layout: ``'chw'`` (CNTK's: channels, rows, columns) or ``'hwc'``.
        channel_order: ``'bgr'`` (CNTK's, as OpenCV decodes) or ``'rgb'`` (what torchvision models expect).
        dtype: the image stream's values: ``np.float32``, ``np.float64`` or ``np.uint8`` (None: ``precision``).
            For PyTorch: ``layout='chw', channel_order='rgb'`` (and ``dtype=np.uint8`` to normalise on the device).
        seed: the augmentation seed; random transforms draw from a generator derived from (seed, the transform's
            own seed, sweep, sequence key, view), so the same seed gives the same images anywhere.
        images_per_chunk: images parsed (and randomized) together; 1 (CNTK's) keeps the window small in memory.
        max_errors: images that cannot be decoded tolerated: skipped and counted (0: the first raises).
"""


class ImageDeserializer(ImageDeserializerBase):
    (
        """Images listed in a map file (``cntk.io.ImageDeserializer``): ``path<TAB>label`` (the key is the line index)
    or ``key<TAB>path<TAB>label`` lines; paths may start with ``...`` (the map file's folder) and name an item of
    a zip archive (``archive.zip@/inner/path.jpg``, each archive opened once per process).

    Args:
        map_file: the map file.
        streams: ``StreamDefs(features=StreamDef(field='image', transforms=[...]), labels=StreamDef(field='label',
            shape=NUM_CLASSES))``; the label stream is optional (without it labels are not read at all), and is
            one-hot sparse.
        multi_view: every image gives 10 sequences (views 0..9 of a ``multiview10`` crop); default: when the
            transforms hold such a crop.
    """
        + _OUTPUT_OPTIONS
        + """
    Example::

        from cntkio import transforms as T
        images = ImageDeserializer("train_map.txt", StreamDefs(
            features=StreamDef(field="image", transforms=[T.crop("randomside", side_ratio=0.875),
                                                           T.scale(224, 224, 3), T.color(0.4, 0.4, 0.4)]),
            labels=StreamDef(field="label", shape=1000)), channel_order="rgb")
        source = MinibatchSource(images, randomization_window_in_chunks=1000)

    (``cntkio.io``'s ``ImageDeserializer(map_file)`` without streams is CNTK 2.0's fluent form, and its
    ``ImageDeserializer.crop``/``scale``/``mean``/``color`` CNTK 2.0's transform helpers: ``compat/legacy.py``.)
    """
    )

    def __init__(
        self, map_file: str | os.PathLike[str], streams: Any = None, *, multi_view: bool | None = None, **options: Any
    ):
        self._format_options = {"multi_view": multi_view}
        super().__init__(map_file, streams, **options)

    def _index_images(self, config: _Streams) -> tuple[KeyColumn, np.ndarray, int]:
        multi_view = self._format_options["multi_view"]
        views = self.pipeline.multiview if multi_view is None else bool(multi_view)
        self.images: ImageMap
        self.images, identities = read_whole(
            [self.filename], lambda: parse_image_map(self.filename, label_dim=config.label_dim, multi_view=views)
        )
        self.parsed_files = [(self.filename, identities[0])]
        if len(self.images) == 0:
            raise FormatError("the map file lists no image", Location(self.filename, 0))
        self.archives = ZipArchives(self.images)
        self.archives.check(self.images)
        return self.images.keys, self.images.labels, self.images.views

    def _read(self, image: int) -> bytes | None:
        return read_image_bytes(self.images, image, self.archives)

    def _check_unchanged(self, first: int, end: int) -> None:
        """The zip archives the images came from (each read through the item table it had when opened); plain image
        files are opened by path for every read (no index of them is kept, so each read is whole and current)."""
        containers = self.images.container_ids[first:end]
        self.archives.check_unchanged(np.unique(containers[containers >= 0]).tolist())

    def _where(self, image: int) -> Location:
        return self.images.location(image)

    def _image_name(self, image: int) -> str:
        return f"image file {self.images.name(image)!r}"

    def fingerprint(self) -> list[Any]:
        if remote.is_remote(self.filename):
            identity = read_identity(self.filename)
            return [type(self).__name__, os.path.basename(self.filename), identity.size, identity.mtime_ns]
        info = os.stat(self.filename)
        return [type(self).__name__, os.path.basename(self.filename), info.st_size, info.st_mtime_ns]

    def close(self) -> None:
        self.archives.close()

    def __reduce__(self) -> tuple[Any, ...]:
        return pickled_as_arguments(self)


class Base64ImageDeserializer(Sharded, ImageDeserializerBase):
    (
        """Base64-encoded images in a text file (``cntk.io.Base64ImageDeserializer``): ``label<TAB>base64`` lines (the
    key is the line index) or ``key<TAB>label<TAB>base64`` (the first line decides). The file is indexed without
    reading the images; each chunk's images are decoded from base64 when it is parsed. Invalid base64 or an image
    that cannot be decoded is an invalid sequence (skipped and counted under ``max_errors``).

    Args:
        map_file: the base64 file. Several files (a list, or a glob pattern) are read as one corpus by
            :meth:`Base64ImageDeserializer.sharded` (``formats/shards.py``), which ``cntkio.Base64ImageDeserializer``
            calls when given several.
        streams: as for :class:`ImageDeserializer`.
    """
        + _OUTPUT_OPTIONS
        + """
    Example::

        images = Base64ImageDeserializer("train_b64.txt", StreamDefs(
            features=StreamDef(field="image", transforms=[T.scale(64, 64, 3)]),
            labels=StreamDef(field="label", shape=10)))
    """
    )

    def _index_images(self, config: _Streams) -> tuple[KeyColumn, np.ndarray, int]:
        require_regular_file(self.filename, "Base64 image file")  # read by offset; opening a FIFO would wait
        self._file = open_data_file(self.filename, "Base64 image", allow_empty=True)  # indexed as opened, by offset
        try:
            with self._file.staged([(0, self._file.size)]):  # (a remote object: fetched as it is indexed)
                self.index: Base64Index = index_base64(self.filename, label_dim=config.label_dim, fd=self._file.fd)
            self._file.check_unchanged("indexed")
            if len(self.index) == 0:
                raise FormatError("the file holds no image", Location(self.filename, 0))
        except BaseException:
            self._file.close()
            raise
        self.parsed_files = [(self.filename, self._file.identity)]
        return self.index.keys, self.index.labels, 1

    def _read(self, image: int) -> bytes | None:
        self._file.require_open()
        offset, length = int(self.index.payload_offsets[image]), int(self.index.payload_lengths[image])
        try:
            with self._file.staged([(offset, offset + length)]):
                return decode_base64_image_bytes(self._file.fd, offset, length)
        except _native.ShortRead:
            self._file.check_unchanged("indexed")
            raise FormatError("the file is shorter than when it was indexed", self._where(image)) from None

    def _check_unchanged(self, first: int, end: int) -> None:
        self._file.check_unchanged("indexed")

    def _staged(self, first: int, end: int) -> contextlib.AbstractContextManager[None]:
        starts = self.index.payload_offsets[first:end]
        return self._file.staged(list(zip(starts.tolist(), (starts + self.index.payload_lengths[first:end]).tolist())))

    def _where(self, image: int) -> Location:
        return self.index.location(image)

    def fingerprint(self) -> list[Any]:
        return [type(self).__name__, *self._file.fingerprint()]

    def identity(self) -> dict[str, Any]:
        """The file (sampled bytes and every image's byte range), the index and the labels."""
        layout = [self.index.payload_offsets, self.index.payload_lengths]
        return {**super().identity(), "files": [file_entry(self._file, layout)]}

    def close(self) -> None:
        self._file.close()

    def __reduce__(self) -> tuple[Any, ...]:
        return pickled_as_arguments(self)


__all__: Sequence[str] = ["Base64ImageDeserializer", "ImageDeserializer"]
