"""The formats cntkio reads, in one table: for each, its name (what ``cntkio inspect --format`` takes), its title in
messages, its deserializer, its names in BrainScript reader sections, what gives a file of it away (magic number,
text header, name extension: :mod:`cntkio._src.formats.sniff` reads these), how a whole file opens as a deserializer
with the streams it holds or declares, and its writer.

Users of the table look formats up here instead of switching on their names: sniffing, the BrainScript reader
config (deserializer types and modules), and the command line (``inspect``, ``validate``, ``convert``, ``stats``,
``explain``, ``read``). The command line's own per-format hooks (how ``inspect`` reports a format) live beside its
commands, keyed by :attr:`Format.name` (this layer imports nothing of the command line).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from cntkio._src.common.errors import ConfigError
from cntkio._src.common.streams import StreamDef, StreamDefs
from cntkio._src.formats.cbf import CBFDeserializer
from cntkio._src.formats.cbf_writer import MAGIC, write_cbf
from cntkio._src.formats.ctf import DEFAULT_CHUNK_SIZE_IN_BYTES, CTFDeserializer
from cntkio._src.formats.ctf_infer import infer_streams
from cntkio._src.formats.data_file import read_head
from cntkio._src.formats.htk_features import HTKFeatureDeserializer
from cntkio._src.formats.htk_labels import HTKMLFDeserializer
from cntkio._src.formats.image import Base64ImageDeserializer, ImageDeserializer
from cntkio._src.formats.kaldi import KaldiDeserializer
from cntkio._src.formats.protocol import Deserializer


class Opener(Protocol):
    """Opens a whole file as a deserializer of every stream it holds (CTF: inferred from a scan) or declares (CBF).
    ``chunk_size_in_bytes`` (None: the format's default) and ``max_errors`` (bad records skipped and counted) are
    the deserializer's options, where the format has them."""

    def __call__(self, path: str, *, chunk_size_in_bytes: int | None = None, max_errors: int = 0) -> Deserializer: ...


@dataclass(frozen=True)
class Format:
    """One format cntkio reads (see the module).

    Attributes:
        name: the short name (``"ctf"``): what ``--format`` takes, and the key of the command line's hooks.
        title: how messages name it (``"CTF (CNTK text format)"``).
        deserializer: the class reading it; None for a config (it describes readers, it is not data).
        brainscript_type: the ``type`` of its deserializer in a composite reader section ("": it has none).
        brainscript_module: the ``module`` of that deserializer, also the legacy ``readerType`` reading it.
        magic: the bytes a file of it starts with (b"" when it has none).
        header: a text header a file of it starts with (b"" when it has none).
        extensions: name extensions (lower case, with the dot) that decide when the content does not.
        open: opens a file as a deserializer with its streams from the file alone (None: it needs more, such as
            stream dimensions or a state list, which a config or the format's own options give).
        writer: writes a deserializer's data as a file of this format (``writer(deserializer, path, **options)``);
            None when cntkio writes no such files.
    """

    name: str
    title: str
    deserializer: type[Deserializer] | None = None
    brainscript_type: str = ""
    brainscript_module: str = ""
    magic: bytes = b""
    header: bytes = b""
    extensions: tuple[str, ...] = ()
    open: Opener | None = None
    writer: Callable[..., Any] | None = None


def _open_ctf(path: str, *, chunk_size_in_bytes: int | None = None, max_errors: int = 0) -> Deserializer:
    inferred = infer_streams(path)
    if not inferred:
        raise ConfigError(f"no '|name' input found in '{path}'")
    streams = {s.alias: s.stream_def() for s in inferred}
    return CTFDeserializer(
        path, streams, max_errors=max_errors, trace_level=0,
        chunk_size_in_bytes=chunk_size_in_bytes or DEFAULT_CHUNK_SIZE_IN_BYTES,
    )  # fmt: skip


def _open_cbf(path: str, *, chunk_size_in_bytes: int | None = None, max_errors: int = 0) -> Deserializer:
    if chunk_size_in_bytes is not None:
        raise ConfigError(f"'{path}' is a CBF file: its chunks are the file's (no chunk size applies)")
    return CBFDeserializer(path, trace_level=0)


CTF = Format(
    "ctf", "CTF (CNTK text format)", CTFDeserializer, "CNTKTextFormatDeserializer", "CNTKTextFormatReader",
    open=_open_ctf,
)  # fmt: skip
CBF = Format(
    "cbf", "CBF (CNTK binary format)", CBFDeserializer, "CNTKBinaryFormatDeserializer", "CNTKBinaryReader",
    magic=struct.pack("<Q", MAGIC), open=_open_cbf, writer=write_cbf,
)  # fmt: skip
SCP = Format(
    "scp", "an SCP list of HTK feature files", HTKFeatureDeserializer, "HTKFeatureDeserializer", "HTKDeserializers",
    extensions=(".scp",),
)  # fmt: skip
MLF = Format(
    "mlf", "an HTK master label file (MLF)", HTKMLFDeserializer, "HTKMLFDeserializer", "HTKDeserializers",
    header=b"#!MLF!#",
)  # fmt: skip
IMAGE_MAP = Format("image-map", "an image map file", ImageDeserializer, "ImageDeserializer", "ImageReader")
BASE64_IMAGE = Format(
    "base64-image", "a Base64 image file", Base64ImageDeserializer, "Base64ImageDeserializer", "ImageReader"
)


def _open_kaldi(path: str, *, chunk_size_in_bytes: int | None = None, max_errors: int = 0) -> Deserializer:
    if chunk_size_in_bytes is not None:
        raise ConfigError(f"'{path}' is read as Kaldi features: its chunks count frames (no chunk size applies)")
    return KaldiDeserializer(StreamDefs(features=StreamDef(scp=path)), max_errors=max_errors, trace_level=0)


KALDI = Format(
    "kaldi", "Kaldi features (a binary archive, or a feats.scp listing one)", KaldiDeserializer, extensions=(".ark",),
    open=_open_kaldi,
)  # fmt: skip
CONFIG = Format("config", "a BrainScript config", extensions=(".cntk", ".bs", ".config"))

FORMATS: tuple[Format, ...] = (CTF, CBF, SCP, MLF, IMAGE_MAP, BASE64_IMAGE, KALDI, CONFIG)
NAMES: tuple[str, ...] = tuple(f.name for f in FORMATS)
_BY_NAME = {f.name: f for f in FORMATS}


def get(name: str) -> Format:
    """The format called ``name`` (KeyError naming the known ones when there is none)."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"no format {name!r} (formats: {', '.join(NAMES)})") from None


def title(name: str) -> str:
    """How messages name the format ``name``; an unknown name (a deserializer's class, say) as it is."""
    found = _BY_NAME.get(name)
    return name if found is None else found.title


def by_magic(start: bytes) -> Format | None:
    """The format whose magic number a file starting with ``start`` begins with."""
    return next((f for f in FORMATS if f.magic and start.startswith(f.magic)), None)


def by_extension(path: str | os.PathLike[str]) -> Format | None:
    """The format a file name's extension names (for content that does not decide)."""
    extension = os.path.splitext(os.fspath(path))[1].lower()
    return next((f for f in FORMATS if extension in f.extensions), None)


def by_brainscript_type(type_name: str) -> Format | None:
    """The format whose deserializer a composite reader section names ``type = type_name`` (exact case)."""
    return next((f for f in FORMATS if f.brainscript_type and f.brainscript_type == type_name), None)


def opened_as(path: str | os.PathLike[str]) -> Format:
    """The format a data file is opened as by :attr:`Format.open`: the one whose magic number it starts with, else
    CTF (the text format, whose streams are found by a scan). ``OSError`` when it cannot be read."""
    longest = max(len(f.magic) for f in FORMATS)
    return by_magic(read_head(os.fspath(path), longest)) or CTF

