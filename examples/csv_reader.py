"""A CSV reader on RecordDeserializer: each line is ``label,x1,x2,...,xN`` of numbers (``header_lines=1``
skips a header). ``decode_chunk`` parses a chunk's lines at once into the streams ``label`` (dense, 1 value)
and ``features`` (dense, N values); a line with another number of fields is named in the error.
Run: ``python examples/csv_reader.py FILE N [HEADER_LINES]``; without arguments it reads examples/data/points.csv
(a header line, then 60 lines of a label and 4 features) from the repository root.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

import numpy as np

from cntkio import MinibatchSource, RecordDeserializer, StreamDef, StreamDefs


def decode_chunk(lines: list[bytes], dim: int) -> dict[str, Any]:
    values = np.array(b",".join(lines).split(b","), dtype=np.float64).reshape(len(lines), dim + 1)
    return {"label": values[:, 0], "features": values[:, 1:]}


def csv_reader(files: Any, dim: int, **options: Any) -> RecordDeserializer:
    streams = StreamDefs(features=StreamDef(shape=dim), label=StreamDef(shape=1))
    return RecordDeserializer(files, None, streams, decode_chunk=functools.partial(decode_chunk, dim=dim), **options)


if __name__ == "__main__":
    path, dim, header = (sys.argv[1], int(sys.argv[2]), 0) if len(sys.argv) > 2 else ("examples/data/points.csv", 4, 1)
    header = int(sys.argv[3]) if len(sys.argv) > 3 else header
    source = MinibatchSource(csv_reader(path, dim, header_lines=header), max_sweeps=1)
    while minibatch := source.next_minibatch(256):
        print(minibatch["features"].num_samples, "samples; first labels", minibatch["label"].values[:4, 0])
