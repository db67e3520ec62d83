"""A PyTorch DataLoader with 2 worker processes, stopped mid-epoch and resumed from a batch's state.

Every batch carries ``state``, the checkpoint right after it; ``load_state_dict(state)`` on a new dataset continues
with the next batch. The stream of batches is the same for any ``num_workers``. (For CNTK formats ``num_workers=0``
is the recommended setting: the parse runs in C++ threads and a background thread assembles the next batches;
workers pay when each sample costs Python work, as in a plug-in.) Run from the repository root:
``python examples/torch_workers_resume.py``.
"""
# requires: torch

from __future__ import annotations

import functools
import json

import cntkio.torch
from cntkio import CTFDeserializer, MinibatchSource, StreamDef, StreamDefs


def make_source(path: str) -> MinibatchSource:  # at the top level: loader workers pickle it
    streams = StreamDefs(
        features=StreamDef(field="features", shape=3), labels=StreamDef(field="label", shape=4, is_sparse=True)
    )
    deserializer = CTFDeserializer(path, streams, chunk_size_in_bytes=256)  # small chunks: several per worker
    return MinibatchSource(deserializer, randomization_window_in_chunks=4, randomization_seed=5, max_sweeps=1)


def keys(batch: cntkio.torch.TorchMinibatch) -> list:
    return [key for _, key in batch.keys]


def main() -> None:
    make = functools.partial(make_source, "examples/data/sequences.ctf")

    # The whole epoch, in the training process (no workers): the reference.
    with cntkio.torch.MinibatchDataset(make, 8) as dataset:
        reference = [keys(batch) for batch in dataset]
    print("in-process, one epoch:", reference)

    # Two workers: the same batches, in the same order. Stop after 3 and keep the state (JSON).
    train = cntkio.torch.loader(make, 8, num_workers=2)
    seen, saved = [], None
    for batch in train:
        seen.append(keys(batch))
        if len(seen) == 3:
            saved = json.dumps(batch.state)
            break
    del train  # (stops the workers)
    print("2 workers, stopped after 3 batches:", seen)

    # A new loader (say in a new process after a crash) resumes right after the third batch.
    resumed = cntkio.torch.loader(make, 8, num_workers=2)
    resumed.dataset.load_state_dict(json.loads(saved))
    rest = [keys(batch) for batch in resumed]
    print("resumed:", rest)
    print("together the reference epoch:", seen + rest == reference)
    resumed.dataset.close()


if __name__ == "__main__":  # (worker processes started with "spawn" import this file)
    main()
