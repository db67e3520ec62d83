"""The images of a map file (or a base64 file) as their encoded bytes, undecoded: a deserializer whose image stream
gives each sequence its file's bytes (:class:`~cntkio._src.integrations.chunk_rows.EncodedStream`), for the rows of
:class:`cntkio.ray.ImageDatasource` with ``encoded=True`` (a ``large_binary`` column: the JPEG or PNG as it is).

It reads through :class:`~cntkio._src.formats.image.ImageDeserializer` (the index, the keys and labels, zip archives
and base64 decoding) without decoding or transforming: an image file that cannot be read, or a base64 line that is
not valid base64, is a bad record under ``max_errors`` (an error naming the file's line: raised when
``max_errors=0``, otherwise counted and the sequence skipped); image bytes that do not decode as an image are not
noticed here (they are given as they are).
"""

from __future__ import annotations

import functools
import os
from typing import Any

import numpy as np

from cntkio._src.common.errors import FormatError
from cntkio._src.common.streams import StreamInformation
from cntkio._src.formats.image import Base64ImageDeserializer, ImageDeserializer, ImageDeserializerBase
from cntkio._src.formats.protocol import ChunkIndex, Deserializer, ParsedChunk, SequenceIndex, SparseStream
from cntkio._src.integrations.chunk_rows import EncodedStream

UNUSABLE = 2  # ParsedChunk.invalid: a sequence without usable data


class EncodedImages(Deserializer):
    """The images of ``map_file`` as encoded bytes (see the module); ``streams`` as for the image deserializer (its
    transforms are not applied)."""

    duplicate_key_copy = "last"

    def __init__(self, map_file: str | os.PathLike[str], streams: Any, *, base64: bool = False, **options: Any):
        reader = Base64ImageDeserializer if base64 else ImageDeserializer
        self.images: ImageDeserializerBase = reader(map_file, streams, **options)
        infos = self.images.stream_infos()
        self.image_name = infos[0].name
        self.encoded_streams = (self.image_name,)
        self._infos = [StreamInformation(self.image_name, 0, "dense", np.dtype(np.uint8), (1,)), *infos[1:]]
        self.errors = self.images.errors

    @property
    def source_name(self) -> str:
        return self.images.source_name

    def stream_infos(self) -> list[StreamInformation]:
        return list(self._infos)

    def num_chunks(self) -> int:
        return self.images.num_chunks()

    def chunk_index(self, chunk_id: int) -> ChunkIndex:
        return self.images.chunk_index(chunk_id)

    def sequence_index(self) -> SequenceIndex:
        return self.images.sequence_index()

    def close(self) -> None:
        self.images.close()

    def get_chunk(self, chunk_id: int) -> ParsedChunk:
        images = self.images
        a, b = images._chunk_range(chunk_id)
        views = images._views
        items: list[bytes] = []
        invalid = np.zeros(b - a, dtype=np.uint8)
        reported = -1
        for sequence in range(a, b):
            image = sequence // views
            try:
                data = images._read(image)
            except FormatError as error:
                if images.errors.max_errors == 0:
                    raise
                images.errors.add(("image", image), functools.partial(_given, error), kind="bad image", chunk=chunk_id)
                data, reported = None, image
            if data is None:  # invalid base64: counted (or raised) as the decoding reader does
                if image != reported:  # once per image (not per view), as the decoding reader counts it
                    reported = image
                    reason = f"cannot decode {images._image_name(image)} (invalid base64)"
                    images._bad(image, reason, images._where(image), chunk_id)
                invalid[sequence - a] = UNUSABLE
            items.append(b"" if data is None else bytes(data))
        offsets = np.arange(b - a + 1, dtype=np.int64)
        result = ParsedChunk({self.image_name: EncodedStream(items, offsets)}, invalid=invalid)
        if len(self._infos) > 1:
            labels = images._labels
            assert labels is not None
            info = self._infos[1]
            classes = labels[(a + np.arange(b - a)) // views].astype(np.int32)
            result[info.name] = SparseStream(
                np.ones(b - a, dtype=info.dtype), classes, offsets.copy(), offsets.copy(), int(info.shape[0])
            )
        return result


def _given(error: FormatError) -> FormatError:
    return error
