"""The ``cntkio`` command line: ``cntkio inspect FILE`` validates a CTF file and summarises it;
``cntkio convert IN.ctf OUT.cbf`` writes it as CNTK Binary Format.

Exit status: 0 valid (converted), 1 errors found in the data, 2 usage error or unreadable file.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from .convert import DEFAULT_CBF_CHUNK_SIZE_IN_BYTES, write_cbf
from .errors import ConfigError, FormatError
from .formats.ctf import CTFDeserializer
from .infer import infer_streams
from .inspect import Progress, Report, StreamSpec, inspect_file
from .streams import StreamDef

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2
PROGRESS_MIN_BYTES = 64 * 1024 * 1024
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cntkio", description="Tools for CNTK data files.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    inspect = commands.add_parser(
        "inspect",
        help="validate a CTF file and summarise what is in it",
        description="Validate a CTF (CNTK text format) file: list every error with file:line:column, and "
        "summarise sequences, sequence lengths and each stream's values. Without --stream, the streams "
        "are inferred from a full scan of the file. Exit status: 0 valid, 1 errors, 2 usage or I/O error.",
    )
    inspect.add_argument("file", metavar="FILE", help="CTF file to inspect")
    inspect.add_argument(
        "--stream", metavar="NAME:DIM:dense|sparse[:ALIAS]", type=stream_spec, action="append", dest="streams",
        help="a stream to read (repeatable); the alias after '|' defaults to NAME. Default: inferred from the file",
    )  # fmt: skip
    inspect.add_argument(
        "--max-errors", metavar="N", type=positive_int,
        help="stop after N errors (default: read the whole file and list every error)",
    )  # fmt: skip
    inspect.add_argument(
        "--skip-sequence-ids", action="store_true", help="every line is a sequence; leading ids are ignored"
    )
    inspect.add_argument(
        "--optional-inputs", action="store_true",
        help="a stream may be absent from a sequence (otherwise that is an error)",
    )  # fmt: skip
    inspect.add_argument("--precision", choices=("float", "double"), default="float", help="value type")
    inspect.add_argument("--json", action="store_true", help="print the report as JSON")
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
    convert.add_argument(
        "--progress", action=argparse.BooleanOptionalAction, default=None,
        help="a progress bar (needs tqdm; default: when stderr is a terminal and tqdm is installed)",
    )  # fmt: skip
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``cntkio`` console script; returns the exit status."""
    args = build_parser().parse_args(argv)
    logger = logging.getLogger("cntkio")
    level = logger.level
    logger.setLevel(logging.ERROR)  # every problem is in the report: no log lines on stderr
    try:
        return _convert(args) if args.command == "convert" else _inspect(args)
    except BrokenPipeError:  # output piped into e.g. `head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_INVALID
    except KeyboardInterrupt:
        return 130
    finally:
        logger.setLevel(level)


def _inspect(args: argparse.Namespace) -> int:
    path: str = args.file
    if os.path.isdir(path):
        return _fail(f"cannot read '{path}': it is a directory")
    progress = _progress_printer(path)
    try:
        report = inspect_file(
            path, args.streams, max_errors=args.max_errors, skip_sequence_ids=args.skip_sequence_ids,
            precision=args.precision, optional_inputs=args.optional_inputs, progress=progress,
        )  # fmt: skip
    except OSError as e:
        return _fail(f"cannot read '{path}': {e.strerror or e}")
    except ConfigError as e:
        return _fail(str(e))
    finally:
        if progress is not None:
            sys.stderr.write("\r\033[K")
    if args.json:
        json.dump(report.to_dict(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print_report(report, sys.stdout)
    return EXIT_OK if report.ok else EXIT_INVALID


def _convert(args: argparse.Namespace) -> int:
    path: str = args.input
    try:
        specs = args.streams
        if specs is None:
            specs = [StreamSpec(s.alias, s.dim, s.is_sparse, s.alias) for s in infer_streams(path)]
            if not specs:
                return _fail(f"no '|name' input found in '{path}'", "convert")
        definitions = {s.name: StreamDef(field=s.alias, shape=s.dim, is_sparse=s.is_sparse) for s in specs}
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


def _progress_printer(path: str) -> Progress | None:
    """A one-line progress display on stderr, for big files and only when stderr is a terminal."""
    try:
        big = os.path.getsize(path) >= PROGRESS_MIN_BYTES
    except OSError:
        return None
    if not big or not sys.stderr.isatty():
        return None

    shown = ""

    def show(phase: str, done: int, total: int) -> None:
        nonlocal shown
        text = f"\r{phase} {100 * done // max(total, 1):3d}%"
        if text != shown:
            sys.stderr.write(text)
            sys.stderr.flush()
            shown = text

    return show


# ------------------------------------------------------------------------------------ text report
_MODES = {
    "line": "line mode (one sequence per line)",
    "numeric": "numeric sequence ids",
    "text": "text sequence ids",
}


def print_report(report: Report, out: TextIO) -> None:
    """Writes the human-readable report."""
    data = report.to_dict()
    out.write(f"file       {report.file} ({report.size:,} bytes")
    out.write(f", {data['lines']:,} lines)\n" if "lines" in data else ")\n")
    if "mode" in data:
        chunks = data["chunks"]
        out.write(f"mode       {_MODES.get(data['mode'], data['mode'])}\n")
        out.write(f"sequences  {data['sequences']:,} in {_plural(chunks, 'chunk')}\n")
        if data.get("skipped_lines"):
            out.write(f"skipped    {data['skipped_lines']:,} blank or comment-only lines\n")
        if data.get("skipped_sequences"):
            out.write(f"skipped    {data['skipped_sequences']:,} sequences without the defining stream\n")
    if report.repeated_ids:
        repeated = report.repeated_ids
        out.write(
            f"warning    {_plural(repeated, 'sequence')} {'has' if repeated == 1 else 'have'} an id used earlier "
            "in the file (ids should be unique)\n"
        )
    origin = "inferred from a full scan of the file" if report.streams_inferred else "as given by --stream"
    out.write(f"streams    {len(report.streams)}, {origin}\n")
    if report.streams:
        _write_table(out, [_stream_row(s) for s in data["streams"]])
    lengths = data["sequence_lengths"]
    if lengths and lengths["max"] is not None:
        out.write(
            f"length     min {lengths['min']}, mean {lengths['mean']:.4g}, median {lengths['median']:g}, "
            f"max {lengths['max']} (samples per sequence)\n"
        )
        _write_histogram(out, lengths["histogram"])
    if report.fatal is not None:
        out.write(f"fatal      {_format_error(report.fatal)}\n")
        if report.fatal.reason.startswith("no sequence with data") and len(report.streams) > 1:
            out.write("hint       every stream must appear in every sequence unless --optional-inputs is given\n")
    if report.errors:
        stopped = " (stopped early, see --max-errors)" if report.stopped_early else ""
        out.write(f"errors     {len(report.errors):,}{stopped}\n")
        for error in report.errors:
            out.write(f"  {_format_error(error)}\n")
    out.write("result     OK: no errors\n" if report.ok else "result     INVALID\n")


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
    alias = s["alias"] if s["alias"] != s["name"] else ""
    return [s["name"], alias, s["format"], str(s["dim"]), f"{s['samples']:,}", value_text, density]


def _write_table(out: TextIO, rows: list[list[str]]) -> None:
    header = ["name", "alias", "format", "dim", "samples", "values min / mean / max", "per sample"]
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
