"""cntkio.torch layouts: the same minibatch as the tensors different PyTorch models take.

Each stream of a batch comes in the layout asked for (``layout=`` one name for every stream, or ``{stream: name}``;
``cntkio.torch.LAYOUTS`` lists them). Reads the first minibatch of examples/data/sequences.ctf (dense 3-value
``features`` per step; a one-hot ``labels`` sample on each sequence's first step) and examples/data/records.jsonl
(one-hot token ids per step) in several layouts. Run from the repository root: ``python examples/torch_layouts.py``.
"""
# requires: torch

from __future__ import annotations

import sys
from pathlib import Path

import torch

import cntkio.torch
from cntkio import CTFDeserializer, MinibatchSource, StreamDef, StreamDefs

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the JSON lines reader of examples/record_decoder.py
from record_decoder import json_lines

STREAMS = StreamDefs(
    features=StreamDef(field="features", shape=3), labels=StreamDef(field="label", shape=4, is_sparse=True)
)


def sequences() -> MinibatchSource:
    return MinibatchSource(CTFDeserializer("examples/data/sequences.ctf", STREAMS), randomize=False, max_sweeps=1)


def tokens() -> MinibatchSource:
    return MinibatchSource(json_lines("examples/data/records.jsonl"), randomize=False, max_sweeps=1)


def first_batch(make_source, layout) -> cntkio.torch.TorchMinibatch:
    with cntkio.torch.MinibatchDataset(make_source, 16, layout=layout) as dataset:
        return next(iter(dataset))


def describe(value: object) -> str:
    if isinstance(value, torch.nn.utils.rnn.PackedSequence):
        return f"PackedSequence(data {tuple(value.data.shape)}, batch_sizes {value.batch_sizes.tolist()})"
    if value.is_nested:
        return f"nested tensor of {[tuple(t.shape) for t in value.unbind()]}"
    if value.layout == torch.sparse_csr:
        return f"CSR tensor {tuple(value.shape)}, {value.values().numel()} stored values"
    return f"{value.dtype} {tuple(value.shape)}"


# "auto" (the default): dense streams padded [B, T, *shape] (or [B, *shape] when each sequence has one sample),
# sparse streams CSR (one row per sample).
batch = first_batch(sequences, "auto")
print("auto:        features", describe(batch["features"]), "| labels", describe(batch["labels"]))
print("             lengths", batch.lengths["features"].tolist())

batch = first_batch(sequences, {"features": "padded", "labels": "per_sequence"})
print("padded:      features", describe(batch["features"]), "mask", describe(batch.masks["features"]))
print("per_sequence labels (class ids for CrossEntropyLoss):", batch["labels"].tolist())

for layout in ("packed", "nested", "flat"):  # for nn.LSTM/GRU, jagged tensors, or every sample as a row
    print(f"{layout + ':':12} features", describe(first_batch(sequences, {"features": layout})["features"]))

# One-hot streams as token ids: for nn.Embedding (padded with pad_id, and a mask) or nn.EmbeddingBag (flat + offsets).
batch = first_batch(tokens, {"tokens": "token_ids"})
print(
    "token_ids:    ", describe(batch["tokens"]), batch["tokens"][0].tolist(), "mask", batch.masks["tokens"][0].tolist()
)
batch = first_batch(tokens, {"tokens": "token_offsets"})
print("token_offsets:", describe(batch["tokens"]), "offsets", batch.offsets["tokens"].tolist())
bag = torch.nn.EmbeddingBag(16, 4, mode="mean")
print("EmbeddingBag output:", tuple(bag(batch["tokens"], batch.offsets["tokens"]).shape))
