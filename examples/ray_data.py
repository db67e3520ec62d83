"""Ray Data: a sharded CTF corpus read as a Ray dataset (one read task per chunk), converted to CBF shards by Ray,
and the shards read back with MinibatchSource.

Reads examples/data/shards/part-*.ctf on a local Ray instance of 2 CPUs. Each row of the dataset is a sequence:
``file``, ``chunk``, ``row``, ``key`` and, per stream, its samples flattened (``features``, ``features.samples``)
or, for a sparse stream, ``labels.indices``, ``labels.values`` and ``labels.entries``. Run from the repository
root: ``python examples/ray_data.py``.
"""
# requires: ray

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import ray

import cntkio.ray
from cntkio import CBFDeserializer, MinibatchSource, StreamDef, StreamDefs

streams = StreamDefs(
    features=StreamDef(field="features", shape=3), labels=StreamDef(field="label", shape=4, is_sparse=True)
)

ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
ray.data.DataContext.get_current().enable_progress_bars = False
try:
    with tempfile.TemporaryDirectory() as folder:
        # The index of each file is built once and cached (cache_index): index_cache_dir= keeps the caches out of
        # the data's folder; on a cluster give a folder every node reads, and tasks load it instead of scanning.
        corpus = cntkio.ray.CTFDatasource("examples/data/shards/part-*.ctf", streams,
                                          index_cache_dir=Path(folder, "index"))  # fmt: skip
        dataset = corpus.dataset()  # a block per chunk, whatever the cluster's size
        rows = dataset.take_all()
        print("read tasks:", len(corpus.get_read_tasks(1)), "- sequences:", len(rows))
        row = min(rows, key=lambda r: (r["file"], r["row"]))
        features = np.asarray(row["features"]).reshape(-1, 3)
        print(f"file {row['file']}, key {row['key']}: features {features.shape}, label {list(row['labels.indices'])}")

        # CBF shards written by Ray, one per chunk, named by the input: the same files on any cluster size.
        dataset.write_datasink(cntkio.ray.CBFDatasink(Path(folder, "cbf"), corpus))
        shards = sorted(p.name for p in Path(folder, "cbf").glob("*.cbf"))
        print("CBF shards:", shards)
        source = MinibatchSource(CBFDeserializer(str(Path(folder, "cbf", "part-*.cbf"))), randomize=False,
                                 max_sweeps=1)  # fmt: skip
        minibatch = source.next_minibatch(1000)
        print("read back:", minibatch["features"].num_sequences, "sequences,", minibatch["features"].num_samples,
              "samples")  # fmt: skip
        source.close()
finally:
    ray.shutdown()
