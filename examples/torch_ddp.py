"""DistributedDataParallel on CPU: 2 processes (gloo), each rank reading its own partition of every epoch.

``MinibatchDataset`` takes the rank and world size from ``torch.distributed``: each sequence of an epoch goes to
one rank, and every rank takes the same number of steps per epoch (``equal_steps``; "pad" here: a rank out of data
takes empty steps of ``batch.weight == 0``, whose loss is a finite zero), so ranks stepping together never wait for
each other at the end of an epoch. Run from the repository root: ``python examples/torch_ddp.py``.
"""
# requires: torch

from __future__ import annotations

import functools
import gc
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import cntkio.torch
from cntkio import CTFDeserializer, MinibatchSource, StreamDef, StreamDefs

WORLD = 2


def make_source(path: str) -> MinibatchSource:
    streams = StreamDefs(
        features=StreamDef(field="features", shape=3), labels=StreamDef(field="label", shape=4, is_sparse=True)
    )
    deserializer = CTFDeserializer(path, streams, chunk_size_in_bytes=256)  # several chunks to share out
    return MinibatchSource(deserializer, randomization_window_in_chunks=4, randomization_seed=3, max_sweeps=1)


def train(rank: int) -> None:
    torch.manual_seed(0)  # the same initial weights on every rank
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(3, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = cntkio.torch.loader(
        functools.partial(make_source, "examples/data/sequences.ctf"), 16,  # 16 samples per step in all
        layout={"features": "padded", "labels": "per_sequence"}, equal_steps="pad",
    )  # fmt: skip
    for epoch in range(2):
        keys, steps = [], 0
        for batch in loader:
            mask = batch.masks["features"]
            x = (batch["features"] * mask[..., None]).sum(1) / mask.sum(1, keepdim=True).clamp(min=1)
            per_sequence = torch.nn.functional.cross_entropy(model(x), batch["labels"], reduction="none")
            loss = per_sequence.sum() / max(len(per_sequence), 1) * batch.weight  # finite on empty steps too
            optimizer.zero_grad()
            loss.backward()  # on every step of every rank: DDP's all-reduce waits for all
            optimizer.step()
            keys += [key for _, key in batch.keys]
            steps += 1
        everyone: list[list[int]] = [[] for _ in range(WORLD)]
        dist.all_gather_object(everyone, keys)
        if rank == 0:
            print(f"epoch {epoch}: {steps} steps per rank; rank 0 read {everyone[0]}, rank 1 read {everyone[1]}")
            print(f"  every sequence once: {sorted(everyone[0] + everyone[1]) == list(range(12))}")
    loader.dataset.close()


def run(rank: int, port: int) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD)
    try:
        train(rank)
        # The model, its gradients' graph and the group's pending work are gone before the group is: a gloo thread
        # still joinable when the interpreter tears such objects down aborts the process (seen on CI now and then).
        gc.collect()
        dist.barrier()
    finally:
        dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # two processes on a small machine
    mp.spawn(run, args=(free_port(),), nprocs=WORLD)
