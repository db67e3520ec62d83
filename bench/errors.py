#!/usr/bin/env python3
"""Counted errors bar (issue 22): the time per counted bad record beyond a clean parse of the same file (bar: <= 1 us
per error, 10^6 errors <= 1 s extra), through a MinibatchSource reading a whole sweep with the defaults a user gets.

Two CTF files of the same size and layout (``|a`` dense 2, ``|b`` sparse 5), one sequence per line: in the clean one
every value parses; in the dirty one every line holds one malformed number (``0.x``), so every sequence is one error
counted under ``max_errors`` (the error ledger, :mod:`cntkio.error_ledger`). Every round reads each file in a fresh
process (index, then one sweep, ``trace_level=1``: the first errors logged, the rest counted); the extra time per
error is (dirty - clean) / errors, from the medians, in wall and in CPU time (the steadier on a shared machine).

  python bench/errors.py [--lines 1000000] [--runs 5] [--json out.json]
  python bench/errors.py --smoke      # 10^5 lines, one round
"""

from __future__ import annotations

import json
import logging
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from cntkio import CTFDeserializer, MinibatchSource, StreamDef, StreamDefs
from harness import Job, Rounds, parser, run_child

STREAMS = StreamDefs(a=StreamDef(field="a", shape=2), b=StreamDef(field="b", shape=5, is_sparse=True))


def child_sweep(spec: dict[str, Any]) -> dict[str, Any]:
    logging.getLogger("cntkio").addHandler(logging.NullHandler())
    logging.getLogger("cntkio").propagate = False  # the first errors are still built and logged, not printed
    started, cpu = time.perf_counter(), time.process_time()
    reader = CTFDeserializer(spec["file"], STREAMS, max_errors=10**9)
    with MinibatchSource(reader, max_sweeps=1) as source:
        sequences = 0
        while minibatch := source.next_minibatch(8192):
            sequences += minibatch["a"].num_sequences
        seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu
        errors = source.error_report().total
    return {"seconds": seconds, "cpu_seconds": cpu_seconds, "sequences": sequences, "errors": errors}


CHILDREN = {"sweep": child_sweep}


def make_files(directory: Path, lines: int) -> tuple[Path, Path]:
    """The clean and the dirty file of ``lines`` lines (made once)."""
    directory.mkdir(parents=True, exist_ok=True)
    clean, dirty = directory / f"errors_clean_{lines}.ctf", directory / f"errors_dirty_{lines}.ctf"
    for path, value in ((clean, "0.5"), (dirty, "0.x")):
        if not path.exists():
            partial = path.with_suffix(".tmp")
            with open(partial, "w") as out:
                out.writelines(f"{i} |a {i % 97} {value} |b 3:1\n" for i in range(lines))
            partial.rename(path)
    return clean, dirty


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__, CHILDREN, "10^5 lines, one round")
    ap.add_argument("--lines", type=int, default=1_000_000, help="sequences (and errors in the dirty file)")
    args = ap.parse_args(argv)
    if run_child(args, CHILDREN):
        return 0
    lines = 100_000 if args.smoke else args.lines
    clean, dirty = make_files(Path(args.data), lines)
    jobs = [Job(name, "sweep", {"file": str(path)}) for name, path in (("clean", clean), ("dirty", dirty))]
    rounds = Rounds(jobs, [], 1 if args.smoke else args.runs)
    results = {name: [r for r in rounds.results[name] if "failed" not in r] for name in ("clean", "dirty")}
    if not all(results.values()):
        print("every run of a file failed", file=sys.stderr)
        return 1
    median = {(name, clock): statistics.median(r[clock] for r in runs) for name, runs in results.items()
              for clock in ("seconds", "cpu_seconds")}  # fmt: skip
    errors = results["dirty"][0]["errors"]
    if errors != lines or results["clean"][0]["errors"] != 0:
        print(f"expected {lines} errors in the dirty file and none in the clean one", file=sys.stderr)
        return 1
    print(rounds.header(f"counted errors: one sweep over {lines} sequences"))
    per_error = {}
    for clock, what in (("seconds", "wall"), ("cpu_seconds", "CPU")):
        clean_s, dirty_s = median["clean", clock], median["dirty", clock]
        per_error[what] = (dirty_s - clean_s) / errors
        print(
            f"{what:>4}: clean {clean_s:.3f} s, dirty {dirty_s:.3f} s: {per_error[what] * 1e6:.3f} us per counted "
            f"error beyond the clean parse ({errors} errors; bar <= 1 us)"
        )
    if args.json:
        summary = {"runs": results, "median": {f"{n}.{c}": v for (n, c), v in median.items()}, "per_error_s": per_error}
        Path(args.json).write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
