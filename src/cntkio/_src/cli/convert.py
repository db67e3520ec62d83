"""``cntkio convert IN.ctf OUT.cbf``: writes a CTF file as CNTK Binary Format, with the registry's CBF writer.

A CBF header holds every stream's dimension. Inferred from the file, a sparse stream's dimension is only a lower
bound (its largest index + 1), so convert writes inferred dimensions only when told to (``--infer-dims``); otherwise
it asks for the streams (``--stream``), suggesting them."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from cntkio._src.cli.common import (
    EXIT_INVALID,
    EXIT_OK,
    add_progress_option,
    fail,
    format_error,
    positive_int,
    stream_spec,
)
from cntkio._src.cli.inspect_ctf import INFERRED_DENSE, INFERRED_SPARSE, StreamSpec
from cntkio._src.common.errors import ConfigError, FormatError
from cntkio._src.common.progress import Phases
from cntkio._src.formats import registry
from cntkio._src.formats.cbf_writer import DEFAULT_CBF_CHUNK_SIZE_IN_BYTES
from cntkio._src.formats.ctf import CTFDeserializer
from cntkio._src.formats.ctf_infer import Inference, infer
from cntkio._src.formats.sniff import detect


def add_command(commands: Any) -> None:
    """Adds ``cntkio convert`` to the command line's subparsers."""
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
        help="a stream to write (repeatable), in this order; default: inferred from the file, which needs "
        "--infer-dims when a stream is sparse",
    )  # fmt: skip
    convert.add_argument(
        "--infer-dims", action="store_true",
        help="without --stream: write the dimensions inferred from the file into the CBF header. A sparse stream's "
        "inferred dimension is its largest index + 1, a lower bound: smaller than the real one when the highest "
        "index never occurs in this file, and a model sized from the header then gets a wrong input dimension. "
        "Without this flag, convert refuses to write an inferred sparse dimension",
    )  # fmt: skip
    convert.add_argument(
        "--chunk-size", metavar="BYTES", type=positive_int, default=DEFAULT_CBF_CHUNK_SIZE_IN_BYTES,
        help=f"CBF chunk size (default {DEFAULT_CBF_CHUNK_SIZE_IN_BYTES})",
    )  # fmt: skip
    convert.add_argument("--precision", choices=("float", "double"), default="float", help="value type")
    convert.add_argument("--max-errors", metavar="N", type=int, default=0, help="bad records to skip (default 0)")
    add_progress_option(convert)
    convert.set_defaults(handler=run_convert)


def run_convert(args: argparse.Namespace) -> int:
    """Runs ``cntkio convert``; returns the exit status (0 converted, 1 errors in the data, 2 usage or I/O)."""
    path: str = args.input
    write = registry.CBF.writer
    assert write is not None
    try:
        detection = detect(path)
        if detection.format != registry.CTF.name:
            return fail("convert", f"'{path}' is not a CTF file: it looks like {detection}")
        specs = args.streams
        if specs is not None and args.infer_dims:
            return fail("convert", "--infer-dims is for inferred streams: give it or --stream, not both")
        if specs is None:
            with Phases(args.progress, label=os.path.basename(path)) as progress:
                found = infer(path, progress=lambda done, total: progress("scanning", done, total))
            specs = [
                StreamSpec(s.alias, s.dim, s.is_sparse, s.alias, INFERRED_SPARSE if s.is_sparse else INFERRED_DENSE)
                for s in found.streams
            ]
            if not specs:
                return fail("convert", f"no '|name' input found in '{path}'")
            if found.rare:
                return _likely_typos(path, found)
            bounds = [s for s in specs if s.dim_lower_bound]
            if bounds and not args.infer_dims:
                return fail("convert", _lower_bounds_message(path, specs, bounds))
        definitions = {s.name: s.stream_def() for s in specs}
        source = CTFDeserializer(path, definitions, precision=args.precision, max_errors=args.max_errors)
        try:
            write(source, args.output, chunk_size_in_bytes=args.chunk_size, progress=args.progress)
        finally:
            source.close()
    except FormatError as e:
        print(f"cntkio convert: {format_error(e)}", file=sys.stderr)
        return EXIT_INVALID
    except OSError as e:
        return fail("convert", f"cannot convert '{path}' to '{args.output}': '{e.filename or path}': {e.strerror or e}")
    except (ConfigError, ImportError) as e:
        return fail("convert", str(e))
    described = ", ".join(
        f"{s.name} ({s.dim} {'sparse' if s.is_sparse else 'dense'}{', inferred: a lower bound' * s.dim_lower_bound})"
        for s in specs
    )
    print(f"{path} -> {args.output}: {described}")
    return EXIT_OK


def _lower_bounds_message(path: str, specs: list[StreamSpec], bounds: list[StreamSpec]) -> str:
    """Why convert does not write inferred sparse dimensions, and the --stream options to give instead."""
    shown = ", ".join(f"{s.name} >= {s.dim}" for s in bounds)
    options = " ".join(f"--stream {s.name}:{s.dim}:{'sparse' if s.is_sparse else 'dense'}" for s in specs)
    return (
        f"the sparse dimensions inferred from '{path}' are lower bounds (the largest index seen + 1: {shown}), and a "
        f"CBF header keeps them as the streams' dimensions. Give every stream with its real dimension: {options} "
        "(each sparse DIM at least the one shown), or pass --infer-dims to write the inferred ones"
    )


def _likely_typos(path: str, found: Inference) -> int:
    """Refuses a file with inputs seen in only a handful of samples (likely typos, whose samples would be lost)."""
    for typo in found.rare:
        similar = found.similar(typo)
        of = f" of '{similar}'" if similar else ""
        for place in typo.first_seen:
            print(
                f"cntkio convert: {path}:{place.line}:{place.column}: likely a typo{of}: input '{typo.alias}' is "
                f"seen in only {typo.samples} sample(s), so it is not a stream and would not be written",
                file=sys.stderr,
            )
    print(
        "cntkio convert: fix the input names, or give the streams to write with --stream (other inputs are skipped)",
        file=sys.stderr,
    )
    return EXIT_INVALID
