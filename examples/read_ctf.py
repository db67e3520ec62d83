"""Reading a CNTK Text Format (CTF) file: streams, sequence and frame mode, the arrays of a minibatch, and errors.

Reads examples/data/sequences.ctf (12 sequences, a dense ``|features`` stream of 3 values per step and a one-hot
``|label`` on each sequence's first step), then examples/data/broken.ctf, which holds deliberate mistakes.
Run from the repository root: ``python examples/read_ctf.py``.
"""

from __future__ import annotations

from cntkio import CTFDeserializer, FormatError, MinibatchSource, StreamDef, StreamDefs

streams = StreamDefs(
    features=StreamDef(field="features", shape=3, is_sparse=False),  # field: the name after `|` in the file
    labels=StreamDef(field="label", shape=4, is_sparse=True),  # the stream's name in minibatches: `labels`
)

# Sequence mode (the default): a minibatch holds whole sequences, up to 16 samples of the longest stream.
source = MinibatchSource(CTFDeserializer("examples/data/sequences.ctf", streams), randomize=False, max_sweeps=1)
while minibatch := source.next_minibatch(16):
    features, labels = minibatch["features"], minibatch["labels"]
    print(
        f"{features.num_sequences} sequences, {features.num_samples} feature samples, "
        f"lengths {features.sequence_lengths.tolist()}, keys {[key for _, key in minibatch.sequence_keys]}"
    )
# The last minibatch, in every form a MinibatchData has:
print("padded array:", features.asarray().shape, "mask (2: start, 1: valid, 0: padding):", features.mask[0].tolist())
print("one array per sequence:", [a.shape for a in features.as_sequences()])
print("labels, one CSR matrix per sequence:", labels.as_sequences()[0].toarray().tolist())
print("class ids:", labels.indices.tolist())  # the column of each stored one-hot entry
source.close()

# Frame mode: every sample is its own sequence (randomized within the window); streams with fewer samples than
# the sequence (here the label, on the first step only) are an error unless every stream has one per step, so this
# reads the features alone.
frames = MinibatchSource(
    CTFDeserializer("examples/data/sequences.ctf", StreamDefs(features=streams["features"])),
    frame_mode=True,
    randomization_seed=3,
    max_sweeps=1,
)
minibatch = frames.next_minibatch(8)
print("frame mode:", minibatch["features"].values.shape, "(8 samples, each a sequence of one)")
frames.close()

# Errors name the file, line, column, byte offset, sequence and input. max_errors=0 (the default) raises at
# the first one; with max_errors=N bad records are skipped and counted, and error_report() lists them.
try:
    broken = MinibatchSource(CTFDeserializer("examples/data/broken.ctf", streams), randomize=False, max_sweeps=1)
    broken.next_minibatch(100)
except FormatError as error:
    print("raised:", type(error).__name__, "at", error.location)
tolerant = MinibatchSource(
    CTFDeserializer("examples/data/broken.ctf", streams, max_errors=10, trace_level=0), randomize=False, max_sweeps=1
)
while minibatch := tolerant.next_minibatch(100):
    print("read despite the errors:", [key for _, key in minibatch.sequence_keys])
report = tolerant.error_report()
print(report)
