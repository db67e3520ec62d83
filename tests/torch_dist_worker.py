"""Helpers for tests/test_torch.py: CTF test data, a picklable source factory, and a torch.distributed rank.

As a script it runs one rank of a ``torch.distributed`` job (gloo, TCP on 127.0.0.1) that reads its
partition through ``DataLoader(MinibatchDataset(...))`` and writes what it read to a JSON file:

  python tests/torch_dist_worker.py --data F --port P --rank R --world N --out OUT.json
      [--num-workers W] [--stop-after K] [--resume STATE.json]

``--stop-after K`` leaves after K batches (a simulated kill) and records ``batch.state`` of the last one and
the result of the collective ``gather_state``; ``--resume`` loads a state into the dataset first.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from cntkio import CTFDeserializer, MinibatchSource, StreamDef, StreamDefs

DENSE_DIM = 3
SPARSE_DIM = 50
CHUNK_BYTES = 500
MINIBATCH = 16


def write_ctf(path: Path, num_sequences: int = 200, max_length: int = 6, seed: int = 0) -> dict[int, Any]:
    """Writes sequences of 1..max_length samples with a dense ``x`` and a sparse ``s`` stream.

    Sample j of sequence k has ``x = [k, j, v]`` and one to three ``s`` entries. Returns, per key, the
    expected ``x`` as a ``(length, 3)`` array and ``s`` as a dense ``(length, 50)`` array.
    """
    rng = np.random.default_rng(seed)
    expected: dict[int, Any] = {}
    lines = []
    for key in range(num_sequences):
        length = int(rng.integers(1, max_length + 1))
        x = np.zeros((length, DENSE_DIM), dtype=np.float32)
        s = np.zeros((length, SPARSE_DIM), dtype=np.float32)
        for j in range(length):
            value = int(rng.integers(-99, 100)) / 4
            x[j] = (key, j, value)
            columns = sorted(rng.choice(SPARSE_DIM, size=int(rng.integers(1, 4)), replace=False).tolist())
            entries = []
            for column in columns:
                weight = int(rng.integers(1, 9)) / 2
                s[j, column] = weight
                entries.append(f"{column}:{weight:g}")
            lines.append(f"{key} |x {key} {j} {value:g} |s {' '.join(entries)}\n")
        expected[key] = (x, s)
    path.write_text("".join(lines))
    return expected


def make_source(
    path: str, randomize: bool = True, window: int = 3, max_sweeps: int = 1, seed: int = 7
) -> MinibatchSource:
    """A source over a file of :func:`write_ctf` in small chunks (top level, so that it pickles)."""
    streams = StreamDefs(
        x=StreamDef(field="x", shape=DENSE_DIM), s=StreamDef(field="s", shape=SPARSE_DIM, is_sparse=True)
    )
    deserializer = CTFDeserializer(path, streams, chunk_size_in_bytes=CHUNK_BYTES)
    return MinibatchSource(
        deserializer,
        max_sweeps=max_sweeps,
        randomize=randomize,
        randomization_window_in_chunks=window if randomize else 0,
        randomization_seed=seed,
    )


def _run_rank(args: argparse.Namespace) -> None:
    import functools

    import torch.distributed as dist
    from torch.utils.data import DataLoader

    from cntkio.torch import MinibatchDataset, gather_state

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}", rank=args.rank, world_size=args.world)
    try:
        # equal_steps "pad" by default here: these runs check that one epoch reads every sequence exactly once
        equal_steps = None if args.equal_steps == "off" else args.equal_steps
        dataset = MinibatchDataset(functools.partial(make_source, args.data), MINIBATCH, equal_steps=equal_steps)
        if args.resume:
            dataset.load_state_dict(json.loads(Path(args.resume).read_text()))
        keys: list[Any] = []
        state = None
        batches = 0
        loader = DataLoader(dataset, batch_size=None, num_workers=args.num_workers)
        for batch in loader:
            keys += [key for _, key in batch.keys]
            state = batch.state
            batches += 1
            if batches == args.stop_after:
                break
        del loader
        result: dict[str, Any] = {"rank": args.rank, "keys": keys, "batches": batches, "state": state}
        if args.stop_after:
            result["gathered"] = gather_state(state)  # collective: every rank takes part
        dist.barrier()
    finally:
        dist.destroy_process_group()
    Path(args.out).write_text(json.dumps(result))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world", type=int, required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--num-workers", type=int, default=0)
    parser.add_argument("--stop-after", type=int, default=0)
    parser.add_argument("--resume", default="")
    parser.add_argument("--equal-steps", default="pad", choices=["carry", "pad", "off"])
    _run_rank(parser.parse_args())


if __name__ == "__main__":
    main()
