"""A record format of your own on RecordDeserializer: cntkio frames, indexes, chunks, randomizes and checkpoints the
records; you decode a chunk of them at once (``decode_chunk``).

examples/data/records.jsonl holds 10 JSON lines ``{"id": "r03", "tokens": [4, 9, 1], "label": 1}``. Each record is
a sequence: its ``tokens`` (one-hot, 16 ids) are the steps, its ``label`` one value; ``sequence_length`` and ``key``
give the index each record's length and key. Run from the repository root: ``python examples/record_decoder.py``.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse

from cntkio import MinibatchSource, RecordDeserializer, StreamDef, StreamDefs

VOCABULARY = 16


def decode_chunk(records: list[bytes]) -> dict[str, Any]:
    """All the records of a chunk at once: the tokens of every record stacked as CSR rows, one label per record."""
    parsed = [json.loads(record) for record in records]
    tokens = np.concatenate([np.asarray(p["tokens"], dtype=np.int64) for p in parsed])
    onehot = scipy.sparse.csr_matrix((np.ones(len(tokens), np.float32), tokens, np.arange(len(tokens) + 1)),
                                     shape=(len(tokens), VOCABULARY))  # fmt: skip
    return {"tokens": onehot, "label": np.array([p["label"] for p in parsed], dtype=np.float32)}


def json_lines(files: Any, **options: Any) -> RecordDeserializer:
    streams = StreamDefs(tokens=StreamDef(shape=VOCABULARY, is_sparse=True), label=StreamDef(shape=1))
    return RecordDeserializer(
        files, None, streams, framing="lines", decode_chunk=decode_chunk,
        sequence_length=lambda record: len(json.loads(record)["tokens"]),  # samples per record (the longest stream)
        key=lambda record: json.loads(record)["id"],  # keys for joins and provenance (default: the record number)
        **options,
    )  # fmt: skip


def main() -> None:
    source = MinibatchSource(json_lines("examples/data/records.jsonl"), randomization_seed=1, max_sweeps=1)
    while minibatch := source.next_minibatch(16):
        tokens = minibatch["tokens"]
        ids = [m.indices.tolist() for m in tokens.as_sequences()]
        print("keys", [key for _, key in minibatch.sequence_keys], "tokens", ids, "labels",
              minibatch["label"].values[:, 0].tolist())  # fmt: skip
    source.close()

    # A record the decoder fails on (here a token id out of range) is found by decoding the chunk again a record at a
    # time, named with its file, record and byte offset, and skipped and counted while max_errors allows. (An error
    # in sequence_length or key is raised when the file is indexed: a FormatError naming the record.)
    with tempfile.TemporaryDirectory() as folder:
        damaged = Path(folder) / "damaged.jsonl"
        damaged.write_text(Path("examples/data/records.jsonl").read_text().replace("[2, 12]", "[2, 99]"))
        source = MinibatchSource(json_lines(damaged, max_errors=1, trace_level=0), randomize=False, max_sweeps=1)
        lengths = []
        while minibatch := source.next_minibatch(100):
            lengths += minibatch["tokens"].sequence_lengths.tolist()
        # (in sequence mode the skipped record is still a sequence of its key, with no samples in any stream)
        print("tokens per record:", lengths)
        print(source.error_report())
        source.close()


if __name__ == "__main__":
    main()
