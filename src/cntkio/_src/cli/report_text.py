"""The reports of ``cntkio inspect`` and ``validate`` for people (text) and for programs (JSON-ready dicts): a file's
summary, streams table, length histogram, preview, Python snippet and errors; the agreement of several files; and
``validate``'s line per file."""

from __future__ import annotations

from typing import Any, TextIO

from cntkio._src.cli.common import format_error
from cntkio._src.cli.inspect_ctf import Report, agreed_streams, error_groups, error_to_dict, streamdefs_snippet
from cntkio._src.common.errors import FormatError
from cntkio._src.formats import registry

_HISTOGRAM_WIDTH = 40
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
    out.write(f"format     {registry.title(report.format)}{detected}\n")
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
            else "as given by --stream" if report.format == registry.CTF.name else "as the file declares them"
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
        out.write(f"fatal      {format_error(report.fatal)}\n")
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
            out.write(f"  {format_error(error)}\n")
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


def write_agreement(reports: list[Report], problems: list[str], out: TextIO) -> None:
    """Whether several files' streams agree, and then Python reading them as one corpus (CTF)."""
    out.write(f"\nfiles      {len(reports)}: ")
    if problems:
        out.write("their streams DISAGREE\n" + "".join(f"  {p}\n" for p in problems))
        return
    out.write("their streams agree\n")
    if all(r.format == registry.CTF.name for r in reports) and all(r.streams for r in reports):
        snippet = streamdefs_snippet("CTFDeserializer", [r.file for r in reports], agreed_streams(reports))
        _write_snippet(snippet, out)


def _write_snippet(snippet: str, out: TextIO) -> None:
    lines = snippet.rstrip("\n").split("\n")
    out.write("".join(f"{'python' if i == 0 else '':<10} {line}".rstrip() + "\n" for i, line in enumerate(lines)))


def several_dict(reports: list[Report], problems: list[str]) -> dict[str, Any]:
    """``inspect --json`` of several files: each one's report, and whether their streams agree."""
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
            "warnings": list(report.notes),
        })  # fmt: skip
        errors += [{**error_to_dict(e), "fatal": e is report.fatal} for e in found]
    return {"valid": all(r.ok for r in reports), "error_count": len(errors), "files": files, "errors": errors}


def print_validation(reports: list[Report], out: TextIO, *, all_errors: bool = False) -> None:
    """``validate``'s text: a line per file, then its errors grouped (or every one)."""
    for report in reports:
        title = registry.title(report.format)
        section = f" [{report.summary['section']}]" if report.summary.get("section") else ""
        sequences = report.summary.get("sequences")
        found = len(report.errors) + (report.fatal is not None)
        if report.ok:
            counted = f" ({sequences:,} sequences)" if isinstance(sequences, int) else ""
            out.write(f"{report.file}{section}: {title}: valid{counted}\n")
            out.write("".join(f"  warning: {note}\n" for note in report.notes))
            continue
        out.write(f"{report.file}{section}: {title}: INVALID, {_plural(found, 'error')}\n")
        out.write("".join(f"  warning: {note}\n" for note in report.notes))
        if report.fatal is not None:
            out.write(f"  fatal: {format_error(report.fatal)}\n")
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
