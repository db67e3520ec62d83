"""``cntkio inspect FILE...`` summarises data files of any format cntkio reads and checks them; ``cntkio validate
FILE...`` reads data files (or the readers of BrainScript configs) to the end and lists every error.

A file's format is detected from its content and name (:mod:`cntkio._src.formats.sniff`, from the format registry)
or given by ``--format``; :data:`INSPECTORS` says how each format of the registry is reported.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

from cntkio._src.cli.common import (
    EXIT_INVALID,
    EXIT_OK,
    add_progress_option,
    add_variable_option,
    cannot_read,
    close_source,
    count,
    fail,
    open_source,
    positive_int,
    refuse_remote_argument,
    stream_spec,
    write_json,
)
from cntkio._src.cli.inspect_ctf import (
    SHOWN_PER_GROUP,
    Progress,
    Report,
    compare_streams,
    inspect_file,
    unknown_inputs,
)
from cntkio._src.cli.inspect_formats import (
    inspect_cbf,
    inspect_image_map,
    inspect_kaldi,
    inspect_mlf,
    inspect_reader,
    inspect_scp,
)
from cntkio._src.cli.report_text import print_report, print_validation, several_dict, validation_dict, write_agreement
from cntkio._src.common.errors import ConfigError, FormatError
from cntkio._src.common.progress import Phases
from cntkio._src.formats import registry
from cntkio._src.formats.ctf import CTFDeserializer
from cntkio._src.formats.sniff import detect

DEFAULT_PREVIEW = 3
PHASE_UNITS = {"reading": "chunk", "checking files": "file", "decoding images": "image"}  # (others: bytes)


def add_commands(commands: Any) -> None:
    """Adds ``cntkio inspect`` and ``cntkio validate`` to the command line's subparsers."""
    inspect = commands.add_parser(
        "inspect",
        help="summarise data files (any format cntkio reads) and check them",
        description="Summarise data files: CTF, CBF, HTK features (SCP lists), MLF labels, image map and Base64 "
        "image files, or the readers of BrainScript configs (format detected from the content; --format forces "
        "it). Per stream: dimension, samples, samples per sequence, values; sequence lengths; a preview of the "
        "first sequences; Python that reads the file; and the errors, grouped by reason, with file:line:column. "
        "With several files, also whether their streams agree. Without --stream, CTF streams are inferred from a "
        "full scan. Exit status: 0 valid, 1 errors, 2 usage or I/O error, or a file that is not CNTK data.",
    )
    inspect.add_argument("files", metavar="FILE", nargs="+", help="files to inspect")
    _add_reading_options(inspect)
    inspect.add_argument(
        "--max-errors", metavar="N", type=positive_int,
        help="CTF: stop after the chunk holding the Nth error (in file order) and list the first N; the statistics "
        "cover what was read (default: read the whole file and count every error)",
    )  # fmt: skip
    inspect.add_argument(
        "--preview", metavar="N", type=count, default=DEFAULT_PREVIEW,
        help=f"show the first N sequences (default {DEFAULT_PREVIEW}; 0: none)",
    )  # fmt: skip
    inspect.set_defaults(handler=run_inspect)
    validate = commands.add_parser(
        "validate",
        help="read data files or configs to the end and list every error",
        description="Read every file to its end and report every error: grouped by reason (every one with "
        "--all-errors), or with --json as a list of {file, line, column, offset, sequence, stream, reason}. A "
        f"BrainScript config ({', '.join(registry.CONFIG.extensions)}) is checked by loading its reader sections "
        "(cntkio.brainscript) and validating the files of every deserializer they make. Exit status: 0 valid, "
        "1 invalid data, 2 usage error, unreadable file or a file that is not CNTK data.",
    )
    validate.add_argument("files", metavar="FILE", nargs="+", help="data files or BrainScript configs")
    _add_reading_options(validate)
    validate.set_defaults(handler=run_validate)


def _add_reading_options(command: argparse.ArgumentParser) -> None:
    """The options of ``inspect`` and ``validate`` that say how to read the files."""
    command.add_argument(
        "--format", choices=("auto", *registry.NAMES), default="auto",
        help="the files' format (default: detected from their content and name)",
    )  # fmt: skip
    command.add_argument(
        "--stream", metavar="NAME:DIM:dense|sparse[:ALIAS]", type=stream_spec, action="append", dest="streams",
        help="CTF: a stream to read (repeatable); the alias after '|' defaults to NAME. Default: inferred from the "
        "file (a sparse dimension inferred is a lower bound: the largest index + 1)",
    )  # fmt: skip
    command.add_argument(
        "--skip-sequence-ids", action="store_true", help="CTF: every line is a sequence; leading ids are ignored"
    )
    command.add_argument(
        "--optional-inputs", action="store_true",
        help="CTF: a stream may be absent from a sequence (otherwise that is an error)",
    )  # fmt: skip
    command.add_argument("--precision", choices=("float", "double"), default="float", help="CTF: value type")
    command.add_argument("--labels", metavar="STATES", help="MLF: the state list (one label name a line)")
    command.add_argument(
        "--section", metavar="NAME",
        help="config: the reader section to check, a dotted path such as Train.reader (default: every one)",
    )  # fmt: skip
    add_variable_option(command)
    command.add_argument("--json", action="store_true", help="print the report as JSON")
    command.add_argument(
        "--all-errors", action="store_true",
        help=f"list every error (default: grouped by reason, the first {SHOWN_PER_GROUP} locations of each)",
    )  # fmt: skip
    add_progress_option(command)


class NotData(Exception):
    """A file that is not data cntkio reads (exit status 2); the message says what it seems to be."""


def run_inspect(args: argparse.Namespace) -> int:
    """Runs ``cntkio inspect``; returns the exit status."""
    return _check_files(args, "inspect")


def run_validate(args: argparse.Namespace) -> int:
    """Runs ``cntkio validate``; returns the exit status."""
    return _check_files(args, "validate")


def _check_files(args: argparse.Namespace, command: str) -> int:
    """``inspect`` and ``validate``: a report per file (per deserializer of a config), printed or as JSON."""
    reports: list[Report] = []
    for path in args.files:
        try:
            reports += _reports_of(path, args, command)
        except NotData as e:
            return fail(command, str(e))
        except OSError as e:
            return fail(command, cannot_read(e, path))
        except (ConfigError, ImportError) as e:
            return fail(command, str(e))
    problems = compare_streams(reports) if command == "inspect" else []
    if command == "validate":
        if args.json:
            write_json(validation_dict(reports))
        else:
            print_validation(reports, sys.stdout, all_errors=args.all_errors)
    elif args.json:
        write_json(reports[0].to_dict() if len(reports) == 1 else several_dict(reports, problems))
    else:
        for number, report in enumerate(reports):
            out = sys.stdout
            if number:
                out.write("\n")
            print_report(report, out, all_errors=args.all_errors)
        if sum(1 for r in reports if r.streams) > 1:
            write_agreement(reports, problems, sys.stdout)
    return EXIT_OK if all(r.ok for r in reports) and not problems else EXIT_INVALID


def _reports_of(path: str, args: argparse.Namespace, command: str) -> list[Report]:
    """The reports of one file argument: its format detected (or ``--format``), then read to the end."""
    refuse_remote_argument(path)
    if os.path.isdir(path):
        raise IsADirectoryError(21, "it is a directory", path)
    detection = detect(path)
    form = detection.format if args.format == "auto" else args.format
    if form is None:
        others = ", ".join(name for name in registry.NAMES if name != registry.CTF.name)
        raise NotData(
            f"'{path}' is not a CNTK data file: it looks like {detection}. To read it anyway, give its "
            f"format: --format {registry.CTF.name} (or {others})"
        )
    with Phases(args.progress, label=os.path.basename(path), units=PHASE_UNITS) as progress:
        if form == registry.CONFIG.name:  # readers, not data: a report per deserializer
            return validate_config(path, args.section, progress, variables=args.var)
        if args.var and len(args.files) == 1:
            raise ConfigError(f"--var is for BrainScript configs; '{path}' is read as {registry.title(form)}")
        if args.streams and form != registry.CTF.name:
            raise ConfigError(f"--stream is for CTF files; '{path}' is read as {registry.title(form)}")
        report = INSPECTORS[form](path, args, progress, command == "validate")
    report.detected = detection.reason if args.format == "auto" else "given by --format"
    if args.format != "auto" and detection.format != args.format:
        report.notes.append(f"this does not look like {registry.title(args.format)}: it looks like {detection}")
    return [report]


# ------------------------------------------------------------------------------------------- per format
# (path, the command's arguments, progress, whether to validate: read everything) -> the file's report
Inspector = Callable[[str, argparse.Namespace, Progress, bool], Report]


def _inspect_ctf(path: str, args: argparse.Namespace, progress: Progress, full: bool) -> Report:
    return inspect_file(
        path, args.streams, max_errors=getattr(args, "max_errors", None), skip_sequence_ids=args.skip_sequence_ids,
        precision=args.precision, optional_inputs=args.optional_inputs, progress=progress,
        preview=getattr(args, "preview", 0),
    )  # fmt: skip


def _inspect_cbf(path: str, args: argparse.Namespace, progress: Progress, full: bool) -> Report:
    return inspect_cbf(path, progress=progress, preview=getattr(args, "preview", 0))


def _inspect_scp(path: str, args: argparse.Namespace, progress: Progress, full: bool) -> Report:
    return inspect_scp(path, progress=progress, preview=getattr(args, "preview", 0))


def _inspect_kaldi(path: str, args: argparse.Namespace, progress: Progress, full: bool) -> Report:
    return inspect_kaldi(path, progress=progress, preview=getattr(args, "preview", 0))


def _inspect_mlf(path: str, args: argparse.Namespace, progress: Progress, full: bool) -> Report:
    return inspect_mlf(path, labels=args.labels, preview=getattr(args, "preview", 0))


def _inspect_images(*, base64: bool) -> Inspector:
    def inspect(path: str, args: argparse.Namespace, progress: Progress, full: bool) -> Report:
        preview = getattr(args, "preview", 0)
        return inspect_image_map(path, base64=base64, full=full, progress=progress, preview=preview)

    return inspect


# how inspect and validate report a data file of each format of the registry (a config: validate_config)
INSPECTORS: dict[str, Inspector] = {
    registry.CTF.name: _inspect_ctf,
    registry.CBF.name: _inspect_cbf,
    registry.SCP.name: _inspect_scp,
    registry.MLF.name: _inspect_mlf,
    registry.IMAGE_MAP.name: _inspect_images(base64=False),
    registry.BASE64_IMAGE.name: _inspect_images(base64=True),
    registry.KALDI.name: _inspect_kaldi,
}


def validate_config(
    path: str, section: str | None, progress: Progress | None = None, *, variables: list[str] | None = None
) -> list[Report]:
    """Validates a BrainScript config: a report per deserializer of each reader section (or of ``section``), as
    :func:`cntkio.brainscript.load_reader` loads it with ``variables`` (``NAME=VALUE`` overrides, as on CNTK's
    command line), each read through to the end. ``cntkio.brainscript`` is imported here, only for configs."""
    from cntkio._src.config.brainscript import load_config, reader_sections

    config = load_config(path, list(variables) if variables else None)
    sections = [section] if section else reader_sections(config)
    if not sections:
        raise ConfigError(f"'{path}': no reader section (a block holding readerType or deserializers)")
    reports = []
    for name in sections:
        try:
            source = open_source(config, section=name, prefetch=False)
        except FormatError as e:  # the data of a deserializer that indexes its files when it is made
            report = Report(path, os.path.getsize(path), False, [], format=registry.CONFIG.name, fatal=e)
            report.summary["section"] = name
            reports.append(report)
            continue
        try:
            for deserializer in source.deserializers:
                report = inspect_reader(deserializer, progress=progress)
                if isinstance(deserializer, CTFDeserializer) and report.fatal is None:
                    unknown_inputs(report, deserializer.filename, f"reader section '{name}'", progress)
                report.summary["section"] = name
                report.detected = f"a deserializer of reader section '{name}' of {path}"
                reports.append(report)
        finally:
            close_source(source)
    return reports
