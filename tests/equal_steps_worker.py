"""One rank of a ``torch.distributed`` job (gloo, TCP on 127.0.0.1) for tests/test_equal_steps.py.

It reads several epochs through ``DataLoader(MinibatchDataset(...))`` with the dataset's default equal steps (or
``--rule``), takes part in an ``all_reduce`` at every step — as DDP's gradient reduction does, so a rank that stops
early leaves the others waiting (the collective times out instead of hanging the test) — and writes per epoch its
steps, the keys it read and the batches' weights to a JSON file:

  python tests/equal_steps_worker.py --data F --port P --rank R --world N --out OUT.json
      [--rule carry|pad|off] [--epochs E] [--num-workers W] [--minibatch M]
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

from cntkio.torch import MinibatchDataset
from torch_dist_worker import make_source


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    for name in ("--data", "--out"):
        parser.add_argument(name, required=True)
    for name in ("--port", "--rank", "--world"):
        parser.add_argument(name, type=int, required=True)
    parser.add_argument("--rule", default="auto")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--num-workers", type=int, default=0)
    parser.add_argument("--minibatch", type=int, default=16)
    args = parser.parse_args()
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{args.port}", rank=args.rank, world_size=args.world,
        timeout=datetime.timedelta(seconds=300),  # (up to 12 processes on 2 cores)
    )  # fmt: skip
    try:
        rule = None if args.rule == "off" else args.rule
        dataset = MinibatchDataset(functools.partial(make_source, args.data), args.minibatch, equal_steps=rule)
        loader = DataLoader(dataset, batch_size=None, num_workers=args.num_workers)
        epochs: list[dict[str, Any]] = []
        for _ in range(args.epochs):
            keys: list[Any] = []
            weights: list[float] = []
            plan = None
            for batch in loader:
                step = torch.ones(1)
                dist.all_reduce(step)  # every rank steps together (a rank that has stopped would leave this waiting)
                keys += [key for _, key in batch.keys]
                weights.append(batch.weight)
                plan = batch.state.get("equal_steps")
            epochs.append({"steps": len(weights), "keys": keys, "weights": weights, "plan": plan})
        dist.barrier()
    finally:
        dist.destroy_process_group()
    Path(args.out).write_text(json.dumps({"rank": args.rank, "epochs": epochs}))


if __name__ == "__main__":
    main()
