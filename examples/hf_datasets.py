"""Hugging Face datasets: a sharded CTF corpus and HTK features with MLF labels as ``datasets.IterableDataset``s whose
shards are cntkio chunks, split between ranks without duplication, and a CTF file converted to Parquet that
``datasets.load_dataset`` reads.

Reads examples/data/shards/part-*.ctf and examples/data/speech/. Each row is a sequence: ``file``, ``chunk``,
``row``, ``key`` and, per stream, its samples flattened (``features``, ``features.samples``) or, for a sparse
stream, ``labels.indices``, ``labels.values`` and ``labels.entries``. Run from the repository root:
``python examples/hf_datasets.py``.
"""
# requires: datasets

from __future__ import annotations

import functools
import glob
import subprocess
import sys
import tempfile
from pathlib import Path

import datasets
import numpy as np
from datasets.distributed import split_dataset_by_node

import cntkio.hf
from cntkio import CTFDeserializer, HTKFeatureDeserializer, HTKMLFDeserializer, StreamDef, StreamDefs

datasets.disable_progress_bars()

streams = StreamDefs(
    features=StreamDef(field="features", shape=3), labels=StreamDef(field="label", shape=4, is_sparse=True)
)

# A part per file, each made by a picklable factory (DataLoader workers and ranks open their own readers).
files = sorted(glob.glob("examples/data/shards/part-*.ctf"))
corpus = cntkio.hf.iterable_dataset([functools.partial(CTFDeserializer, f, streams) for f in files])
rows = list(corpus)
print("shards:", corpus.n_shards, "- sequences:", len(rows))
row = rows[0]
print(f"key {row['key']}: features {np.reshape(row['features'], (-1, 3)).shape}, label {row['labels.indices']}")

# Two ranks: each reads its own shards (chunks), every sequence once.
keys = [r["key"] for rank in range(2) for r in split_dataset_by_node(corpus, rank=rank, world_size=2)]
print("two ranks, every sequence once:", sorted(keys) == sorted(r["key"] for r in rows))

# Speech: HTK features joined with MLF labels by utterance key, a shard per chunk of utterances of the features.
SPEECH = "examples/data/speech"
speech = cntkio.hf.iterable_dataset(
    [
        HTKFeatureDeserializer(StreamDefs(features=StreamDef(shape=8, scp=f"{SPEECH}/features.scp")), chunk_frames=40),
        HTKMLFDeserializer(f"{SPEECH}/states.list", StreamDefs(labels=StreamDef(shape=5, mlf=f"{SPEECH}/labels.mlf"))),
    ]
).with_format("numpy")
utterance = next(iter(speech))
frames = utterance["features.samples"]
print("speech shards:", speech.n_shards, "- first utterance:", utterance["key"], frames, "frames")

# Parquet: `cntkio convert IN --to parquet DIR` writes a file per chunk, which datasets (or pyarrow) reads.
with tempfile.TemporaryDirectory() as folder:
    subprocess.run([sys.executable, "-m", "cntkio", "convert", files[0], folder, "--to", "parquet",
                    "--stream", "features:3:dense", "--stream", "labels:4:sparse:label"], check=True)  # fmt: skip
    written = sorted(p.name for p in Path(folder).glob("*.parquet"))
    loaded = datasets.load_dataset("parquet", data_files=[str(Path(folder, n)) for n in written], split="train",
                                   cache_dir=str(Path(folder, "cache")))  # fmt: skip
    print("parquet:", written, "-", loaded.num_rows, "rows, columns", loaded.column_names[4:])
