#!/usr/bin/env python3
"""JAX bar (issue 12): ``cntkio.jax.JaxIterator`` over ATIS train — samples/s end to end with a jitted step, and the
number of distinct batch shapes per sweep (what ``jit`` compiles) with shape buckets and length bucketing on or off.

Configurations (randomized, minibatches of --samples samples, --sweeps sweeps, token ids for S0/S2, intent per
sequence), each in a fresh process, round-robin over --runs rounds, medians:
  natural shapes       batch_buckets/length_buckets = every size (one shape per distinct (B, T))
  shape buckets        powers of two (the default)
  buckets + bucketing  the default buckets and MinibatchSource(bucket_by_length=--samples)

  python bench/jax_iterator.py [--runs 3] [--sweeps 5] [--samples 1024] [--json out.json]
  python bench/jax_iterator.py --smoke
"""

from __future__ import annotations

import functools
import statistics
import sys
import time
from typing import Any

from cntkio import CTFDeserializer, MinibatchSource
from core import Report, cpu_seconds
from ctf_parse import _table
from harness import Job, Rounds, parser, run_child
from torch_loader import ATIS, ATIS_STREAMS, TOKEN_LAYOUT

EVERY_SIZE = tuple(range(1, 4097))


def make_source(path: str, sweeps: int, bucket: int) -> MinibatchSource:
    return MinibatchSource(CTFDeserializer(path, ATIS_STREAMS), max_sweeps=sweeps, randomization_seed=1,
                           bucket_by_length=bucket)  # fmt: skip


def child_jax(spec: dict[str, Any]) -> dict[str, Any]:
    import jax

    from cntkio.jax import JaxIterator

    buckets = EVERY_SIZE if spec["mode"] == "natural" else None
    bucket = spec["samples"] if spec["mode"] == "bucketing" else 0
    cpu0, t0 = cpu_seconds(), time.perf_counter()
    make = functools.partial(make_source, spec["file"], spec["sweeps"], bucket)
    batches = JaxIterator(make, spec["samples"], layout=TOKEN_LAYOUT, batch_buckets=buckets, length_buckets=buckets,
                          partition=(1, 0))  # fmt: skip
    step = jax.jit(lambda b: (b["S0"] * b["mask"]["S0"]).sum() + b["S1"].sum())
    samples = steps = 0
    cells = 0
    for batch in batches:
        step(batch).block_until_ready()
        samples += int(batch["lengths"]["S0"].sum())
        cells += batch["S0"].size
        steps += 1
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "cpu_s": cpu_seconds() - cpu0, "samples": samples, "steps": steps,
            "shapes": len(batches.shapes), "padding": 1 - samples / cells}  # fmt: skip


CHILDREN = {"jax": child_jax}


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__, CHILDREN, "1 sweep")
    ap.add_argument("--sweeps", type=int, default=5)
    ap.add_argument("--samples", type=int, default=1024)
    args = ap.parse_args(argv)
    if run_child(args, CHILDREN):
        return 0
    if args.smoke:
        args.runs, args.sweeps = 1, 1
    spec = {"file": str(ATIS), "sweeps": args.sweeps, "samples": args.samples}
    modes = {"natural": "natural shapes", "buckets": "shape buckets", "bucketing": "buckets + bucketing"}
    jobs = [Job(label, "jax", {**spec, "mode": mode}) for mode, label in modes.items()]
    rounds = Rounds(jobs, [], args.runs)
    report = Report()
    rows = []
    for label in modes.values():
        runs = rounds.results[label]

        def median(key: str, runs: list[dict[str, Any]] = runs) -> float:
            return statistics.median(r.get(key, float("nan")) for r in runs)

        rows.append([
            label, f"{median('samples') / median('seconds'):,.0f}", f"{median('seconds'):.2f}",
            f"{median('cpu_s'):.2f}", f"{median('steps'):.0f}", f"{median('shapes'):.0f}",
            f"{100 * median('padding'):.1f} %",
        ])  # fmt: skip
    report.lines.append(rounds.header("cntkio.jax"))
    report.lines.append("")
    header = ["configuration", "samples/s", "s", "CPU s", "steps", "distinct shapes (compiles)", "padding"]
    report.section(f"## ATIS train, {args.sweeps} sweeps, minibatches of {args.samples} samples, jitted step",
                   _table(header, rows))  # fmt: skip
    return report.finish(args, rounds.results)


if __name__ == "__main__":
    sys.exit(main())
