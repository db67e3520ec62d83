"""Two deserializers joined by sequence key (CNTK's composite reader), and what the join reports.

The features come from examples/data/sequences.ctf (sequence ids 0-11), the labels from examples/data/labels.ctf,
which has no label for ids 5 and 9 and one for an id 12 the features lack. The first deserializer (the primary)
decides the sequences and their order; the others are looked up by key. Run from the repository root:
``python examples/composite_join.py``.
"""

from __future__ import annotations

from cntkio import CNTKIOError, CTFDeserializer, MinibatchSource, StreamDef, StreamDefs

features = CTFDeserializer("examples/data/sequences.ctf", StreamDefs(x=StreamDef(field="features", shape=3)))
labels = CTFDeserializer("examples/data/labels.ctf", StreamDefs(y=StreamDef(field="label", shape=4, is_sparse=True)))
source = MinibatchSource([features, labels], randomize=False, max_sweeps=1)
report = source.join_report  # also logged once as a warning on the "cntkio" logger
print(report)  # kept and dropped sequences, missing and duplicate keys, length mismatches
print("sequences:", report.sequences, "dropped:", report.dropped, "clean:", report.clean)
print("keys the labels lack:", report.deserializers[1].missing.keys)  # (key 12, which only the labels have, is ignored)

minibatch = source.next_minibatch(1000)
print("keys read:", [key for _, key in minibatch.sequence_keys])
print("each stream names its own file:", minibatch["x"].keys[0], minibatch["y"].keys[0])
print("x:", minibatch["x"].num_samples, "samples; y:", minibatch["y"].num_samples, "samples (one per sequence)")
source.close()

# strict=True: a key the secondary lacks (or holds twice) is an error naming the key and the file.
try:
    MinibatchSource([features, labels], strict=True)
except CNTKIOError as error:
    print("strict=True raised:", error)
