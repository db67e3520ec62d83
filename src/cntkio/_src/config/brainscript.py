"""BrainScript reader configs: a CNTK ``.cntk`` file's reader section becomes a :class:`~cntkio.MinibatchSource`.

Both forms load — the legacy ``readerType = "CNTKTextFormatReader"`` (``CNTKBinaryReader``, ``ImageReader``,
``HTKMLFReader``, ``HTKDeserializers``) and the composite ``deserializers = ( ... )`` — with CNTK's defaults for
randomization windows and packing. Unknown keys are errors naming the file and line (with a "did you mean");
the keys cntkio deliberately ignores are listed in :data:`IGNORED_KEYS` and logged on the ``cntkio.brainscript``
logger.

Example::

    from cntkio.brainscript import load_reader

    source = load_reader("ATIS.cntk", section="Train.reader", variables={"DataDir": "data"})
    for epoch in range(3):
        source.start_epoch(epoch)               # the config's epochSize (default: one sweep per epoch)
        while mb := source.next_minibatch(1024):
            ...
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from cntkio._src.api.source import MinibatchSource
from cntkio._src.common.errors import ConfigError
from cntkio._src.config.keys import IGNORED_KEYS
from cntkio._src.config.readers import ReaderPlan, build_reader
from cntkio._src.config.syntax import Section, Value, parse_config

__all__ = ["IGNORED_KEYS", "ReaderPlan", "Section", "Value", "load_config", "load_reader", "reader_plan",
           "reader_sections"]  # fmt: skip

Variables = Mapping[str, object] | Sequence[str] | None


def load_config(path_or_text: str | os.PathLike[str], variables: Variables = None) -> Section:
    """The parsed config (its top-level section): from a file, or from config text (anything holding ``=``).

    ``variables`` overrides top-level definitions as CNTK's command line did: ``{"DataDir": "/data"}``, dotted
    paths (``{"Train.reader.randomize": False}``) or CNTK command-line strings (``["DataDir=/data"]``).
    ``$ConfigDir$`` (the file's folder), ``$DataDir$`` (the same, unless defined), ``$RunDir$`` (the current
    directory) and ``$DeviceId$`` (-1) are predefined.
    """
    text, name, folder = _read(path_or_text)
    predefined = {"ConfigDir": folder, "DataDir": folder, "RunDir": os.getcwd(), "DeviceId": "-1"}
    overrides = None if variables is None else variables if isinstance(variables, Mapping) else list(variables)
    return parse_config(text, name, overrides=overrides, predefined=predefined)


def _read(path_or_text: str | os.PathLike[str]) -> tuple[str, str, str]:
    """(text, name for messages, folder of the file) — text is recognised by an ``=``, a newline or a brace."""
    if not isinstance(path_or_text, os.PathLike) and any(c in path_or_text for c in "=\n[{"):
        return path_or_text, "<config text>", os.getcwd()
    path = Path(path_or_text)
    if "\x00" in str(path):
        raise ConfigError(f"cannot read the config {str(path)!r}: a file name cannot hold a NUL byte (\\x00)")
    try:
        data = path.read_bytes()
    except OSError as error:
        raise ConfigError(f"cannot read the config {str(path)!r}: {error.strerror}") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise ConfigError(f"{path}: not a text config (byte {error.start} is not UTF-8)") from None
    return text, str(path), str(path.resolve().parent)


def reader_plan(
    path_or_text: Section | str | os.PathLike[str],
    section: str = "reader",
    variables: Variables = None,
    *,
    base_dir: str | os.PathLike[str] | None = None,
    compat: bool = False,
) -> ReaderPlan:
    """The deserializers and ``MinibatchSource`` options a reader section describes (what :func:`load_reader`
    builds its source from; add your own deserializers to ``plan.deserializers`` before making the source).
    ``path_or_text`` may be a config :func:`load_config` parsed (``variables`` are then already applied)."""
    config = path_or_text if isinstance(path_or_text, Section) else load_config(path_or_text, variables)
    reader = _reader_section(config, section)
    return build_reader(reader, os.fspath(base_dir) if base_dir is not None else os.getcwd(), compat=compat)


def load_reader(
    path_or_text: Section | str | os.PathLike[str],
    section: str = "reader",
    variables: Variables = None,
    *,
    base_dir: str | os.PathLike[str] | None = None,
    compat: bool = False,
    **source_options: Any,
) -> MinibatchSource:
    """The :class:`~cntkio.MinibatchSource` a BrainScript reader section describes.

    ``section`` is the dotted path of the reader block (``"reader"``, ``"Train.reader"``); ``variables``
    overrides definitions (see :func:`load_config`). Relative data paths resolve against ``base_dir``, by
    default the current directory, as in CNTK. ``source_options`` override what the config sets
    (``max_samples=INFINITELY_REPEAT``, ``prefetch=False``, ...). The source's epoch is the config's
    ``epochSize`` (the reader's, or of the ``SGD`` section beside it; 0 or absent: one sweep), so
    ``source.start_epoch(e)`` reads epoch ``e`` as CNTK's training loop did. ``compat=True`` reads exactly as
    CNTK did: its randomized order and its CTF parsing quirks (``MinibatchSource(compat=True)``).
    ``path_or_text`` may be a config :func:`load_config` parsed (``variables`` are then already applied).
    """
    plan = reader_plan(path_or_text, section, variables, base_dir=base_dir, compat=compat)
    try:
        return MinibatchSource(plan.deserializers, **{**plan.options, **source_options})
    except BaseException:
        plan.close()
        raise


def _reader_section(config: Section, dotted: str) -> Section:
    try:
        return config.path(dotted)
    except ConfigError as error:
        found = reader_sections(config)
        listing = ", ".join(found) if found else "none"
        raise ConfigError(f"{error} (reader sections in this config: {listing})") from None


def reader_sections(config: Section | str | os.PathLike[str], variables: Variables = None) -> list[str]:
    """Dotted paths of the sections that describe a reader (hold ``readerType`` or ``deserializers``)."""
    top = config if isinstance(config, Section) else load_config(config, variables)
    found: list[str] = []

    def walk(section: Section, path: str, depth: int) -> None:
        for value in section.values():
            if not value.is_section or depth > 4:
                continue
            child_path = f"{path}.{value.key}" if path else value.key
            try:
                child = section.section(value.key)
                if "readerType" in child or "deserializers" in child:
                    found.append(child_path)
                else:
                    walk(child, child_path, depth + 1)
            except ConfigError:  # a block of BrainScript expressions, not config records
                continue

    walk(top, "", 0)
    return found
