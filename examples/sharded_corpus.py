"""A sharded corpus: several files of one format read as one corpus (a glob pattern or a list of files).

examples/data/shards/part-0.ctf, part-1.ctf and part-2.ctf hold the 12 sequences of examples/data/sequences.ctf,
4 each. A pattern's files are read in path order (a list in its own order), one after the other: chunks of every
file are randomized together, and data slices, partitions and checkpoints span the corpus. Run from the repository
root: ``python examples/sharded_corpus.py``.
"""

from __future__ import annotations

from collections import Counter

from cntkio import CTFDeserializer, MinibatchSource, StreamDef, StreamDefs

streams = StreamDefs(
    features=StreamDef(field="features", shape=3), labels=StreamDef(field="label", shape=4, is_sparse=True)
)

# A pattern (CTFDeserializer.sharded(...) says it explicitly; CBF and Base64 image files shard the same way).
corpus = CTFDeserializer.sharded("examples/data/shards/part-*.ctf", streams)
source = MinibatchSource(corpus, randomize=False, max_sweeps=1)
minibatch = source.next_minibatch(1000)
print("sequences:", minibatch["features"].num_sequences)
print("per shard:", dict(Counter(file for file, _ in minibatch.sequence_keys)))  # provenance names each shard
source.close()

# Randomized across the shards; two partitions (ranks) split every sweep, each sequence read once.
for rank in range(2):
    source = MinibatchSource(CTFDeserializer("examples/data/shards/part-*.ctf", streams), randomization_seed=3,
                             max_sweeps=1)  # fmt: skip
    keys = []
    while minibatch := source.next_minibatch(8, num_data_partitions=2, partition_index=rank):
        keys += [(file.rsplit("/", 1)[-1], key) for file, key in minibatch.sequence_keys]
    print(f"rank {rank} reads:", keys)
    source.close()

# A data slice of the corpus: the same 25 % of the sequences on every run.
source = MinibatchSource(CTFDeserializer("examples/data/shards/part-*.ctf", streams), data_slice="[0%:25%]",
                         randomize=False, max_sweeps=1)  # fmt: skip
print("slice [0%:25%]:", [key for _, key in source.next_minibatch(1000).sequence_keys])
source.close()
