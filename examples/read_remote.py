"""Remote data: a deserializer given an fsspec URL reads the object by byte range (each chunk's bytes fetched when
the chunk is read), and a checkpoint taken on a local copy restores on the remote one.

The same calls read ``s3://bucket/corpus/part-*.ctf``, ``gs://...``, ``az://...``, ``https://...`` or ``hf://...``
once that filesystem is installed (``pip install 'cntkio[s3]'``) and configured (``cntkio.remote.configure("s3",
endpoint_url=..., key=..., secret=...)``, or fsspec's own configuration). This example uses fsspec's in-memory
filesystem, ``memory://``, so that it runs without a server. Run from the repository root:
``python examples/read_remote.py``.
"""

# requires: fsspec

from __future__ import annotations

import fsspec

from cntkio import CBFDeserializer, CTFDeserializer, MinibatchSource, StreamDef, StreamDefs, remote

streams = StreamDefs(
    features=StreamDef(field="features", shape=3), labels=StreamDef(field="label", shape=4, is_sparse=True)
)

# "Upload" a CTF file, the shards of a corpus and a CBF file.
memory = fsspec.filesystem("memory")
for name in ["sequences.ctf", "sequences.cbf", "shards/part-0.ctf", "shards/part-1.ctf", "shards/part-2.ctf"]:
    memory.put_file(f"examples/data/{name}", f"/corpus/{name}")

before = remote.fetch_stats()
corpus = CTFDeserializer("memory://corpus/shards/part-*.ctf", streams)  # a glob of objects: a sharded corpus
source = MinibatchSource(corpus, randomize=False, max_sweeps=1)
print("sequences from the shards:", source.next_minibatch(1000)["features"].num_sequences)
source.close()
print("CBF sequences:", CBFDeserializer("memory://corpus/sequences.cbf").sequence_index().num_sequences)
fetched = remote.fetch_stats()
print("requests:", fetched.requests - before.requests, "retries:", fetched.retries - before.retries)


# A checkpoint taken on the local file restores on the remote object: both are identified by their contents.
def make(path: str) -> MinibatchSource:
    return MinibatchSource(CTFDeserializer(path, streams), randomization_seed=5, max_sweeps=2)


local = make("examples/data/sequences.ctf")
local.next_minibatch(10)
state = local.get_checkpoint_state()
expected = [tuple(key for _, key in local.next_minibatch(10).sequence_keys) for _ in range(3)]
moved = make("memory://corpus/sequences.ctf")
moved.restore_from_checkpoint(state)
resumed = [tuple(key for _, key in moved.next_minibatch(10).sequence_keys) for _ in range(3)]
print("resumed on the remote copy with the same sequences:", resumed == expected)
