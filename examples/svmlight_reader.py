"""An svmlight/libsvm reader on RecordDeserializer: each line is ``label index:value index:value ...``.

Indices are 1-based (libsvm's convention); comments and ``qid:`` are not handled. ``decode_chunk`` turns a
chunk's lines into the streams ``label`` (dense, 1 value) and ``features`` (sparse CSR, ``dim`` columns)
with a few NumPy calls. Run: ``python examples/svmlight_reader.py FILE DIM``; without arguments it reads
examples/data/points.svm (60 lines, 12 columns) from the repository root.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

import numpy as np
import scipy.sparse

from cntkio import MinibatchSource, RecordDeserializer, StreamDef, StreamDefs


def decode_chunk(lines: list[bytes], dim: int) -> dict[str, Any]:
    nnz = np.array([line.count(b":") for line in lines], dtype=np.int64)
    numbers = np.array(b" ".join(lines).replace(b":", b" ").split(), dtype=np.float64)
    labels = np.cumsum(1 + 2 * nnz) - (1 + 2 * nnz)  # where each line's label sits in `numbers`
    pairs = np.delete(numbers, labels)  # index, value, index, value, ...
    indptr = np.concatenate([[0], np.cumsum(nnz)])
    features = scipy.sparse.csr_matrix((pairs[1::2], pairs[::2].astype(np.int64) - 1, indptr), (len(lines), dim))
    return {"label": numbers[labels], "features": features}


def svmlight_reader(files: Any, dim: int, **options: Any) -> RecordDeserializer:
    streams = StreamDefs(features=StreamDef(shape=dim, is_sparse=True), label=StreamDef(shape=1))
    return RecordDeserializer(files, None, streams, decode_chunk=functools.partial(decode_chunk, dim=dim), **options)


if __name__ == "__main__":
    path, dim = (sys.argv[1], int(sys.argv[2])) if len(sys.argv) > 2 else ("examples/data/points.svm", 12)
    source = MinibatchSource(svmlight_reader(path, dim), randomize=False, max_sweeps=1)
    while minibatch := source.next_minibatch(256):
        print(minibatch["features"].num_samples, "samples; first labels", minibatch["label"].values[:4, 0])
