#!/usr/bin/env python3
"""Checkpoint identity bar (issue 22): the cost of the content identity of the data (the index digested with CRC-32C, a
bounded number of sampled byte ranges per file; :mod:`cntkio.identity`) against opening a ~2 GB CTF file whose index
cache is warm (bar: <= 10 % of the cached open). A source makes it at its first checkpoint (or restore), not at open.

The file is the kit's seq file (explicit sequence ids, lengths 1-50: the most sequences per byte, so the largest
index) written 10 times into --data (made once); its index cache is written by a first open. Every round opens it in
a fresh process: the cached open (``CTFDeserializer(cache_index=True)``), a MinibatchSource over it, its first
``get_checkpoint_state`` (which makes the identity) and a second one. Wall and CPU times; medians over --runs rounds.
The CPU times are the steadier on a shared machine.

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

from cntkio import CTFDeserializer, MinibatchSource
from core import stream_defs
from harness import Job, Rounds, parser, repeated_file, run_child


def child_open(spec: dict[str, Any]) -> dict[str, Any]:
    clock = [(time.perf_counter(), time.process_time())]

    def lap() -> None:
        clock.append((time.perf_counter(), time.process_time()))

    deserializer = CTFDeserializer(spec["file"], stream_defs("seq"), cache_index=True, trace_level=0)
    lap()
    source = MinibatchSource(deserializer, trace_level=0)
    lap()
    source._identity_json()  # what its first checkpoint (or restore) makes: the index digested, the file sampled
    lap()
    source.get_checkpoint_state()
    lap()
    source.close()
    names = ("open", "source", "identity", "state")
    result = {f"{name}_s": clock[i + 1][0] - clock[i][0] for i, name in enumerate(names)}
    result.update({f"{name}_cpu_s": clock[i + 1][1] - clock[i][1] for i, name in enumerate(names)})
    return {**result, "sequences": deserializer.sequence_index().num_sequences}


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
    print(f"sequences {median['sequences']:.0f}")
    labels = {
        "open": "cached open (CTFDeserializer)", "source": "MinibatchSource(it)",
        "identity": "the identity (first checkpoint)", "state": "get_checkpoint_state after it",
    }  # fmt: skip
    for name, label in labels.items():
        print(f"{label:>31}: {median[name + '_s'] * 1e3:8.1f} ms wall, {median[name + '_cpu_s'] * 1e3:8.1f} ms CPU")
    print(
        f"identity / cached open: {median['identity_s'] / median['open_s']:.1%} wall, "
        f"{median['identity_cpu_s'] / median['open_cpu_s']:.1%} CPU, once per source at its first checkpoint; "
        "nothing at open (bar <= 10%)"
    )
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": results, "median": median}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
