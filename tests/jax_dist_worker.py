"""Helpers for tests/test_jax.py: CTF test data, a source factory, and one process of a multi-process JAX job.

As a script it runs one JAX process (``jax.distributed.initialize`` on localhost, CPU) that reads its partition
through ``cntkio.jax.JaxIterator`` with global arrays sharded over the processes, runs a jitted step on every batch,
and writes what it read to a JSON file:

  python tests/jax_dist_worker.py --data F --port P --process I --count N --out OUT.json
      [--stop-after K] [--resume STATE.json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from cntkio import CTFDeserializer, MinibatchSource, StreamDef, StreamDefs

STREAMS = StreamDefs(
    words=StreamDef(field="w", shape=40, is_sparse=True),
    intent=StreamDef(field="i", shape=6, is_sparse=True),
    feats=StreamDef(field="f", shape=2),
)


def write_ctf(path: Path, sequences: int = 300, seed: int = 0) -> None:
    """Sequences of 1-12 samples: a one-hot word per sample, an intent on the first line, dense features."""
    rng = np.random.default_rng(seed)
    lines = []
    for s in range(sequences):
        for t in range(int(rng.integers(1, 13))):
            intent = f" |i {s % 6}:1" if t == 0 else ""
            lines.append(f"{s} |w {int(rng.integers(0, 40))}:1{intent} |f {s} {t}")
    path.write_text("\n".join(lines) + "\n")


def make_source(path: str, max_sweeps: int = 1) -> MinibatchSource:
    reader = CTFDeserializer(path, STREAMS, chunk_size_in_bytes=1500)
    return MinibatchSource(reader, max_sweeps=max_sweeps, randomization_window_in_chunks=4, randomization_seed=5)


LAYOUT = {"words": "token_ids", "intent": "per_sequence", "feats": "padded"}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--process", type=int, required=True)
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--stop-after", type=int, default=0)
    ap.add_argument("--resume")
    args = ap.parse_args()

    import functools

    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from cntkio.jax import JaxIterator

    jax.distributed.initialize(f"127.0.0.1:{args.port}", num_processes=args.count, process_id=args.process)
    sharding = NamedSharding(jax.make_mesh((args.count,), ("batch",)), P("batch"))
    batches = JaxIterator(functools.partial(make_source, args.data), 64, layout=LAYOUT, sharding=sharding)
    if args.resume:
        batches.set_state(json.loads(Path(args.resume).read_text()))
    step = jax.jit(lambda b: (b["words"] * b["mask"]["words"]).sum() + b["lengths"]["words"].sum())
    keys: list[Any] = []
    totals = []
    state = None
    for count, batch in enumerate(batches, start=1):
        totals.append(int(step(batch)))
        keys += [key for _, key in batches.last_keys]
        if count == args.stop_after:
            state = batches.get_state()
            break
    result = {"keys": keys, "state": state, "shapes": sorted(batches.shapes), "steps": len(totals)}
    Path(args.out).write_text(json.dumps(result))


if __name__ == "__main__":
    main()
