#!/usr/bin/env python3
"""A file as large as memory (issue 11, point 6): one sweep in file order and one randomized over a ~20 GB dense CTF
file (the kit's 2 GB file, repeated), with ``memory_budget_bytes``; peak RSS against the index + the budget.

Each sweep runs in a fresh subprocess: RSS is read from /proc/self/status (VmRSS before building the deserializer,
after indexing, and VmHWM at the end: page cache is not RSS). Index bytes per sequence = the CTF deserializer's
index arrays (offsets, sizes, lengths, chunk starts, keys) / sequences. Bar: peak growth <= index + budget (the
interpreter's own growth, a few MB, is inside the margin printed).

  python bench/big_file.py [--gb 20] [--budget-mb 1024] [--json out.json]
  python bench/big_file.py --smoke      # 2 GB, budget 256 MB
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from cntkio import CTFDeserializer, MinibatchSource
from core import Report, cpu_seconds, stream_defs
from ctf_parse import _table
from harness import Job, Rounds, parser, peak_rss, repeated_file, run_child


def rss_now() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))


def child_sweep(spec: dict[str, Any]) -> dict[str, Any]:
    base = rss_now()
    t0, cpu0 = time.perf_counter(), cpu_seconds()
    reader = CTFDeserializer(spec["file"], stream_defs("dense"))
    index_seconds = time.perf_counter() - t0
    index = reader.sequence_index()
    index_bytes = int(index.nbytes + reader._offsets.nbytes + reader._sizes.nbytes + reader._chunk_first_lines.nbytes)
    after_index = rss_now() - base
    source = MinibatchSource(
        reader, max_sweeps=1, randomize=spec["randomize"], randomization_seed=1,
        memory_budget_bytes=spec["budget"],
    )  # fmt: skip
    sequences = 0
    while minibatch := source.next_minibatch(4096):
        sequences += len(minibatch.provenance.units)
        del minibatch
    seconds = time.perf_counter() - t0
    budget = source.memory_budget
    source.close()
    return {
        "seconds": seconds, "cpu_s": cpu_seconds() - cpu0, "index_seconds": index_seconds,
        "sequences": sequences, "index_bytes": index_bytes, "index_rss": after_index,
        "peak_growth": peak_rss() - base, "window": budget.window if budget else None,
        "held_chunks": budget.held_chunks if budget else None,
    }  # fmt: skip


CHILDREN = {"sweep": child_sweep}


def make_file(data: Path, gigabytes: int) -> Path:
    part = repeated_file(data / "dense_320mb_s1.ctf", 6, data / "dense_2gb_cat.ctf")
    copies = max(1, round(gigabytes / 2))
    return part if copies == 1 else repeated_file(part, copies, data / f"dense_{2 * copies}gb_cat.ctf")


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__, CHILDREN, "2 GB, budget 256 MB")
    ap.add_argument("--gb", type=int, default=20)
    ap.add_argument("--budget-mb", type=int, default=1024)
    args = ap.parse_args(argv)
    if run_child(args, CHILDREN):
        return 0
    if args.smoke:
        args.gb, args.budget_mb, args.runs = 2, 256, 1
    path = make_file(Path(args.data), args.gb)
    budget = args.budget_mb << 20
    jobs = [
        Job(f"{order}", "sweep", {"file": str(path), "randomize": randomize, "budget": budget})
        for order, randomize in (("file order", False), ("randomized", True))
    ]
    rounds = Rounds(jobs, [], args.runs)
    report = Report()
    rows = []
    size = path.stat().st_size
    for job in jobs:
        result = rounds.results[job.label][-1]
        if "failed" in result:
            rows.append([job.label, "failed", "", "", "", "", "", "", report.verdict([result["failed"]])])
            continue
        allowed = result["index_bytes"] + budget
        ratio = result["peak_growth"] / allowed
        rows.append([
            job.label, f"{size / 1e9:.1f} GB", f"{result['sequences']:,}",
            f"{result['index_bytes'] / result['sequences']:.1f}", f"{result['index_rss'] / 2**20:,.0f}",
            f"{result['peak_growth'] / 2**20:,.0f}", f"{allowed / 2**20:,.0f}", f"{ratio:.2f}",
            f"{size / result['seconds'] / 1e6:,.0f}", f"{result['window']}", "PASS" if ratio <= 1.02 else "FAIL",
        ])  # fmt: skip
        report.numbers[job.label] = result
    header = [
        "sweep", "file", "sequences", "index B/seq", "index RSS MiB", "peak growth MiB", "index + budget MiB",
        "ratio", "MB/s", "window chunks", "bar (<= 1.02)",
    ]  # fmt: skip
    report.lines.append(rounds.header("file as large as memory"))
    report.lines.append(f"# memory_budget_bytes = {budget:,}; peak growth = VmHWM at the end - VmRSS before indexing")
    report.lines.append("")
    report.section(f"## One sweep over {path.name}", _table(header, rows))
    return report.finish(args, rounds.results)


if __name__ == "__main__":
    sys.exit(main())
