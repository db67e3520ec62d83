"""``cntkio stats FILE``: the distributions of a CTF or CBF file (:mod:`.distributions`) as text, as JSON, or plotted
to a PNG figure or an HTML page (:mod:`.plot`)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, TextIO

from cntkio._src.cli import plot
from cntkio._src.cli.common import (
    add_progress_option,
    cannot_read,
    dims_inferred,
    fail,
    open_deserializer,
    positive_int,
    write_json,
)
from cntkio._src.cli.distributions import bin_label, dim_text, gather, number, stream_sections, summary_text
from cntkio._src.cli.inspect_ctf import HISTOGRAM_BINS, progress_chunk_size
from cntkio._src.common import progress
from cntkio._src.common.errors import CNTKIOError, FormatError

BAR_WIDTH = 40  # characters of the longest histogram bar in the text


# ------------------------------------------------------------------------------------------- text
def write_text(found: dict[str, Any], out: TextIO) -> None:
    """Writes the numbers for people (the same numbers as the HTML page)."""
    out.write(
        f"file       {found['file']} ({found['format']}, {number(found['bytes'])} bytes): "
        f"{number(found['sequences'])} sequences in {number(found['chunks'])} chunk(s)\n"
    )
    if found["bad_records"] or found["empty_sequences"]:
        out.write(
            f"skipped    {number(found['bad_records'])} bad record(s), {number(found['empty_sequences'])} sequence(s) "
            "without a sample (cntkio inspect lists them)\n"
        )
    out.write(f"lengths    {summary_text(found['sequence_lengths'])} (samples per sequence, the most of any stream)\n")
    _write_histogram(out, found["sequence_lengths"]["histogram"])
    for s in found["streams"]:
        absent = f", absent from {number(s['empty_sequences'])} sequence(s)" if s["empty_sequences"] else ""
        dim = dim_text(s["dim"], s["dim_lower_bound"]) + (" (inferred: largest index + 1)" * s["dim_lower_bound"])
        out.write(f"stream {s['name']}  {s['format']}, dim {dim}: {number(s['samples'])} samples{absent}\n")
        for label, text, histogram in stream_sections(s):
            out.write(f"  {label:<22} {text}\n")
            _write_histogram(out, histogram, indent=4)


def _write_histogram(out: TextIO, histogram: list[dict[str, Any]], indent: int = 2) -> None:
    if len(histogram) < 2:
        return
    labels = [bin_label(entry) for entry in histogram]
    peak = max(entry["count"] for entry in histogram) or 1
    width = max(len(label) for label in labels)
    for label, entry in zip(labels, histogram):
        bar = "#" * round(BAR_WIDTH * entry["count"] / peak)
        out.write(f"{' ' * indent}{label.rjust(width)}  {bar} {number(entry['count'])}\n")


# ------------------------------------------------------------------------------------------- command line
def add_command(commands: Any) -> None:
    """Adds ``cntkio stats`` to the command line's subparsers."""
    command = commands.add_parser(
        "stats",
        help="distributions of a data file: lengths, values, sparsity (as text, or plotted to PNG or HTML)",
        description="Read a CTF or CBF file (streams inferred) and show the distributions of its sequence lengths and, "
        "per stream, of samples per sequence, values, non-zeros per sample and (sparse streams) the indices used. "
        "--plot out.png draws them; --plot out.html writes a self-contained page with the figure and the numbers "
        "(both need matplotlib: pip install 'cntkio[plot]').",
    )
    command.add_argument("file", metavar="FILE", help="a CTF or CBF file")
    command.add_argument("--plot", metavar="OUT.png|OUT.html", help="write the figure (PNG) or a page (HTML)")
    command.add_argument(
        "--bins", metavar="N", type=positive_int, default=HISTOGRAM_BINS,
        help=f"bins of every histogram, in the text and the plot (default {HISTOGRAM_BINS})",
    )  # fmt: skip
    command.add_argument("--json", action="store_true", help="print the numbers as JSON")
    add_progress_option(command, "a progress bar (needs tqdm; default: on a terminal, once reading takes a while)")
    command.set_defaults(handler=run_stats)


def run_stats(args: argparse.Namespace) -> int:
    """Runs ``cntkio stats``; returns the exit status (0; 1 for a fatal format error; 2 for a usage or I/O error)."""
    target: str | None = args.plot
    if target is not None and not target.lower().endswith(plot.SUFFIXES):
        return fail("stats", f"--plot writes a .png or .html file, not '{target}'")
    try:
        if target is not None:
            plot.require_matplotlib()
        inferred = dims_inferred(args.file)  # a CTF file: read in chunks of ~1/64 of it, so that the bar moves
        chunk_size = progress_chunk_size(os.path.getsize(args.file)) if inferred else None
        reader = open_deserializer(args.file, max_errors=sys.maxsize, chunk_size_in_bytes=chunk_size)
        try:
            with progress.bar(args.progress, reader.num_chunks(), "reading", unit="chunk") as advance:
                found = gather(args.file, reader, advance, args.bins, dims_inferred=inferred)
        finally:
            getattr(reader, "close", lambda: None)()
    except FormatError as e:
        print(f"cntkio stats: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        return fail("stats", cannot_read(e, args.file))
    except (CNTKIOError, ImportError) as e:
        return fail("stats", str(e))
    if target is not None:
        try:
            plot.write(found, target)
        except OSError as e:
            return fail("stats", f"cannot write '{target}': {e.strerror or e}")
        print(f"{args.file} -> {target}")
    elif args.json:
        write_json(found)
    else:
        write_text(found, sys.stdout)
    return 0
