"""Grain pipelines over cntkio data: a random-access source of sequences, and a source's minibatches with exact resume.

``cntkio.grain.SequenceSource`` gives Grain the sequences of a corpus one by one (record i is the i-th sequence in file
order), so Grain shuffles, shards, batches and runs worker processes; ``cntkio.grain.padded_batch`` pads sequences of
different lengths into a batch. ``cntkio.grain.minibatches`` gives Grain cntkio's own minibatches (its randomization
window and partitions) as padded NumPy batches, and its iterator's state is cntkio's checkpoint. Run from the
repository root: ``python examples/grain_loop.py``.
"""
# requires: grain

from __future__ import annotations

import functools
import json

import grain

import cntkio.grain
from cntkio import CTFDeserializer, MinibatchSource, StreamDef, StreamDefs

PATH = "examples/data/sequences.ctf"
STREAMS = StreamDefs(
    features=StreamDef(field="features", shape=3), labels=StreamDef(field="label", shape=4, is_sparse=True)
)

# 1. Sequences as a Grain data source: Grain shuffles (the same order for the same seed, in any process) and batches.
source = cntkio.grain.SequenceSource(CTFDeserializer(PATH, STREAMS), sparse="dense")
print(f"sequences: {len(source)}; record 0: features {source[0]['features'].shape}, key {source[0]['key']}")
dataset = grain.MapDataset.source(source).shuffle(seed=1).batch(4, batch_fn=cntkio.grain.padded_batch)
keys = []
for batch in dataset:
    keys += batch["key"].tolist()
    # batch["features"]: [4, T, 3], zeros past each sequence's batch["lengths"]["features"]
print("shuffled keys:", keys)
print("every sequence once:", sorted(keys) == list(range(len(source))))


# 2. A MinibatchSource's minibatches as a Grain IterDataset; get_state() is cntkio's checkpoint.
def make_source(path: str) -> MinibatchSource:
    return MinibatchSource(CTFDeserializer(path, STREAMS), randomization_seed=2, max_sweeps=2)


batches = cntkio.grain.minibatches(functools.partial(make_source, PATH), 16, partition=(1, 0), keys=True,
                                   layout={"labels": "per_sequence"})  # fmt: skip
model_inputs = batches.map(lambda b: {"x": b["features"], "mask": b["mask"]["features"], "y": b["labels"],
                                      "keys": b["keys"]})  # fmt: skip
whole = [batch["keys"].tolist() for batch in model_inputs]
print(f"{len(whole)} batches over 2 sweeps, shapes like {next(iter(model_inputs))['x'].shape}")

iterator = iter(model_inputs)
first = [next(iterator)["keys"].tolist() for _ in range(3)]
state = json.dumps(iterator.get_state())  # Grain's map iterator carries the cntkio iterator's state
resumed = iter(model_inputs)
resumed.set_state(json.loads(state))
rest = [batch["keys"].tolist() for batch in resumed]
print(f"state: {len(state)} bytes of JSON; resumed run = uninterrupted run:", first + rest == whole)
