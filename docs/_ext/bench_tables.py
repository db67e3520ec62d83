"""The ``bench-table`` directive: a table of the performance page made from a benchmark script's ``--json`` output
(``docs/benchmarks/*.json``, written by ``bench/core.py`` and ``bench/handoff.py``), with the machine and the date of
the run, so the numbers a reader sees are the numbers a run wrote.

    ```{bench-table} benchmarks/core.json
    :table: throughput
    ```

Tables: ``throughput`` and ``atis`` (core.json), ``handoff`` (handoff.json).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective

Rows = tuple[list[str], list[list[str]]]


def _x(value: float, anchor: float) -> str:
    return f"{value:.0f} ({value / anchor:.2f}x)"


def throughput(document: dict[str, Any]) -> Rows:
    numbers = document["summary"]["throughput"]
    configs = ("raw", "file order", "randomized", "CNTK")
    header = ["file", "cntkio raw parse, 1 thread", "MinibatchSource, file order", "MinibatchSource, randomized",
              "CNTK's C++ parser, 1 thread"]  # fmt: skip
    rows = []
    for kind in ("dense", "sparse", "seq"):
        cntk = numbers[f"{kind} CNTK"]["mbps"]
        cells = []
        for config in configs:
            entry = numbers[f"{kind} {config}"]
            cells.append(f"{_x(entry['mbps'], cntk)}, {entry['cpu_s'] / entry['mb'] * 1000:.1f} CPU-ms/MB")
        rows.append([f"{kind} ({numbers[f'{kind} raw']['mb']:.0f} MB)", *cells])
    return header, rows


def atis(document: dict[str, Any]) -> Rows:
    a = document["summary"]["atis"]
    rows = [
        ["minibatches of 64 per second", f"{a['minibatches_per_s']:,.0f}"],
        ["µs per minibatch", f"{a['us_per_minibatch']:.1f}"],
        ["µs per minibatch beyond the parse", f"{a['overhead_us_per_minibatch']:.1f}"],
        ["cntkio raw parse / CNTK's parser", f"{a['cntk_seconds'] / a['raw_seconds']:.2f}x"],
    ]
    return ["ATIS, randomized, " + f"{a['sweeps']} sweeps", "value"], rows


def handoff(document: dict[str, Any]) -> Rows:
    configs = ("raw", "source", "source 1 thread", "dataset", "dataset ahead", "loader 2 workers", "CNTK")
    names = {
        "raw": "raw parse, 1 thread",
        "source": "MinibatchSource",
        "source 1 thread": "MinibatchSource, 1 parse thread",
        "dataset": "cntkio.torch, no background stage",
        "dataset ahead": "cntkio.torch (ahead=2)",
        "loader 2 workers": "cntkio.torch, 2 workers",
        "CNTK": "CNTK's C++ parser",
    }
    header = ["file", *(names[c] for c in configs)]
    rows = []
    for kind in ("dense", "sparse", "seq"):
        entry = document[kind]
        rate, cpu = entry["mb_per_s"], entry["cpu_s"]
        mb = document["mb"]
        rows.append([kind, *(f"{_x(rate[c], rate['CNTK'])}, {cpu[c] / mb * 1000:.1f} CPU-ms/MB" for c in configs)])
    return header, rows


TABLES: dict[str, Callable[[dict[str, Any]], Rows]] = {"throughput": throughput, "atis": atis, "handoff": handoff}


class BenchTable(SphinxDirective):
    required_arguments = 1
    option_spec: ClassVar[dict[str, Callable[[str], str]]] = {
        "table": lambda value: directives.choice(value, tuple(TABLES))
    }

    def run(self) -> list[nodes.Node]:
        relative, path = self.env.relfn2path(self.arguments[0], self.env.docname)
        self.env.note_dependency(relative)
        if not Path(path).is_file():
            raise self.error(f"{relative}: no benchmark output there (the page names the command that writes it)")
        document = json.loads(Path(path).read_text(encoding="utf-8"))
        header, rows = TABLES[self.options["table"]](document)
        machine = document["machine"]
        caption = nodes.paragraph()
        caption += nodes.emphasis(
            text=f"Measured {machine['date']} on {machine['cpu']}, {machine['cores']} cores, {machine['system']}, "
            f"Python {machine['python']}; medians of the run's rounds"
            + ("" if self.options["table"] == "atis" else "; MB/s of CTF text (x CNTK's parser), CPU-ms per MB")
            + "."
        )
        return [caption, _table(header, rows)]


def _table(header: list[str], rows: list[list[str]]) -> nodes.table:
    table = nodes.table()
    group = nodes.tgroup(cols=len(header))
    table += group
    group += [nodes.colspec(colwidth=1) for _ in header]
    for part, part_rows in ((nodes.thead(), [header]), (nodes.tbody(), rows)):
        for cells in part_rows:
            row = nodes.row()
            for cell in cells:
                entry = nodes.entry()
                entry += nodes.paragraph(text=cell)
                row += entry
            part += row
        group += part
    return table


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("bench-table", BenchTable)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
