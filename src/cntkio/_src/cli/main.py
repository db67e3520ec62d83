"""The ``cntkio`` command line: ``cntkio inspect FILE...`` summarises data files of any format cntkio reads and
checks them; ``cntkio validate FILE...`` reads data files (or the readers of BrainScript configs) to the end and
lists every error; ``cntkio convert IN.ctf OUT.cbf`` writes a CTF file as CNTK Binary Format.

Exit status: 0 valid (converted), 1 errors found in the data, 2 usage error, unreadable file or a file that is not
data cntkio reads (``cntkio inspect notes.md``: it says what the file seems to be).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from cntkio._src.cli.explain import add_explain_command
from cntkio._src.cli.inspect_ctf import SHOWN_PER_GROUP, Report, StreamSpec, error_groups, error_to_dict
from cntkio._src.cli.read import add_read_command
from cntkio._src.cli.stats import add_stats_command
from cntkio._src.common.errors import ConfigError, FormatError
from cntkio._src.formats.cbf_writer import DEFAULT_CBF_CHUNK_SIZE_IN_BYTES
from cntkio._src.formats.sniff import FORMATS, TITLES

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2
DEFAULT_PREVIEW = 3
_HISTOGRAM_WIDTH = 40


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


def positive_int(text: str) -> int:
    if not text.isdigit() or int(text) <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return int(text)


def count(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return int(text)


def _add_reading_options(command: argparse.ArgumentParser) -> None:
    """The options of ``inspect`` and ``validate`` that say how to read the files."""
    command.add_argument(
        "--format", choices=("auto", *FORMATS), default="auto",
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
    command.add_argument("--json", action="store_true", help="print the report as JSON")
    command.add_argument(
        "--all-errors", action="store_true",
        help=f"list every error (default: grouped by reason, the first {SHOWN_PER_GROUP} locations of each)",
    )  # fmt: skip
    _add_progress_option(command)


def _add_progress_option(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--progress", action=argparse.BooleanOptionalAction, default=None,
        help="progress bars on stderr (need tqdm: pip install 'cntkio[progress]'; default: when stderr is a "
        "terminal, tqdm is installed and the work takes more than a second)",
    )  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cntkio", description="Tools for CNTK data files.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
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
    validate = commands.add_parser(
        "validate",
        help="read data files or configs to the end and list every error",
        description="Read every file to its end and report every error: grouped by reason (every one with "
        "--all-errors), or with --json as a list of {file, line, column, offset, sequence, stream, reason}. A "
        "BrainScript config (.cntk, .bs, .config) is checked by loading its reader sections "
        "(cntkio.brainscript) and validating the files of every deserializer they make. Exit status: 0 valid, "
        "1 invalid data, 2 usage error, unreadable file or a file that is not CNTK data.",
    )
    validate.add_argument("files", metavar="FILE", nargs="+", help="data files or BrainScript configs")
    _add_reading_options(validate)
    convert = commands.add_parser(
        "convert",
        help="convert a CTF file to CNTK Binary Format (CBF)",
        description="Write a CTF file as CBF (what CNTK's ctf2bin.py writes), through a temporary file renamed "
        "when complete. Without --stream, the streams are inferred from a full scan of the file. Exit status: "
        "0 converted, 1 errors in the data, 2 usage or I/O error.",
    )
    convert.add_argument("input", metavar="IN.ctf", help="CTF file to convert")
    convert.add_argument("output", metavar="OUT.cbf", help="CBF file to write")
    convert.add_argument(
        "--stream", metavar="NAME:DIM:dense|sparse[:ALIAS]", type=stream_spec, action="append", dest="streams",
        help="a stream to write (repeatable), in this order; default: inferred from the file",
    )  # fmt: skip
    convert.add_argument(
        "--chunk-size", metavar="BYTES", type=positive_int, default=DEFAULT_CBF_CHUNK_SIZE_IN_BYTES,
        help=f"CBF chunk size (default {DEFAULT_CBF_CHUNK_SIZE_IN_BYTES})",
    )  # fmt: skip
    convert.add_argument("--precision", choices=("float", "double"), default="float", help="value type")
    convert.add_argument("--max-errors", metavar="N", type=int, default=0, help="bad records to skip (default 0)")
    _add_progress_option(convert)
    add_explain_command(commands)
    add_stats_command(commands)
    add_read_command(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``cntkio`` console script; returns the exit status."""
    args = build_parser().parse_args(argv)
    logger = logging.getLogger("cntkio")
    level = logger.level
    logger.setLevel(logging.ERROR)  # every problem is in the report: no log lines on stderr
    try:
        if hasattr(args, "handler"):  # commands added by their own modules (explain, stats)
            return int(args.handler(args))
        return {"inspect": _inspect, "validate": _validate, "convert": _convert}[args.command](args)
    except BrokenPipeError:  # output piped into e.g. `head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_INVALID
    except KeyboardInterrupt:
        return 130
    finally:
        logger.setLevel(level)


class NotData(Exception):
    """A file that is not data cntkio reads (exit status 2); the message says what it seems to be."""


def _inspect(args: argparse.Namespace) -> int:
    return _check_files(args, "inspect")


def _validate(args: argparse.Namespace) -> int:
    return _check_files(args, "validate")


def _check_files(args: argparse.Namespace, command: str) -> int:
    """``inspect`` and ``validate``: a report per file (per deserializer of a config), printed or as JSON."""
    from cntkio._src.cli.inspect_ctf import compare_streams

    reports: list[Report] = []
    for path in args.files:
        try:
            reports += _reports_of(path, args, command)
        except NotData as e:
            return _fail(str(e), command)
        except OSError as e:
            return _fail(f"cannot read '{e.filename or path}': {e.strerror or e}", command)
        except (ConfigError, ImportError) as e:
            return _fail(str(e), command)
    problems = compare_streams(reports) if command == "inspect" else []
    if command == "validate":
        if args.json:
            _write_json(validation_dict(reports))
        else:
            print_validation(reports, sys.stdout, all_errors=args.all_errors)
    elif args.json:
        _write_json(reports[0].to_dict() if len(reports) == 1 else _several_dict(reports, problems))
    else:
        for number, report in enumerate(reports):
            out = sys.stdout
            if number:
                out.write("\n")
            print_report(report, out, all_errors=args.all_errors)
        if sum(1 for r in reports if r.streams) > 1:
            _write_agreement(reports, problems, sys.stdout)
    return EXIT_OK if all(r.ok for r in reports) and not problems else EXIT_INVALID


def _reports_of(path: str, args: argparse.Namespace, command: str) -> list[Report]:
    """The reports of one file argument: its format detected (or ``--format``), then read to the end."""
    from cntkio._src.cli.progress import Phases
    from cntkio._src.formats.sniff import detect

    if os.path.isdir(path):
        raise IsADirectoryError(21, "it is a directory", path)
    detection = detect(path)
    form = detection.format if args.format == "auto" else args.format
    if form is None:
        raise NotData(
            f"'{path}' is not a CNTK data file: it looks like {detection}. To read it anyway, give its "
            f"format: --format ctf (or {', '.join(FORMATS[1:])})"
        )
    with Phases(args.progress, label=os.path.basename(path)) as progress:
        if form == "config":
            return validate_config(path, args.section, progress)
        report = _read_report(path, form, args, progress, full=command == "validate")
    report.detected = detection.reason if args.format == "auto" else "given by --format"
    if args.format != "auto" and detection.format != args.format:
        report.notes.append(f"this does not look like {TITLES[args.format]}: it looks like {detection}")
    return [report]


def _read_report(path: str, form: str, args: argparse.Namespace, progress: Any, *, full: bool) -> Report:
    """Inspects (``full``: validates) one data file of format ``form``."""
    from cntkio._src.cli import inspect_formats as formats
    from cntkio._src.cli.inspect_ctf import inspect_file

    preview = getattr(args, "preview", 0)
    if form == "ctf":
        return inspect_file(
            path, args.streams, max_errors=getattr(args, "max_errors", None),
            skip_sequence_ids=args.skip_sequence_ids, precision=args.precision,
            optional_inputs=args.optional_inputs, progress=progress, preview=preview,
        )  # fmt: skip
    if args.streams:
        raise ConfigError(f"--stream is for CTF files; '{path}' is read as {TITLES[form]}")
    if form == "cbf":
        return formats.inspect_cbf(path, progress=progress, preview=preview)
    if form == "scp":
        return formats.inspect_scp(path, progress=progress, preview=preview)
    if form == "mlf":
        return formats.inspect_mlf(path, labels=args.labels, preview=preview)
    return formats.inspect_image_map(path, base64=form == "base64-image", full=full, progress=progress, preview=preview)


def validate_config(path: str, section: str | None, progress: Any = None) -> list[Report]:
    """Validates a BrainScript config: a report per deserializer of each reader section (or of ``section``), as
    :func:`cntkio.brainscript.load_reader` loads it, each read through to the end. ``cntkio.brainscript`` is
    imported here, only for configs."""
    from cntkio._src.cli.inspect_formats import inspect_reader
    from cntkio._src.config.brainscript import load_reader, reader_sections

    sections = [section] if section else reader_sections(path)
    if not sections:
        raise ConfigError(f"'{path}': no reader section (a block holding readerType or deserializers)")
    reports = []
    for name in sections:
        try:
            source = load_reader(path, section=name, prefetch=False)
        except FormatError as e:  # the data of a deserializer that indexes its files when it is made
            report = Report(path, os.path.getsize(path), False, [], format="config", fatal=e)
            report.summary["section"] = name
            reports.append(report)
            continue
        with source:
            for deserializer in source.deserializers:
                report = inspect_reader(deserializer, progress=progress)
                report.summary["section"] = name
                report.detected = f"a deserializer of reader section '{name}' of {path}"
                reports.append(report)
    return reports


def _convert(args: argparse.Namespace) -> int:
    from cntkio._src.cli.progress import Phases
    from cntkio._src.formats.cbf_writer import write_cbf
    from cntkio._src.formats.ctf import CTFDeserializer
    from cntkio._src.formats.ctf_infer import infer_streams
    from cntkio._src.formats.sniff import detect

    path: str = args.input
    try:
        detection = detect(path)
        if detection.format != "ctf":
            return _fail(f"'{path}' is not a CTF file: it looks like {detection}", "convert")
        specs = args.streams
        if specs is None:
            with Phases(args.progress, label=os.path.basename(path)) as progress:
                found = infer_streams(path, progress=lambda done, total: progress("scanning", done, total))
            specs = [StreamSpec(s.alias, s.dim, s.is_sparse, s.alias) for s in found]
            if not specs:
                return _fail(f"no '|name' input found in '{path}'", "convert")
        definitions = {s.name: s.stream_def() for s in specs}
        source = CTFDeserializer(path, definitions, precision=args.precision, max_errors=args.max_errors)
        try:
            write_cbf(source, args.output, chunk_size_in_bytes=args.chunk_size, progress=args.progress)
        finally:
            source.close()
    except FormatError as e:
        print(f"cntkio convert: {_format_error(e)}", file=sys.stderr)
        return EXIT_INVALID
    except OSError as e:
        return _fail(
            f"cannot convert '{path}' to '{args.output}': '{e.filename or path}': {e.strerror or e}", "convert"
        )
    except (ConfigError, ImportError) as e:
        return _fail(str(e), "convert")
    described = ", ".join(f"{s.name} ({s.dim} {'sparse' if s.is_sparse else 'dense'})" for s in specs)
    print(f"{path} -> {args.output}: {described}")
    return EXIT_OK


def _fail(message: str, command: str = "inspect") -> int:
    print(f"cntkio {command}: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def _write_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


# ------------------------------------------------------------------------------------ text report
_MODES = {
    "line": "line mode (one sequence per line)",
    "numeric": "numeric sequence ids",
    "text": "text sequence ids",
}
_SKIPPED = {
    "without_defining_stream": "without the defining stream",
    "missing_input": "with a missing input",
    "no_valid_sample": "without a valid sample",
}
_SHOWN_ELSEWHERE = {"file", "mode", "sequences", "chunks", "lines", "skipped_lines", "skipped_sequences", "skipped"}


def print_report(report: Report, out: TextIO, *, all_errors: bool = False) -> None:
    """Writes the human-readable report of one file."""
    data = report.to_dict()
    out.write(f"file       {report.file} ({report.size:,} bytes")
    out.write(f", {data['lines']:,} lines)\n" if "lines" in data else ")\n")
    detected = f" ({report.detected})" if report.detected else ""
    out.write(f"format     {TITLES.get(report.format, report.format)}{detected}\n")
    if "mode" in data:
        out.write(f"mode       {_MODES.get(data['mode'], data['mode'])}\n")
    if "sequences" in data:
        chunks = data.get("chunks")
        out.write(f"sequences  {data['sequences']:,}" + (f" in {_plural(chunks, 'chunk')}\n" if chunks else "\n"))
    if data.get("skipped_lines"):
        out.write(f"skipped    {data['skipped_lines']:,} blank or comment-only lines\n")
    if data.get("skipped_sequences"):
        why = ", ".join(f"{n:,} {_SKIPPED[k]}" for k, n in data["skipped"].items() if n)
        out.write(f"skipped    {_plural(data['skipped_sequences'], 'sequence')} ({why})\n")
    for key, value in report.summary.items():
        if key not in _SHOWN_ELSEWHERE and value not in (None, [], {}, 0, False):
            out.write(f"{key.replace('_', ' '):<10} {_compact(value)}\n")
    if report.repeated_ids:
        repeated = report.repeated_ids
        out.write(
            f"warning    {_plural(repeated, 'sequence')} {'has' if repeated == 1 else 'have'} an id used earlier "
            "in the file (ids should be unique)\n"
        )
    for note in report.notes:
        out.write(f"warning    {note}\n")
    if report.streams:
        origin = (
            "inferred from a full scan of the file" if report.streams_inferred
            else "as given by --stream" if report.format == "ctf" else "as the file declares them"
        )  # fmt: skip
        out.write(f"streams    {len(report.streams)}, {origin}\n")
        _write_table(out, [_stream_row(s) for s in data["streams"]])
        for s in report.streams:
            if s.spec.dim_lower_bound:
                out.write(
                    f"  {s.spec.name}: dim >= {s.spec.dim} ({s.spec.dim_source}); give the real dimension with "
                    f"--stream {s.spec.name}:DIM:sparse\n"
                )
    lengths = data["sequence_lengths"]
    if lengths and lengths["max"] is not None:
        out.write(
            f"length     min {lengths['min']}, mean {lengths['mean']:.4g}, median {lengths['median']:g}, "
            f"max {lengths['max']} (samples per sequence)\n"
        )
        _write_histogram(out, lengths["histogram"])
    if report.preview:
        out.write(f"preview    the first {_plural(len(report.preview), 'sequence')}\n")
        for sequence in report.preview:
            fields = [(name, shown) for name, shown in sequence.items() if name != "key"]
            for number, (name, shown) in enumerate(fields):
                lead = str(sequence["key"]) if number == 0 else ""
                out.write(f"  {lead:<8} {name}  {shown}\n")
    if report.snippet:
        _write_snippet(report.snippet, out)
    if report.fatal is not None:
        out.write(f"fatal      {_format_error(report.fatal)}\n")
        if report.fatal.reason.startswith("no sequence with data") and len(report.streams) > 1:
            out.write("hint       every stream must appear in every sequence unless --optional-inputs is given\n")
    _write_errors(report.errors, out, all_errors=all_errors)
    if report.stopped_early:
        read = f" (the statistics cover the first {report.read_bytes:,} bytes)" if report.read_bytes else ""
        out.write(f"note       the scan stopped early (--max-errors){read}\n")
    out.write("result     OK: no errors\n" if report.ok else "result     INVALID\n")


def _write_errors(errors: list[FormatError], out: TextIO, *, all_errors: bool) -> None:
    """Every error (``all_errors``), or the errors grouped by reason: count and the first locations of each."""
    if not errors:
        return
    groups = error_groups(errors)
    listing = "" if all_errors or len(errors) == len(groups) else " (--all-errors lists every one)"
    out.write(f"errors     {len(errors):,} in {_plural(len(groups), 'group')}{listing}\n")
    if all_errors:
        for error in errors:
            out.write(f"  {_format_error(error)}\n")
        return
    for group in groups:
        stream = f" (input '{group['stream']}')" if group["stream"] is not None else ""
        out.write(f"  {group['count']:,} x {group['reason']}{stream}\n")
        for error in group["first"]:
            where = ":".join(str(error[k]) for k in ("file", "line", "column") if error[k] is not None)
            sequence = f" (sequence {error['sequence']})" if error["sequence"] is not None else ""
            out.write(f"    {where}{sequence}\n")
        if group["count"] > len(group["first"]):
            out.write(f"    ... {group['count'] - len(group['first']):,} more\n")


def _write_agreement(reports: list[Report], problems: list[str], out: TextIO) -> None:
    """Whether several files' streams agree, and then Python reading them as one corpus (CTF)."""
    from cntkio._src.cli.inspect_ctf import agreed_streams, streamdefs_snippet

    out.write(f"\nfiles      {len(reports)}: ")
    if problems:
        out.write("their streams DISAGREE\n" + "".join(f"  {p}\n" for p in problems))
        return
    out.write("their streams agree\n")
    if all(r.format == "ctf" for r in reports) and all(r.streams for r in reports):
        snippet = streamdefs_snippet("CTFDeserializer", [r.file for r in reports], agreed_streams(reports))
        _write_snippet(snippet, out)


def _write_snippet(snippet: str, out: TextIO) -> None:
    lines = snippet.rstrip("\n").split("\n")
    out.write("".join(f"{'python' if i == 0 else '':<10} {line}".rstrip() + "\n" for i, line in enumerate(lines)))


def _several_dict(reports: list[Report], problems: list[str]) -> dict[str, Any]:
    return {
        "files": [r.to_dict() for r in reports],
        "streams_agree": not problems,
        "disagreements": problems,
        "valid": all(r.ok for r in reports) and not problems,
    }


def validation_dict(reports: list[Report]) -> dict[str, Any]:
    """``validate --json``: per file whether it is valid, and every error (a fatal one too) in one list."""
    files, errors = [], []
    for report in reports:
        found = [report.fatal] if report.fatal is not None else []
        found += report.errors
        files.append({
            "file": report.file, "format": report.format, "section": report.summary.get("section"),
            "valid": report.ok, "sequences": report.summary.get("sequences"), "error_count": len(found),
        })  # fmt: skip
        errors += [{**error_to_dict(e), "fatal": e is report.fatal} for e in found]
    return {"valid": all(r.ok for r in reports), "error_count": len(errors), "files": files, "errors": errors}


def print_validation(reports: list[Report], out: TextIO, *, all_errors: bool = False) -> None:
    """``validate``'s text: a line per file, then its errors grouped (or every one)."""
    for report in reports:
        title = TITLES.get(report.format, report.format)
        section = f" [{report.summary['section']}]" if report.summary.get("section") else ""
        sequences = report.summary.get("sequences")
        found = len(report.errors) + (report.fatal is not None)
        if report.ok:
            counted = f" ({sequences:,} sequences)" if isinstance(sequences, int) else ""
            out.write(f"{report.file}{section}: {title}: valid{counted}\n")
            continue
        out.write(f"{report.file}{section}: {title}: INVALID, {_plural(found, 'error')}\n")
        if report.fatal is not None:
            out.write(f"  fatal: {_format_error(report.fatal)}\n")
        _write_errors(report.errors, out, all_errors=all_errors)
    invalid = sum(not r.ok for r in reports)
    total = sum(len(r.errors) + (r.fatal is not None) for r in reports)
    result = "OK: no errors" if not invalid else f"INVALID: {_plural(total, 'error')} in {invalid} of {len(reports)}"
    out.write(f"result     {result}{' files' if invalid else ''}\n")


def _compact(value: Any) -> str:
    """A summary value on one line: lists of records as ``a (n), b (m)``, dicts as ``k: v``."""
    if isinstance(value, list) and value and isinstance(value[0], dict):
        return ", ".join(" ".join(str(v) for v in item.values()) for item in value)
    if isinstance(value, dict):
        return ", ".join(f"{k}: {v}" for k, v in value.items())
    if isinstance(value, list):
        return ", ".join(map(str, value))
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)


def _stream_row(s: dict[str, Any]) -> list[str]:
    values = s["values"]
    value_text = "-"
    if values["min"] is not None:
        value_text = f"{values['min']:.4g} / {values['mean']:.4g} / {values['max']:.4g}"
    if s["format"] == "sparse":
        nnz = s["nnz_per_sample"]
        density = (
            f"nnz {nnz['min']}..{nnz['max']} (mean {nnz['mean']:.3g}), max index {s['max_index']}"
            if nnz["mean"] is not None else "-"
        )  # fmt: skip
    else:
        fraction = s["nonzero_fraction"]
        density = "-" if fraction is None else f"{100 * fraction:.3g}% non-zero"
    if s["empty_sequences"]:
        density += f", absent from {_plural(s['empty_sequences'], 'sequence')}"
    per = s["samples_per_sequence"]
    per_text = "-" if per["mean"] is None else f"{per['min']} / {per['mean']:.3g} / {per['max']}"
    alias = s["alias"] if s["alias"] != s["name"] else ""
    dim = f">={s['dim']}" if s["dim_lower_bound"] else str(s["dim"])
    return [s["name"], alias, s["format"], dim, f"{s['samples']:,}", per_text, value_text, density]


def _write_table(out: TextIO, rows: list[list[str]]) -> None:
    header = ["name", "alias", "format", "dim", "samples", "per sequence", "values min / mean / max", "per sample"]
    if not any(row[1] for row in rows):
        header.pop(1)
        rows = [row[:1] + row[2:] for row in rows]
    table = [header, *rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        out.write("  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() + "\n")


def _write_histogram(out: TextIO, histogram: list[dict[str, int]]) -> None:
    if len(histogram) < 2:
        return
    labels = [str(b["low"]) if b["low"] == b["high"] else f"{b['low']}-{b['high']}" for b in histogram]
    peak = max(b["count"] for b in histogram)
    width = max(len(label) for label in labels)
    for label, b in zip(labels, histogram):
        bar = "#" * round(_HISTOGRAM_WIDTH * b["count"] / peak)
        out.write(f"  {label.rjust(width)}  {bar} {b['count']:,}\n")


def _plural(count: int, noun: str) -> str:
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def _format_error(error: FormatError) -> str:
    where = error.file
    if error.line is not None:
        where += f":{error.line}" + (f":{error.column}" if error.column is not None else "")
    details = [f"sequence {error.sequence_key}"] if error.sequence_key is not None else []
    if error.input is not None:
        details.append(f"input '{error.input}'")
    return f"{where}: {error.reason}" + (f" ({', '.join(details)})" if details else "")
