"""Checkpoints: get_checkpoint_state() after some minibatches, restore_from_checkpoint() in a new source, and the
same minibatches follow — across sweeps, with randomization.

A state is a small JSON-compatible dict. It identifies the data by content (not by path or time), so it restores on
a copy of the files elsewhere; a state taken on other data, or with another configuration that shapes the order, is
a ValueError naming what differs. Run from the repository root: ``python examples/checkpoint_resume.py``.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from cntkio import CTFDeserializer, MinibatchSource, StreamDef, StreamDefs

streams = StreamDefs(
    features=StreamDef(field="features", shape=3), labels=StreamDef(field="label", shape=4, is_sparse=True)
)


def make_source(**options: object) -> MinibatchSource:
    # small chunks, so the window shuffles chunks as it would in a large file
    deserializer = CTFDeserializer("examples/data/sequences.ctf", streams, chunk_size_in_bytes=256)
    return MinibatchSource(deserializer, randomization_window_in_chunks=3, randomization_seed=11, max_sweeps=3,
                           **options)  # fmt: skip


def keys(minibatch: Any) -> list[Any]:
    return [key for _, key in minibatch.sequence_keys]


# A run that is "killed" after 5 minibatches: its state is saved (as JSON, here a string).
first = make_source()
for _ in range(5):
    first.next_minibatch(10)
saved = json.dumps(first.get_checkpoint_state())
print(f"state after 5 minibatches: {len(saved)} bytes of JSON")
expected = []
while minibatch := first.next_minibatch(10):  # what the first run would have read next
    expected.append((keys(minibatch), minibatch["features"].values.copy()))
first.close()

# A new process: the same configuration, then the state.
resumed = make_source()
resumed.restore_from_checkpoint(json.loads(saved))
got = []
while minibatch := resumed.next_minibatch(10):
    got.append((keys(minibatch), minibatch["features"].values.copy()))
resumed.close()
print("minibatches after the restore:", len(got), "- first keys:", got[0][0])
print("the same minibatches:", len(got) == len(expected)
      and all(a[0] == b[0] and np.array_equal(a[1], b[1]) for a, b in zip(got, expected)))  # fmt: skip

# A state from another configuration that changes the order is refused, naming the option.
try:
    MinibatchSource(CTFDeserializer("examples/data/sequences.ctf", streams, chunk_size_in_bytes=256),
                    randomization_window_in_chunks=3, randomization_seed=12,
                    max_sweeps=3).restore_from_checkpoint(json.loads(saved))  # fmt: skip
except ValueError as error:
    print("refused:", error)
