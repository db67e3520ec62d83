#!/usr/bin/env python3
"""Equal steps across ranks (issue 22 §4/§7): what each rule costs in data, per epoch, for 2, 3 and 4 ranks.

For a CTF file read randomized (seed 1) with ``--minibatch`` samples per rank and step, every rank's minibatch
count per epoch is planned from the index alone (``cntkio.equal_steps.EqualSteps``, as ``cntkio.torch`` plans it):
``carry`` (default ``max_carry``) reports the samples each epoch moves into the next (the backlog) and the empty steps
it still pads; ``pad`` the empty steps. The planning time per epoch is shown beside the time to read one rank's
share of an epoch with ``MinibatchSource`` (the anchor: what the plan adds to an epoch of reading).

  python bench/equal_steps.py [FILE.ctf ...] [--epochs 3] [--minibatch 256] [--chunk-kib 0]
Default file: ATIS (../shared/datasets/atis/atis.train.ctf; streams S0 943, S1 26, S2 129 sparse); the kit's seq
files (gen.py, ``seq_*.ctf``: S0, S1 sparse 10000). Other files are read with their streams inferred
(``cntkio.infer``); ``--chunk-kib`` > 0 splits the file into chunks of that size (chunk-level partitioning).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

from cntkio import CTFDeserializer, MinibatchSource, StreamDef, StreamDefs
from cntkio._src.integrations.equal_steps import MAX_CARRY, EqualSteps

ATIS = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "atis" / "atis.train.ctf"
KNOWN_STREAMS = {"atis": {"S0": 943, "S1": 26, "S2": 129}, "seq": {"S0": 10000, "S1": 10000}}  # all sparse


def open_source(path: Path, chunk_kib: int) -> MinibatchSource:
    known = next((dims for prefix, dims in KNOWN_STREAMS.items() if path.name.startswith(prefix)), None)
    if known is not None:
        streams = StreamDefs(**{n: StreamDef(field=n, shape=d, is_sparse=True) for n, d in known.items()})
    else:
        from cntkio._src.formats.ctf_infer import infer_streams

        streams = infer_streams(str(path))
    options: dict[str, Any] = {"chunk_size_in_bytes": chunk_kib << 10} if chunk_kib else {}
    deserializer = CTFDeserializer(str(path), streams, **options)
    return MinibatchSource(deserializer, randomization_seed=1, max_sweeps=1)  # an epoch: one sweep (start_epoch)


def rank_read_seconds(path: Path, chunk_kib: int, minibatch: int, ranks: int) -> float:
    """Reading rank 0's share of epoch 0 (every minibatch gathered): the anchor for the planning time."""
    with open_source(path, chunk_kib) as source:
        start = time.perf_counter()
        while source.next_minibatch(minibatch * ranks, num_data_partitions=ranks, partition_index=0):
            pass
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="*", type=Path, default=[ATIS])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--minibatch", type=int, default=256, help="samples per rank and step")
    parser.add_argument("--chunk-kib", type=int, default=0)
    args = parser.parse_args()
    for path in args.files:
        print(f"\n{path.name}, {args.minibatch} samples per rank and step, {args.epochs} epochs"
              f"{f', {args.chunk_kib} KiB chunks' if args.chunk_kib else ''}")  # fmt: skip
        print(f"{'ranks':>5} {'rule':>5} {'samples/epoch':>13}  per epoch: moved to the next (samples) / padded steps"
              f"   plan ms/epoch  read ms (rank 0, one epoch)")  # fmt: skip
        for ranks in (2, 3, 4):
            read_ms = 1e3 * rank_read_seconds(path, args.chunk_kib, args.minibatch, ranks)
            for rule in ("carry", "pad"):
                with open_source(path, args.chunk_kib) as source:
                    planner = EqualSteps(rule, args.minibatch * ranks, ranks, max_carry=MAX_CARRY)
                    cells, times, total = [], [], 0
                    for epoch in range(args.epochs):
                        start = time.perf_counter()
                        report = planner.plan(source, epoch).report()
                        times.append(time.perf_counter() - start)
                        total = sum(report["own_samples"])
                        cells.append(f"{sum(report['carried_out_samples'])}/{sum(report['padded'])}")
                print(f"{ranks:>5} {rule:>5} {total:>13}  {'  '.join(cells):<52} "
                      f"{1e3 * statistics.median(times):>13.1f}  {read_ms:>9.1f}")  # fmt: skip


if __name__ == "__main__":
    main()
