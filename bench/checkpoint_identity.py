#!/usr/bin/env python3
"""Checkpoint identity bar (issue 22): the cost of the content identity a MinibatchSource computes at open (the index
digested with CRC-32C, a bounded number of sampled byte ranges per file; :mod:`cntkio.identity`) against opening a
~2 GB CTF file whose index cache is warm (bar: <= 10 % of the cached open).

The file is the kit's seq file (explicit sequence ids, lengths 1-50: the most sequences per byte, so the largest
index) written 10 times into --data (made once); its index cache is written by a first open. Every round opens it in
a fresh process: the cached open (``CTFDeserializer(cache_index=True)``), then ``identity_of`` on it (what the source
computes once per deserializer). Wall and CPU times; medians over --runs rounds. The CPU times are the steadier on a
shared machine.

  python bench/checkpoint_identity.py [--runs 7] [--json out.json]
  python bench/checkpoint_identity.py --smoke      # the 200 MB file, one round
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from cntkio import CTFDeserializer
from cntkio.identity import identity_of
from core import stream_defs
from harness import Job, Rounds, parser, repeated_file, run_child


def child_open(spec: dict[str, Any]) -> dict[str, Any]:
    wall0, cpu0 = time.perf_counter(), time.process_time()
    deserializer = CTFDeserializer(spec["file"], stream_defs("seq"), cache_index=True, trace_level=0)
    wall1, cpu1 = time.perf_counter(), time.process_time()
    identity = identity_of(deserializer)
    wall2, cpu2 = time.perf_counter(), time.process_time()
    return {
        "open_s": wall1 - wall0, "open_cpu_s": cpu1 - cpu0, "identity_s": wall2 - wall1, "identity_cpu_s": cpu2 - cpu1,
        "sequences": identity["index"]["sequences"], "index_bytes": deserializer.sequence_index().nbytes,
    }  # fmt: skip


CHILDREN = {"open": child_open}


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__, CHILDREN, "the 200 MB file, one round")
    args = ap.parse_args(argv)
    if run_child(args, CHILDREN):
        return 0
    part = Path(args.data) / "seq_200mb_s1.ctf"
    path = part if args.smoke else repeated_file(part, 10, Path(args.data) / "seq_2gb_cat.ctf")
    runs = 1 if args.smoke else args.runs
    CTFDeserializer(str(path), stream_defs("seq"), cache_index=True, trace_level=0).close()  # the cache is warm
    rounds = Rounds([Job("cached open + identity", "open", {"file": str(path)})], [], runs)
    results = [r for r in rounds.results["cached open + identity"] if "failed" not in r]
    if not results:
        print("every run failed", file=sys.stderr)
        return 1
    median = {key: statistics.median(r[key] for r in results) for key in results[0]}
    print(rounds.header(f"checkpoint identity on {path.name} ({path.stat().st_size / 1e9:.2f} GB)"))
    print(f"sequences {median['sequences']:.0f}, index {median['index_bytes'] / 2**20:.0f} MiB")
    for what in ("open", "identity"):
        print(f"{what:>9}: {median[what + '_s'] * 1e3:8.1f} ms wall, {median[what + '_cpu_s'] * 1e3:8.1f} ms CPU")
    ratio_wall = median["identity_s"] / median["open_s"]
    ratio_cpu = median["identity_cpu_s"] / median["open_cpu_s"]
    print(f"identity / cached open: {ratio_wall:.1%} wall, {ratio_cpu:.1%} CPU (bar <= 10%)")
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": results, "median": median}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
