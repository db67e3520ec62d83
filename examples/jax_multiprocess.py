"""A multi-process JAX job on CPU: 2 processes (jax.distributed on localhost), each reading its own partition with
cntkio.jax.JaxIterator and stepping on global arrays sharded over the processes.

With ``sharding=``, the iterator yields global ``jax.Array``s (``jax.make_array_from_process_local_data``); the
processes agree on each step's shape and take the same number of steps (``equal_steps="pad"`` by default then), so
a jitted step runs on all of them together. Every sequence of the epoch is read by one process. Run from the
repository root: ``python examples/jax_multiprocess.py`` (it starts the 2 processes itself).
"""
# requires: jax

from __future__ import annotations

import functools
import json
import socket
import subprocess
import sys

from cntkio import CTFDeserializer, MinibatchSource, StreamDef, StreamDefs

PROCESSES = 2


def make_source(path: str) -> MinibatchSource:
    streams = StreamDefs(
        features=StreamDef(field="features", shape=3), labels=StreamDef(field="label", shape=4, is_sparse=True)
    )
    deserializer = CTFDeserializer(path, streams, chunk_size_in_bytes=256)  # several chunks to share out
    return MinibatchSource(deserializer, randomization_window_in_chunks=4, randomization_seed=3, max_sweeps=1)


def process(index: int, port: int) -> None:
    """One process of the job: prints the keys it read and the shapes of its steps, as JSON."""
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    from cntkio.jax import JaxIterator

    jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=PROCESSES, process_id=index)
    sharding = NamedSharding(jax.make_mesh((PROCESSES,), ("batch",)), PartitionSpec("batch"))
    batches = JaxIterator(functools.partial(make_source, "examples/data/sequences.ctf"), 16, sharding=sharding,
                          layout={"features": "padded", "labels": "per_sequence"})  # fmt: skip
    step = jax.jit(lambda b: (b["features"] * b["mask"]["features"][..., None]).sum())
    keys, shapes = [], []
    for batch in batches:  # one epoch
        step(batch)  # global arrays: [B, T, 3] over both processes, each holding its rows
        keys += [key for _, key in batch.sequence_keys]  # this process's real rows
        shapes.append(list(batch["features"].shape))
    print(json.dumps({"process": index, "keys": keys, "shapes": shapes}))
    jax.distributed.shutdown()


def main() -> None:
    with socket.socket() as probe:  # a free port for the coordinator
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, __file__, "--process"]
    children = [subprocess.Popen([*command, str(i), str(port)], stdout=subprocess.PIPE, text=True)
                for i in range(PROCESSES)]  # fmt: skip
    results = [json.loads(child.communicate(timeout=120)[0].strip().splitlines()[-1]) for child in children]
    if any(child.returncode for child in children):
        sys.exit("a process failed")
    for result in results:
        print(f"process {result['process']} read {result['keys']}; global shapes {result['shapes']}")
    everything = sorted(key for result in results for key in result["keys"])
    print("every sequence once:", everything == list(range(12)))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--process":
        process(int(sys.argv[2]), int(sys.argv[3]))
    else:
        main()
