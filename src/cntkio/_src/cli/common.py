"""What the commands share: exit statuses, argument types and options, error and JSON output, and opening a path as
a reader (:func:`open_source`: a BrainScript config's reader section, or a data file whose format the registry
tells)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from cntkio._src.api.source import MinibatchSource
from cntkio._src.cli.inspect_ctf import StreamSpec
from cntkio._src.common.errors import ConfigError, FormatError
from cntkio._src.config.syntax import Section
from cntkio._src.formats import registry, remote
from cntkio._src.formats.protocol import Deserializer

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2

PROGRESS_HELP = (
    "progress bars on stderr (need tqdm: pip install 'cntkio[progress]'; default: when stderr is a terminal, tqdm "
    "is installed and the work takes more than a second)"
)

VARIABLE_HELP = (
    "CONFIG: give a variable this value, overriding the config's definition, as on CNTK's command line "
    "(repeatable), e.g. --var DataDir=../Data for $DataDir$"
)


# ------------------------------------------------------------------------------------------- arguments
def positive_int(text: str) -> int:
    if not text.isdigit() or int(text) <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return int(text)


def count(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return int(text)


def stream_spec(text: str) -> StreamSpec:
    """Parses ``NAME:DIM:dense|sparse[:ALIAS]`` (the alias defaults to the name)."""
    parts = text.split(":", 3)
    if len(parts) < 3:
        raise argparse.ArgumentTypeError(f"expected NAME:DIM:dense|sparse[:ALIAS], got {text!r}")
    name, dim, storage = parts[0], parts[1], parts[2].lower()
    alias = parts[3] if len(parts) == 4 else name
    if not name or not alias:
        raise argparse.ArgumentTypeError(f"empty stream name or alias in {text!r}")
    if not dim.isdigit() or int(dim) <= 0:
        raise argparse.ArgumentTypeError(f"DIM must be a positive integer, got {dim!r} in {text!r}")
    if storage not in ("dense", "sparse"):
        raise argparse.ArgumentTypeError(f"format must be 'dense' or 'sparse', got {parts[2]!r} in {text!r}")
    return StreamSpec(name, int(dim), storage == "sparse", alias)


def variable(text: str) -> str:
    """A ``--var NAME=VALUE`` argument, checked (kept as text: CNTK's command-line form of an override)."""
    name, equals, _ = text.partition("=")
    if not equals or not name.strip():
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return text


def add_variable_option(command: argparse.ArgumentParser, help: str = VARIABLE_HELP) -> None:
    """``--var NAME=VALUE`` (repeatable): a config variable's value, as on CNTK's command line."""
    command.add_argument("--var", metavar="NAME=VALUE", type=variable, action="append", default=[], help=help)


def add_progress_option(command: argparse.ArgumentParser, help: str = PROGRESS_HELP) -> None:
    """``--progress/--no-progress`` (None when neither is given: see :func:`cntkio._src.common.progress.wanted`)."""
    command.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None, help=help)


# ------------------------------------------------------------------------------------------- output
def fail(command: str, message: str) -> int:
    """Prints ``cntkio COMMAND: error: MESSAGE`` on stderr; returns the usage-error exit status."""
    print(f"cntkio {command}: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def cannot_read(error: OSError, path: str) -> str:
    """An ``OSError`` reading ``path`` (or the file it names) as a message."""
    return f"cannot read '{error.filename or path}': {error.strerror or error}"


def format_error(error: FormatError) -> str:
    """``file:line:column: reason (sequence KEY, input 'NAME')``."""
    where = error.file
    if error.line is not None:
        where += f":{error.line}" + (f":{error.column}" if error.column is not None else "")
    details = [f"sequence {error.sequence_key}"] if error.sequence_key is not None else []
    if error.input is not None:
        details.append(f"input '{error.input}'")
    return f"{where}: {error.reason}" + (f" ({', '.join(details)})" if details else "")


def write_json(data: Any) -> None:
    """``data`` as indented JSON on stdout (what JSON cannot hold as its text)."""
    json.dump(data, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


# ------------------------------------------------------------------------------------------- opening data
def is_config(path: str, section: str | None = None) -> bool:
    """Whether ``path`` is opened as a BrainScript config: a reader section is named, or its name says it is one
    (the registry's config extensions)."""
    return section is not None or registry.by_extension(path) is registry.CONFIG


def open_deserializer(
    path: str | os.PathLike[str], *, chunk_size_in_bytes: int | None = None, max_errors: int = 0
) -> Deserializer:
    """A deserializer of every stream of a data file, opened as :func:`cntkio._src.formats.registry.opened_as`
    tells: CBF (known by its magic number) with the streams it declares, anything else as CTF with its streams
    inferred from a scan. ``chunk_size_in_bytes`` (CTF only: CBF chunks are the file's) and ``max_errors`` (bad CTF
    records skipped and counted) are the deserializer's options.

    Raises:
        OSError: the file cannot be read (a directory among them).
        ConfigError: no stream found in a CTF file, or a chunk size given for a CBF file.
        FormatError: the file is malformed.
    """
    refuse_remote_argument(os.fspath(path))
    if os.path.isdir(path):
        raise IsADirectoryError(21, "it is a directory", os.fspath(path))
    form = registry.opened_as(path)
    if form.open is None:  # (every format opened_as gives has one)
        raise ConfigError(f"'{os.fspath(path)}' is {form.title}: it opens only through a reader config")
    return form.open(os.fspath(path), chunk_size_in_bytes=chunk_size_in_bytes, max_errors=max_errors)


def refuse_remote_argument(path: str) -> None:
    """Raises a :class:`ConfigError` when a command is given remote data: the commands read local files (the
    deserializers read remote ones)."""
    if remote.is_remote(path):
        raise ConfigError(
            f"'{path}' is remote: cntkio's commands read local files (copy it, or read it in Python: a deserializer "
            "takes the URL as its path)"
        )


def dims_inferred(path: str | Section, section: str | None = None) -> bool:
    """Whether :func:`open_source` (or :func:`open_deserializer`) infers the streams of ``path`` from its content
    (a CTF data file): a sparse dimension is then a lower bound. A config's, or a CBF file's, are given."""
    if isinstance(path, Section) or is_config(path, section):
        return False
    refuse_remote_argument(path)
    return registry.opened_as(path) is registry.CTF


def sgd_section(config: Section, reader_section: str) -> Section | None:
    """The ``SGD`` section beside a reader section (where CNTK's training loop found ``epochSize``, ``maxEpochs``
    and ``minibatchSize``), or None."""
    parent = config.path(reader_section).parent
    return parent.section("SGD") if parent is not None and "SGD" in parent else None


def sgd_minibatch_size(config: Section, reader_section: str) -> int | None:
    """The ``minibatchSize`` of the ``SGD`` section beside a reader section (its first epoch's), or None."""
    sgd = sgd_section(config, reader_section)
    value = None if sgd is None else sgd.get("minibatchSize")
    return None if value is None else int(value.as_numbers()[0])


def open_source(
    path: str | Section,
    *,
    section: str | None = None,
    variables: dict[str, str] | None = None,
    base_dir: str | None = None,
    chunk_size_in_bytes: int | None = None,
    max_errors: int = 0,
    **source_options: Any,
) -> MinibatchSource:
    """Opens ``path`` as a reader, as every command does. A BrainScript config (:func:`is_config`, or a config
    already parsed) gives the source of its reader ``section`` (default ``"reader"``), ``variables`` overriding its
    definitions and relative data paths resolving against ``base_dir`` (:func:`cntkio.brainscript.load_reader`,
    imported only for configs). Anything else is a data file: a source of every stream of it
    (:func:`open_deserializer`: CBF by its magic number, else CTF with its streams inferred),
    ``chunk_size_in_bytes`` and ``max_errors`` its deserializer's options. ``source_options`` go to the source
    (overriding a config's). :func:`close_source` closes the source and its deserializers.

    Raises:
        OSError: the file cannot be read.
        CNTKIOError: an invalid config, no stream found, a malformed file.
    """
    if isinstance(path, Section) or is_config(path, section):
        from cntkio._src.config.brainscript import load_reader

        return load_reader(path, section or "reader", variables, base_dir=base_dir, **source_options)
    deserializer = open_deserializer(path, chunk_size_in_bytes=chunk_size_in_bytes, max_errors=max_errors)
    try:
        return MinibatchSource(deserializer, **source_options)
    except BaseException:
        deserializer.close()
        raise


def close_source(source: MinibatchSource) -> None:
    """Closes a source :func:`open_source` made, and its deserializers (the command owns them)."""
    deserializers = source.deserializers
    source.close()
    for deserializer in deserializers:
        deserializer.close()
