#!/usr/bin/env python3
"""Checkpoint identity bar (issue 22): the cost of the content identity of the data (the index digested with CRC-32C, a
bounded number of sampled byte ranges per file; :mod:`cntkio.identity`) against opening a ~2 GB CTF file whose index
cache is warm (bar: <= 10 % of the cached open). A MinibatchSource makes it when it opens; the digests of the index
and of each file's sampled bytes come from the warm caches (made when the index was built), so it reads nothing.
With --shards N, also the 200 MB file split into N shards (at sequence boundaries, made once in --data) read as one
corpus: what the identity does per file weighs more against the cached open of many small files.

The file is the kit's seq file (explicit sequence ids, lengths 1-50: the most sequences per byte, so the largest
index) written 10 times into --data (made once); its index cache is written by a first open. Every round opens it in
a fresh process: the cached open (``CTFDeserializer(cache_index=True)``), its identity (what a MinibatchSource makes
of it at open, timed alone), a MinibatchSource over it (the rest of its open) and a ``get_checkpoint_state``. Wall
and CPU times; medians over --runs rounds.
The CPU times are the steadier on a shared machine.

  python bench/checkpoint_identity.py [--runs 7] [--shards 100] [--json out.json]
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
from cntkio._src.formats.identity import identity_of
from core import stream_defs
from harness import Job, Rounds, parser, repeated_file, run_child


def child_open(spec: dict[str, Any]) -> dict[str, Any]:
    clock = [(time.perf_counter(), time.process_time())]

    def lap() -> None:
        clock.append((time.perf_counter(), time.process_time()))

    deserializer = CTFDeserializer(spec["files"], stream_defs("seq"), cache_index=True, trace_level=0)
    lap()
    identity_of(deserializer)  # what a source makes of it when it opens (and keeps)
    lap()
    source = MinibatchSource(deserializer, trace_level=0)
    lap()
    source.get_checkpoint_state()
    lap()
    source.close()
    names = ("open", "identity", "source", "state")
    result = {f"{name}_s": clock[i + 1][0] - clock[i][0] for i, name in enumerate(names)}
    result.update({f"{name}_cpu_s": clock[i + 1][1] - clock[i][1] for i, name in enumerate(names)})
    return {**result, "sequences": deserializer.sequence_index().num_sequences}


CHILDREN = {"open": child_open}


def shards(part: Path, count: int, directory: Path) -> list[str]:
    """``part`` split into ``count`` files of about equal size, each ending where a sequence (an id) ends (made
    once)."""
    paths = [directory / f"part-{number:04}.ctf" for number in range(count)]
    if not all(path.exists() for path in paths):
        directory.mkdir(parents=True, exist_ok=True)
        data = part.read_bytes()
        start = 0
        for number, path in enumerate(paths):
            end = len(data)
            if number < count - 1:
                end = data.index(b"\n", max(start, (number + 1) * len(data) // count)) + 1
                last = data[data.rindex(b"\n", 0, end - 1) + 1 : end].split(b" ", 1)[0]
                while end < len(data) and data[end : data.index(b"\n", end)].split(b" ", 1)[0] == last:
                    end = data.index(b"\n", end) + 1
            path.write_bytes(data[start:end])
            start = end
    return [str(path) for path in paths]


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__, CHILDREN, "the 200 MB file, one round")
    ap.add_argument("--shards", type=int, default=0, help="also the 200 MB file split into this many shards")
    args = ap.parse_args(argv)
    if run_child(args, CHILDREN):
        return 0
    part = Path(args.data) / "seq_200mb_s1.ctf"
    path = part if args.smoke else repeated_file(part, 10, Path(args.data) / "seq_2gb_cat.ctf")
    runs = 1 if args.smoke else args.runs
    corpora: dict[str, Any] = {f"{path.name} ({path.stat().st_size / 1e9:.2f} GB)": str(path)}
    if args.shards:
        corpora[f"{part.name} in {args.shards} shards"] = shards(
            part, args.shards, Path(args.data) / f"shards{args.shards}"
        )
    for files in corpora.values():
        CTFDeserializer(files, stream_defs("seq"), cache_index=True, trace_level=0).close()  # the caches are warm
    rounds = Rounds([Job(label, "open", {"files": files}) for label, files in corpora.items()], [], runs)
    print(rounds.header("checkpoint identity"))
    medians = {}
    for label in corpora:
        results = [r for r in rounds.results[label] if "failed" not in r]
        if not results:
            print(f"{label}: every run failed", file=sys.stderr)
            return 1
        median = medians[label] = {key: statistics.median(r[key] for r in results) for key in results[0]}
        print(f"{label}: sequences {median['sequences']:.0f}")
        labels = {
            "open": "cached open (CTFDeserializer)", "identity": "its identity (at a source's open)",
            "source": "MinibatchSource(it), the rest", "state": "get_checkpoint_state",
        }  # fmt: skip
        for name, text in labels.items():
            print(f"{text:>33}: {median[name + '_s'] * 1e3:8.1f} ms wall, {median[name + '_cpu_s'] * 1e3:8.1f} ms CPU")
        print(
            f"  identity / cached open: {median['identity_s'] / median['open_s']:.1%} wall, "
            f"{median['identity_cpu_s'] / median['open_cpu_s']:.1%} CPU (bar <= 10%)"
        )
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": rounds.results, "median": medians}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
