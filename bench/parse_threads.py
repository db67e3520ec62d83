#!/usr/bin/env python3
"""Parallel chunk parse bar (issue 11, point 3): the raw parse of one 32 MiB chunk on 2 threads against 1 thread.

For each of the kit's dense, sparse and seq files (200 MB, ``gen.py``), one child process builds
``CTFDeserializer(file, streams)`` (default 32 MiB chunks) and times ``get_chunk(c)`` for every full-size chunk c,
alternating one thread and two (``cntkio.system.parsing_with``), ``--repeats`` times each: the time of a chunk is
the median of its repeats, and the table shows the median over the chunks. The call reads the chunk's bytes from
the file (page cache), parses them and returns its NumPy arrays. Checks: both thread counts give the same values.

  python bench/parse_threads.py [--runs 3] [--repeats 5] [--json out.json]
  python bench/parse_threads.py --smoke      # 2 MB files, 64 KiB chunks, one round
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from cntkio import CTFDeserializer
from cntkio._src.common.system import parsing_with
from core import Report, cpu_seconds, stream_defs
from ctf_parse import _table
from harness import Job, Rounds, parser, run_child


def chunk_sum(chunk: Any) -> float:
    total = 0.0
    for stream in chunk.values():
        values = getattr(stream, "values", None)
        total += float(np.abs(values if values is not None else stream.data).sum(dtype=np.float64))
    return total


def child_parse(spec: dict[str, Any]) -> dict[str, Any]:
    deserializer = CTFDeserializer(spec["file"], stream_defs(spec["kind"]), chunk_size_in_bytes=spec["chunk_bytes"])
    chunks = list(range(max(deserializer.num_chunks() - 1, 1)))  # the last chunk is a remainder
    seconds: dict[int, list[list[float]]] = {1: [], 2: []}
    cpu: dict[int, float] = {1: 0.0, 2: 0.0}
    sums: dict[int, float] = {1: 0.0, 2: 0.0}
    for c in chunks:
        per_thread: dict[int, list[float]] = {1: [], 2: []}
        for _ in range(spec["repeats"]):
            for threads in (1, 2):
                cpu0, t0 = cpu_seconds(), time.perf_counter()
                with parsing_with(threads):
                    chunk = deserializer.get_chunk(c)
                per_thread[threads].append(time.perf_counter() - t0)
                cpu[threads] += cpu_seconds() - cpu0
                sums[threads] += chunk_sum(chunk) / spec["repeats"]
                del chunk
        for threads in (1, 2):
            seconds[threads].append(per_thread[threads])
    calls = len(chunks) * spec["repeats"]
    return {
        "chunks": len(chunks),
        "seconds_1": statistics.median(statistics.median(r) for r in seconds[1]),
        "seconds_2": statistics.median(statistics.median(r) for r in seconds[2]),
        "cpu_1": cpu[1] / calls,
        "cpu_2": cpu[2] / calls,
        "same": abs(sums[1] - sums[2]) <= 1e-9 * max(abs(sums[1]), 1.0),
        "seconds": 0.0,
    }


CHILDREN = {"parse": child_parse}


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__, CHILDREN, "2 MB files, 64 KiB chunks, one round")
    ap.add_argument("--repeats", type=int, default=5, help="parses of each chunk per thread count")
    args = ap.parse_args(argv)
    if run_child(args, CHILDREN):
        return 0
    if args.smoke:
        args.runs, args.repeats = 1, 2
    size, chunk_bytes = ("2mb", 1 << 16) if args.smoke else ("200mb", 32 << 20)
    jobs = []
    for kind in ("dense", "sparse", "seq"):
        path = Path(args.data) / f"{kind}_{size}_s1.ctf"
        if not path.exists():
            sys.exit(f"{path} is missing: run bench/ctf_parse.py (or the kit's gen.py) first")
        spec = {"file": str(path), "kind": kind, "chunk_bytes": chunk_bytes, "repeats": args.repeats}
        jobs.append(Job(kind, "parse", spec))
    rounds = Rounds(jobs, [], args.runs)
    report = Report()
    rows = []
    for job in jobs:
        runs = rounds.results[job.label]
        one = statistics.median(r["seconds_1"] for r in runs)
        two = statistics.median(r["seconds_2"] for r in runs)
        mb = job.spec["chunk_bytes"] / 1e6
        speedup = one / two
        problems = [] if all(r.get("same") for r in runs) else ["1 and 2 threads differ"]
        rows.append([
            job.label, str(runs[0]["chunks"]), f"{one * 1e3:.1f}", f"{mb / one:.0f}", f"{two * 1e3:.1f}",
            f"{mb / two:.0f}", f"{statistics.median(r['cpu_2'] for r in runs) * 1e3:.1f}", f"{speedup:.2f}x",
            "PASS" if speedup >= 1.7 else "FAIL", report.verdict(problems),
        ])  # fmt: skip
        report.numbers[job.label] = {"one_thread_s": one, "two_threads_s": two, "speedup": speedup}
    report.lines.append(rounds.header("parallel chunk parse"))
    report.lines.append("# per chunk: median over the chunks of the median of its repeats; each run a fresh process")
    report.lines.append("")
    header = [
        "file", "chunks", "1 thread ms", "MB/s", "2 threads ms", "MB/s", "2 threads CPU ms", "speed-up",
        "bar >= 1.7x", "check",
    ]  # fmt: skip
    report.section("## Raw parse of one 32 MiB chunk: 2 threads against 1", _table(header, rows))
    return report.finish(args, rounds.results)


if __name__ == "__main__":
    sys.exit(main())
