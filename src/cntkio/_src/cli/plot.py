"""``cntkio stats --plot``: the distributions of :mod:`.distributions` drawn as a PNG figure, or as a
self-contained HTML page (the figure embedded as base64 PNG, and tables of the numbers; no script).

matplotlib (``pip install 'cntkio[plot]'``) is imported only when a figure is drawn. The figure is titled with the
file, and has a row for the sequence lengths and a row per stream (samples per sequence, values, non-zeros per
sample, the most used indices), each panel :data:`PANEL_INCHES` at :data:`DPI`: :func:`figure_pixels` gives its
size. A distribution of a single value (a one-hot stream's values, one bar at 1.0) is a line of text, not a chart.
"""

from __future__ import annotations

import base64
import html
import io
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from cntkio._src.cli.distributions import bin_label, constant, dim_text, number, stream_sections, summary_text

SUFFIXES = (".png", ".html")
DPI = 100
PANEL_INCHES = (4.0, 3.0)  # width, height of one panel
COLUMNS = 4  # samples per sequence, values, non-zeros per sample, indices
INSTALL_HINT = "cntkio stats --plot needs matplotlib: pip install 'cntkio[plot]'"
_AXES = {"samples per sequence": "samples", "values": "value", "non-zeros per sample": "non-zeros", "indices": "index"}
_STYLE = (
    "body{font-family:sans-serif;margin:2em;color:#222}img{max-width:100%}"
    "table{border-collapse:collapse;margin:.3em 0 1.2em}td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}"
    "th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}h3{margin-bottom:.2em}"
)


def require_matplotlib() -> None:
    """Raises ImportError (with how to install it) when matplotlib is missing."""
    if find_spec("matplotlib") is None:
        raise ImportError(INSTALL_HINT)


def figure_pixels(streams: int) -> tuple[int, int]:
    """(width, height) of the PNG for a file of ``streams`` streams."""
    return round(COLUMNS * PANEL_INCHES[0] * DPI), round((1 + streams) * PANEL_INCHES[1] * DPI)


def write(found: dict[str, Any], path: str | Path) -> None:
    """Writes the figure (``.png``) or the page (``.html``) of a file's distributions."""
    png = png_bytes(found)
    target = Path(path)
    if target.suffix.lower() == ".png":
        target.write_bytes(png)
    else:
        target.write_text(html_page(found, png), encoding="utf-8")


def png_bytes(found: dict[str, Any]) -> bytes:
    """The figure as PNG bytes: titled with the file, a row for the sequence lengths, and a row per stream whose
    distributions are charts — those of a single value (a one-hot stream's values: one bar at 1.0) are a line of
    text instead, and the indices are a bar per most used index."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError(INSTALL_HINT) from None
    streams = found["streams"]
    width, height = figure_pixels(len(streams))
    figure = Figure(figsize=(width / DPI, height / DPI), dpi=DPI, layout="constrained")
    figure.suptitle(
        f"{found['file']} ({found['format']}, {number(found['bytes'])} bytes): {number(found['sequences'])} sequences",
        fontsize=12,
    )
    grid = figure.add_gridspec(1 + len(streams), COLUMNS)
    lengths = figure.add_subplot(grid[0, :])
    _bars(lengths, found["sequence_lengths"]["histogram"], "samples per sequence (the most of any stream)")
    lengths.set_title(f"sequence lengths: {number(found['sequences'])} sequences", fontsize=10)
    for row, stream in enumerate(streams, start=1):
        column = 0
        lines = []
        for label, _, histogram in stream_sections(stream):
            said = constant(stream, label)
            if said is not None:
                lines.append(f"{label}: {said}")
                continue
            axes = figure.add_subplot(grid[row, column])
            column += 1
            title = label
            if label == "indices" and stream["indices"].get("most_used"):
                _top_bars(axes, histogram)
                title = f"the {len(histogram)} most used indices"
            else:
                _bars(axes, histogram, _AXES[label], discrete=label != "values")
            if label == "values" and stream["values"]["sampled"]:
                title += " (a uniform sample)"
            axes.set_title(f"{stream['name']}: {title}", fontsize=10)
        if lines:
            text = figure.add_subplot(grid[row, column:])
            text.axis("off")
            dim = dim_text(stream["dim"], stream["dim_lower_bound"])
            one_hot = stream["format"] == "sparse" and _one_hot(stream)
            heading = f"{stream['name']} ({stream['format']}, dim {dim}{', one-hot' if one_hot else ''})"
            text.text(0.0, 0.5, "\n".join([heading, *lines]), va="center", ha="left", fontsize=10)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI)
    return buffer.getvalue()


def _one_hot(stream: dict[str, Any]) -> bool:
    """Every sample of a sparse stream is a single 1."""
    values, nonzeros = stream["values"], stream["nonzeros_per_sample"]
    return bool(values["count"]) and values["min"] == values["max"] == 1 and nonzeros["min"] == nonzeros["max"] == 1


def _top_bars(axes: Any, histogram: list[dict[str, Any]]) -> None:
    """The most used indices as bars, most used first, each labelled with its index."""
    labels = [str(entry["low"]) for entry in histogram]
    axes.bar(range(len(labels)), [entry["count"] for entry in histogram], edgecolor="white")
    axes.set_xticks(range(len(labels)), labels, rotation=90 if len(labels) > 6 else 0, fontsize=8)
    axes.set_xlabel("index")
    axes.set_ylabel("count")


def _bars(axes: Any, histogram: list[dict[str, Any]], xlabel: str, discrete: bool = True) -> None:
    """A histogram's bins as bars: integer bins ``low..high`` centred on their integers, value bins [low, high)."""
    if not histogram:
        axes.text(0.5, 0.5, "none", ha="center", va="center", transform=axes.transAxes)
    else:
        shift = 0.5 if discrete else 0.0
        lows = [entry["low"] - shift for entry in histogram]
        widths = [entry["high"] - entry["low"] + 2 * shift for entry in histogram]
        axes.bar(lows, [entry["count"] for entry in histogram], width=widths, align="edge", edgecolor="white")
    axes.set_xlabel(xlabel)
    axes.set_ylabel("count")


def html_page(found: dict[str, Any], png: bytes) -> str:
    """A self-contained page: the figure (base64 PNG) and every number of the text report, in tables."""
    e = html.escape
    parts = [
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>cntkio stats: {e(found["file"])}</title>',
        f"<style>{_STYLE}</style></head><body>",
        f"<h1>{e(found['file'])}</h1>",
        f"<p>{e(found['format'])}, {number(found['bytes'])} bytes: {number(found['sequences'])} sequences in "
        f"{number(found['chunks'])} chunk(s); {number(found['bad_records'])} bad record(s) and "
        f"{number(found['empty_sequences'])} sequence(s) without a sample skipped.</p>",
        f'<img alt="distributions of {e(found["file"])}" src="data:image/png;base64,{base64.b64encode(png).decode()}">',
        "<h2>Sequence lengths</h2>",
        _summary_table(found["sequence_lengths"]),
        _histogram_table(found["sequence_lengths"]["histogram"], "samples"),
    ]
    for stream in found["streams"]:
        parts.append(
            f"<h2>Stream {e(stream['name'])}</h2><p>{e(stream['format'])}, dim "
            f"{e(dim_text(stream['dim'], stream['dim_lower_bound']))}: "
            f"{number(stream['samples'])} samples, absent from {number(stream['empty_sequences'])} sequence(s)</p>"
        )
        for label, text, histogram in stream_sections(stream):
            parts.append(f"<h3>{e(label)}</h3><p>{e(text)}</p>")
            parts.append(_histogram_table(histogram, _AXES[label]))
    parts.append("</body></html>\n")
    return "\n".join(parts)


def _summary_table(summary: dict[str, Any]) -> str:
    if summary["min"] is None:
        return f"<p>{summary_text(summary)}</p>"
    names = ("min", "mean", "median", "max")
    head = "".join(f"<th>{name}</th>" for name in names)
    return f"<table><tr>{head}</tr><tr>{''.join(f'<td>{number(summary[n])}</td>' for n in names)}</tr></table>"


def _histogram_table(histogram: list[dict[str, Any]], what: str) -> str:
    rows = "".join(f"<tr><td>{html.escape(bin_label(b))}</td><td>{number(b['count'])}</td></tr>" for b in histogram)
    return f"<table><tr><th>{html.escape(what)}</th><th>count</th></tr>{rows}</table>"
