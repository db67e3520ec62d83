"""``cntkio convert IN.ctf OUT.cbf``: writes a CTF file as CNTK Binary Format, with the registry's CBF writer."""

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
from cntkio._src.cli.inspect_ctf import StreamSpec
from cntkio._src.common.errors import ConfigError, FormatError
from cntkio._src.common.progress import Phases
from cntkio._src.formats import registry
from cntkio._src.formats.cbf_writer import DEFAULT_CBF_CHUNK_SIZE_IN_BYTES
from cntkio._src.formats.ctf import CTFDeserializer
from cntkio._src.formats.ctf_infer import infer_streams
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
        help="a stream to write (repeatable), in this order; default: inferred from the file",
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
        if specs is None:
            with Phases(args.progress, label=os.path.basename(path)) as progress:
                found = infer_streams(path, progress=lambda done, total: progress("scanning", done, total))
            specs = [StreamSpec(s.alias, s.dim, s.is_sparse, s.alias) for s in found]
            if not specs:
                return fail("convert", f"no '|name' input found in '{path}'")
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
    described = ", ".join(f"{s.name} ({s.dim} {'sparse' if s.is_sparse else 'dense'})" for s in specs)
    print(f"{path} -> {args.output}: {described}")
    return EXIT_OK
