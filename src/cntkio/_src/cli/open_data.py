"""Opens a data file by what it holds, for the commands that take a FILE (``cntkio explain``, ``cntkio stats``): a CBF
file (known by its magic number) with the streams it declares, anything else as CTF with its streams inferred from a
scan (:func:`cntkio.infer.infer_streams`)."""

from __future__ import annotations

import os

from cntkio._src.common.errors import ConfigError
from cntkio._src.formats.cbf import CBFDeserializer
from cntkio._src.formats.ctf import DEFAULT_CHUNK_SIZE_IN_BYTES, CTFDeserializer
from cntkio._src.formats.ctf_infer import infer_streams
from cntkio._src.formats.protocol import Deserializer
from cntkio._src.formats.sniff import CBF_MAGIC


def is_cbf(path: str | os.PathLike[str]) -> bool:
    """Whether the file starts with CBF's magic number."""
    with open(path, "rb") as f:
        return f.read(len(CBF_MAGIC)) == CBF_MAGIC


def open_deserializer(
    path: str | os.PathLike[str], *, chunk_size_in_bytes: int | None = None, max_errors: int = 0
) -> Deserializer:
    """A deserializer of every stream of the file. ``chunk_size_in_bytes`` (CTF only: CBF chunks are the file's)
    and ``max_errors`` (bad CTF records skipped and counted) are :class:`~cntkio.CTFDeserializer`'s options.

    Raises:
        OSError: the file cannot be read.
        ConfigError: no stream found in a CTF file, or a chunk size given for a CBF file.
        FormatError: the file is malformed.
    """
    if os.path.isdir(path):
        raise IsADirectoryError(21, "it is a directory", os.fspath(path))
    if is_cbf(path):
        if chunk_size_in_bytes is not None:
            raise ConfigError(f"'{os.fspath(path)}' is a CBF file: its chunks are the file's (no chunk size applies)")
        return CBFDeserializer(path, trace_level=0)
    inferred = infer_streams(path)
    if not inferred:
        raise ConfigError(f"no '|name' input found in '{os.fspath(path)}'")
    streams = {s.alias: s.stream_def() for s in inferred}
    return CTFDeserializer(
        path, streams, max_errors=max_errors, trace_level=0,
        chunk_size_in_bytes=chunk_size_in_bytes or DEFAULT_CHUNK_SIZE_IN_BYTES,
    )  # fmt: skip
