"""Getting started: read a CTF file with MinibatchSource, then train a tiny PyTorch model on it with cntkio.torch.

examples/data/sequences.ctf holds 12 sequences of 2 to 7 steps: a dense 3-value ``features`` sample per step and
a one-hot ``label`` (4 classes) on the first step. Run from the repository root:
``python examples/getting_started.py``.
"""
# requires: torch

from __future__ import annotations

import functools

import torch

import cntkio.torch
from cntkio import CTFDeserializer, MinibatchSource, StreamDef, StreamDefs

CTF = "examples/data/sequences.ctf"
STREAMS = StreamDefs(
    features=StreamDef(field="features", shape=3, is_sparse=False),  # `|features` in the file
    labels=StreamDef(field="label", shape=4, is_sparse=True),  # `|label`, one-hot over 4 classes
)

# 1. NumPy minibatches straight from a MinibatchSource
source = MinibatchSource(CTFDeserializer(CTF, STREAMS), randomization_seed=1, max_sweeps=1)
minibatch = source.next_minibatch(16)  # at most 16 samples of the `features` stream (the longest)
features = minibatch["features"]
print("sequences:", features.num_sequences, "samples:", features.num_samples)
print("padded features:", features.asarray().shape)  # [sequences, longest, 3]; features.mask marks the padding
print("first keys:", minibatch.sequence_keys[:3])  # (file, sequence id) of each sequence
source.close()


# 2. A PyTorch training loop. The source is made by a function, so that each pass (epoch) can make its own.
def make_source(path: str) -> MinibatchSource:
    return MinibatchSource(CTFDeserializer(path, STREAMS), randomization_seed=1, max_sweeps=1)


train = cntkio.torch.loader(
    functools.partial(make_source, CTF),
    16,
    layout={"features": "padded", "labels": "per_sequence"},  # [B, T, 3] with a mask; class ids [B]
)
torch.manual_seed(0)
model = torch.nn.Linear(3, 4)
optimizer = torch.optim.SGD(model.parameters(), lr=0.2)
for epoch in range(20):  # each pass over the loader reads the next, reshuffled epoch
    total, count = 0.0, 0
    for batch in train:
        x, mask = batch["features"], batch.masks["features"]  # float32 [B, T, 3], bool [B, T]
        mean = (x * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)  # average over each sequence's steps
        loss = torch.nn.functional.cross_entropy(model(mean), batch["labels"])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total, count = total + loss.item() * len(x), count + len(x)
    if epoch % 5 == 4:
        print(f"epoch {epoch}: loss {total / count:.3f} over {count} sequences")
train.dataset.close()
