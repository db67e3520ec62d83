"""The index cache: a CTF file's index kept in a file and loaded on the next open instead of scanning the data.

Opening a CTF file scans it once to find its sequences (the index). With ``cache_index=True`` that index is written
to ``<data file>.<options digest>.cntkio-index`` beside the file (or into ``index_cache_dir=``, for data in a
read-only place) and loaded by the next open while the data file is unchanged; a stale or damaged cache is rebuilt
with a warning. The example writes a CTF file of 200,000 sequences into a temporary folder. Run from the repository
root: ``python examples/index_cache.py``.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

from cntkio import CTFDeserializer, MinibatchSource, StreamDef, StreamDefs

logging.basicConfig(stream=sys.stdout, format="  log: %(message)s")  # shows the stale cache's warning
streams = StreamDefs(x=StreamDef(field="x", shape=2))

with tempfile.TemporaryDirectory() as folder:
    data = Path(folder) / "big.ctf"
    ids = np.arange(200_000)
    data.write_text("".join(f"{i} |x {i % 7} {i % 11}\n" for i in ids.tolist()))
    print(f"{data.name}: {data.stat().st_size / 1e6:.1f} MB")

    first = CTFDeserializer(data, streams, cache_index=True)  # scans the file, then writes the cache
    print(f"first open (scan + write the cache): {first.index_seconds * 1000:.1f} ms")
    print("cache files:", [p.name for p in Path(folder).glob("*.cntkio-index")])
    second = CTFDeserializer(data, streams, cache_index=True)  # loads the cache
    print(f"second open (from the cache): {second.index_seconds * 1000:.1f} ms")

    # The cache is only used for the same file with the same index options: the same minibatches either way.
    a = MinibatchSource(first, randomization_seed=2, max_sweeps=1).next_minibatch(5)
    b = MinibatchSource(second, randomization_seed=2, max_sweeps=1).next_minibatch(5)
    print("same minibatches:", a.sequence_keys == b.sequence_keys)

    # Data in a read-only place: keep the caches elsewhere (named after the data file's absolute path).
    caches = Path(folder) / "index-caches"
    caches.mkdir()
    CTFDeserializer(data, streams, cache_index=True, index_cache_dir=caches)
    print("in index_cache_dir:", len(list(caches.iterdir())), "file")

    # A changed data file makes its cache stale: the next open scans again (with a warning) and rewrites it.
    with data.open("a") as file:
        file.write("200000 |x 1 2\n")
    os.utime(data)
    third = CTFDeserializer(data, streams, cache_index=True)
    print(f"after a change (scan + rewrite): {third.index_seconds * 1000:.1f} ms")
