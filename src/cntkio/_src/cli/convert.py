"""``cntkio convert IN.ctf OUT.cbf``: writes a CTF file as CNTK Binary Format, with the registry's CBF writer;
``cntkio convert IN --to parquet OUT`` writes a CTF or CBF file as Parquet, an Arrow table per chunk.

A CBF header holds every stream's dimension. Inferred from the file, a sparse stream's dimension is only a lower
bound (its largest index + 1), so convert writes inferred dimensions only when told to (``--infer-dims``); otherwise
it asks for the streams (``--stream``), suggesting them. Parquet keeps no dimension (a sparse stream's indices and
values are lists), so inferred streams need no ``--infer-dims`` there.

Parquet output (the columns of :mod:`cntkio._src.integrations.chunk_rows`: ``file``, ``chunk``, ``row``, ``key`` and
per stream the flattened samples or the sparse indices, values and entries): ``OUT`` a folder gets a file per chunk,
``<input name>-<chunk>.parquet``; ``OUT.parquet`` one file with a row group per chunk. Each is written under a
temporary name and renamed when every chunk is written, and depends only on the input and the chunk size. In a
folder, the files of an earlier conversion of the same input (``<input name>-NNNNNN.parquet``) that this one does not
rewrite (it has fewer chunks) are then removed, so the folder read as a dataset holds this conversion's rows only
(other files are left alone). ``--max-errors`` is one budget for the whole file, as when writing CBF: the chunks are
read in order by one reader, which fails past it naming the record. A CBF input has no bad records to skip and keeps
its own chunks, so ``--max-errors`` and ``--chunk-size`` are refused with it."""

from __future__ import annotations

import argparse
import functools
import os
import re
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
from cntkio._src.formats.cbf import CBFDeserializer
from cntkio._src.formats.cbf_writer import DEFAULT_CBF_CHUNK_SIZE_IN_BYTES
from cntkio._src.formats.ctf import CTFDeserializer
from cntkio._src.formats.ctf_infer import Inference, infer
from cntkio._src.formats.sniff import detect
from cntkio._src.integrations.chunk_rows import ChunkPlan


def add_command(commands: Any) -> None:
    """Adds ``cntkio convert`` to the command line's subparsers."""
    convert = commands.add_parser(
        "convert",
        help="convert a CTF file to CNTK Binary Format (CBF), or a CTF or CBF file to Parquet",
        description="Write a CTF file as CBF (what CNTK's ctf2bin.py writes), through a temporary file renamed "
        "when complete; with --to parquet, a CTF or CBF file as Parquet: a file per chunk in the folder OUT "
        "(<input name>-<chunk>.parquet), or one file OUT.parquet with a row group per chunk; columns file, chunk, "
        "row, key and per stream NAME and NAME.samples (dense: the samples flattened) or NAME.indices, "
        "NAME.values, NAME.entries (sparse). Without --stream, the streams of a CTF file are inferred from a full "
        "scan of the file. Exit status: 0 converted, 1 errors in the data, 2 usage or I/O error.",
    )
    convert.add_argument("input", metavar="IN.ctf", help="CTF file to convert (or a CBF file, --to parquet)")
    convert.add_argument("output", metavar="OUT.cbf", help="CBF file to write (--to parquet: a folder or OUT.parquet)")
    convert.add_argument(
        "--to", choices=("cbf", "parquet"), default="cbf", help="the output format (default cbf; parquet needs pyarrow)"
    )
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
        "--chunk-size", metavar="BYTES", type=positive_int, default=None,
        help=f"CBF chunk size; with --to parquet, the CTF chunk size (default {DEFAULT_CBF_CHUNK_SIZE_IN_BYTES}; "
        "not for a CBF input, whose chunks are kept)",
    )  # fmt: skip
    convert.add_argument("--precision", choices=("float", "double"), default="float", help="value type")
    convert.add_argument(
        "--max-errors", metavar="N", type=int, default=None,
        help="bad records to skip in the whole file (default 0; not for a CBF input)",
    )  # fmt: skip
    add_progress_option(convert)
    convert.set_defaults(handler=run_convert)


def run_convert(args: argparse.Namespace) -> int:
    """Runs ``cntkio convert``; returns the exit status (0 converted, 1 errors in the data, 2 usage or I/O)."""
    path: str = args.input
    write = registry.CBF.writer
    assert write is not None
    try:
        detection = detect(path)
        if args.to == "parquet" and detection.format == registry.CBF.name:
            if args.streams is not None or args.infer_dims:
                return fail("convert", "a CBF file's streams are in its header: give no --stream or --infer-dims")
            if args.max_errors is not None or args.chunk_size is not None:
                return fail("convert", "a CBF file has no bad records to skip and keeps its chunks: give no "
                            "--max-errors or --chunk-size with a CBF input")  # fmt: skip
            written = write_parquet(functools.partial(CBFDeserializer, path, None, precision=args.precision), path,
                                    args.output)  # fmt: skip
            print(f"{path} -> {args.output}: {written} Parquet file(s)")
            return EXIT_OK
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
            if bounds and not args.infer_dims and args.to == "cbf":
                return fail("convert", _lower_bounds_message(path, specs, bounds))
        definitions = {s.name: s.stream_def() for s in specs}
        max_errors = 0 if args.max_errors is None else args.max_errors
        chunk_size = DEFAULT_CBF_CHUNK_SIZE_IN_BYTES if args.chunk_size is None else args.chunk_size
        if args.to == "parquet":
            ctf = functools.partial(CTFDeserializer, path, definitions, precision=args.precision,
                                    max_errors=max_errors, chunk_size_in_bytes=chunk_size)  # fmt: skip
            written = write_parquet(ctf, path, args.output)
            print(f"{path} -> {args.output}: {written} Parquet file(s)")
            return EXIT_OK
        source = CTFDeserializer(path, definitions, precision=args.precision, max_errors=max_errors)
        try:
            write(source, args.output, chunk_size_in_bytes=chunk_size, progress=args.progress)
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


def write_parquet(factory: Any, path: str, output: str) -> int:
    """Writes the chunks of the deserializer ``factory`` makes as Parquet (see the module); returns the files
    written."""
    try:
        import pyarrow.parquet as pq
    except ImportError as error:
        raise ImportError('--to parquet needs pyarrow: pip install "pyarrow"') from error
    plan = ChunkPlan(factory)
    name = os.path.basename(path)
    if output.endswith(".parquet"):
        os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
        temporary = f"{output}.{os.getpid()}.tmp"
        try:
            with pq.ParquetWriter(temporary, plan.schema()) as writer:
                for table in plan.tables():  # one reader: one max_errors budget for the file
                    writer.write_table(table)  # a row group per chunk
            os.replace(temporary, output)
        finally:
            if os.path.exists(temporary):
                os.unlink(temporary)
        return 1
    os.makedirs(output, exist_ok=True)
    written: list[tuple[str, str]] = []  # (temporary, target)
    try:
        for chunk, table in enumerate(plan.tables()):  # one part (one file): chunks numbered as the plan's
            target = os.path.join(output, f"{name}-{chunk:06d}.parquet")
            written.append((f"{target}.{os.getpid()}.tmp", target))
            pq.write_table(table, written[-1][0])
        for temporary, target in written:  # every chunk read: the old output is replaced only now
            os.replace(temporary, target)
    finally:
        for temporary, _ in written:
            if os.path.exists(temporary):
                os.unlink(temporary)
    _remove_stale(output, name, {os.path.basename(target) for _, target in written})
    return len(written)


def _remove_stale(folder: str, name: str, kept: set[str]) -> None:
    """Removes the chunk files of an earlier conversion of input ``name`` (``name-NNNNNN.parquet``) not in ``kept``."""
    pattern = re.compile(re.escape(name) + r"-[0-9]{6,}\.parquet")
    for entry in os.listdir(folder):
        if entry not in kept and pattern.fullmatch(entry):
            os.unlink(os.path.join(folder, entry))


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
