#!/usr/bin/env python3
"""Sharded corpus bar (issue 11, point 1): the kit's 200 MB dense file split into --shards files (at line
boundaries), read as one corpus with a glob pattern, against the same data in one file.

Every measurement runs in a fresh subprocess, round-robin over --runs rounds; medians are shown. Each reads one
sweep with MinibatchSource (minibatches of 1024 samples, default chunk size: the one file has 7 chunks, each
shard is one), in file order and randomized (window 128 chunks), from building the deserializer to the last
minibatch. Checks: both give the same number of sequences
and the same sum of values.

  python bench/shards.py [--runs 3] [--shards 100] [--json out.json]
  python bench/shards.py --smoke      # the 20 MB file in 10 shards, one round
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Any

from cntkio import CTFDeserializer, MinibatchSource
from core import Report, cpu_seconds, stream_defs
from ctf_parse import _table
from harness import Job, Rounds, parser, run_child


def child_read(spec: dict[str, Any]) -> dict[str, Any]:
    cpu0, t0 = cpu_seconds(), time.perf_counter()
    reader = CTFDeserializer(spec["files"], stream_defs("dense"))  # default chunks (32 MiB): a shard is one chunk
    source = MinibatchSource(
        reader, max_sweeps=1, randomize=spec["randomize"], randomization_window_in_chunks=128, randomization_seed=1
    )
    sequences, total = 0, 0.0
    while minibatch := source.next_minibatch(1024):
        sequences += len(minibatch.provenance.units)
        total += float(minibatch["features"].values.sum(dtype="float64"))
    source.close()
    return {"seconds": time.perf_counter() - t0, "cpu_s": cpu_seconds() - cpu0, "sequences": sequences, "sum": total}


CHILDREN = {"read": child_read}


def split(source: Path, folder: Path, shards: int) -> str:
    """``shards`` files of about equal size cut at line ends, written once; their glob pattern."""
    folder.mkdir(parents=True, exist_ok=True)
    if len(list(folder.glob("part-*.ctf"))) != shards:
        data = source.read_bytes()
        cut, start = len(data) // shards, 0
        for shard in range(shards):
            end = len(data) if shard == shards - 1 else data.index(b"\n", start + cut) + 1
            (folder / f"part-{shard:04d}.ctf").write_bytes(data[start:end])
            start = end
    return str(folder / "part-*.ctf")


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__, CHILDREN, "the 20 MB file in 10 shards, one round")
    ap.add_argument("--shards", type=int, default=100)
    args = ap.parse_args(argv)
    if run_child(args, CHILDREN):
        return 0
    data = Path(args.data)
    whole = data / ("dense_20mb_s1.ctf" if args.smoke else "dense_200mb_s1.ctf")
    shards = 10 if args.smoke else args.shards
    if args.smoke:
        args.runs = 1
    pattern = split(whole, data / f"{whole.stem}-{shards}-shards", shards)
    timed = [
        Job(f"{label}, {order}", "read", {"files": files, "randomize": randomize})
        for label, files in (("one file", str(whole)), (f"{shards} shards", pattern))
        for order, randomize in (("file order", False), ("randomized", True))
    ]
    rounds = Rounds(timed, [], args.runs)
    size = whole.stat().st_size
    report = Report()
    rows = []
    for order in ("file order", "randomized"):
        one = rounds.results[f"one file, {order}"]
        many = rounds.results[f"{shards} shards, {order}"]
        speed_one = size / statistics.median(r["seconds"] for r in one) / 1e6
        speed_many = size / statistics.median(r["seconds"] for r in many) / 1e6
        same = one[-1]["sequences"] == many[-1]["sequences"] and abs(one[-1]["sum"] - many[-1]["sum"]) <= 1e-6 * abs(
            one[-1]["sum"]
        )
        ratio = speed_many / speed_one
        rows.append([
            order, f"{speed_one:,.0f}", f"{speed_many:,.0f}", f"{ratio:.2f}", "PASS" if ratio >= 0.95 else "FAIL",
            report.verdict([] if same else ["the shards read other data"]),
        ])  # fmt: skip
        report.numbers[order] = {"one_file_mb_s": speed_one, "shards_mb_s": speed_many, "ratio": ratio}
    report.lines.append(rounds.header("sharded corpus bar"))
    report.lines.append("# MB/s of CTF text (10^6 bytes), medians of the runs, each in a fresh process")
    report.lines.append("")
    title = f"## {whole.name} ({size / 1e6:,.0f} MB) in one file and in {shards} shards, MinibatchSource, 1 sweep"
    header = ["order", "one file MB/s", f"{shards} shards MB/s", "shards / one", "bar >= 0.95", "check"]
    report.section(title, _table(header, rows))
    return report.finish(args, rounds.results)


if __name__ == "__main__":
    sys.exit(main())
