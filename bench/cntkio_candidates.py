"""cntkio entries for the bench kit's ``anchors.py --candidate NAME=cntkio_candidates:FUNCTION:KIND``.

Each function takes the path of a kit CTF file (``gen.py`` dense or sparse) and returns NumPy arrays of
values only, so that ``anchors.py`` can check sum(|v|) and the count against the generator's .meta.json.
Imports happen when the module is loaded, outside the timed call.
"""

from __future__ import annotations

import os

import numpy as np

from cntkio import CTFDeserializer, MinibatchSource, StreamDef, StreamDefs
from cntkio._src.common.streams import Record
from cntkio._src.formats.protocol import DenseStream

MINIBATCH_SIZE = 1024


def _dense_streams() -> Record:
    return StreamDefs(features=StreamDef(field="features", shape=100), labels=StreamDef(field="labels", shape=10))


def _sparse_streams() -> Record:
    return StreamDefs(x=StreamDef(field="x", shape=100000, is_sparse=True), y=StreamDef(field="y", shape=1))


def _raw(path: str, streams: Record) -> dict[str, object]:
    """Index the file and parse it as one chunk, single-threaded: both steps are inside the timed call."""
    deserializer = CTFDeserializer(path, streams, chunk_size_in_bytes=os.path.getsize(path) + 1)
    if deserializer.num_chunks() != 1:
        raise RuntimeError(f"expected one chunk, got {deserializer.num_chunks()}")
    chunk = deserializer.get_chunk(0)
    # Sparse streams as (indices, values): anchors.py counts only the values of such a pair.
    return {
        name: data.values if isinstance(data, DenseStream) else (data.indices, data.values)
        for name, data in chunk.items()
    }


def _end_to_end(path: str, streams: Record) -> list[np.ndarray]:
    """Read one sweep in file order through MinibatchSource, taking sum(|v|) of every minibatch's values.

    Nothing is kept across minibatches: each (minibatch, stream) is returned as a zero-copy broadcast of its
    mean |v| over its value count, which carries the same sum and count for anchors.py's check.
    """
    source = MinibatchSource(CTFDeserializer(path, streams), randomize=False, max_sweeps=1)
    parts = []
    while minibatch := source.next_minibatch(MINIBATCH_SIZE):
        for data in minibatch.values():
            count = data.values.size
            if count:
                total = float(np.abs(data.values).sum(dtype=np.float64))
                parts.append(np.broadcast_to(np.float64(total / count), (count,)))
    return parts


def raw_dense(path: str) -> dict[str, object]:
    """Dense kit file (``|features`` dim 100, ``|labels`` dim 10): arrays of ``get_chunk(0)``."""
    return _raw(path, _dense_streams())


def raw_sparse(path: str) -> dict[str, object]:
    """Sparse kit file (``|x`` sparse dim 100000, ``|y`` dense dim 1): arrays of ``get_chunk(0)``."""
    return _raw(path, _sparse_streams())


def end_to_end_dense(path: str) -> list[np.ndarray]:
    """Dense kit file through ``MinibatchSource(randomize=False, max_sweeps=1)``, 1024-sample minibatches."""
    return _end_to_end(path, _dense_streams())


def end_to_end_sparse(path: str) -> list[np.ndarray]:
    """Sparse kit file through ``MinibatchSource(randomize=False, max_sweeps=1)``, 1024-sample minibatches."""
    return _end_to_end(path, _sparse_streams())
