"""Reading a CNTK Binary Format (CBF) file, and converting CTF to CBF with write_cbf.

examples/data/sequences.cbf is examples/data/sequences.ctf written by ``cntkio.write_cbf`` (examples/make_data.py).
A CBF file carries its streams (names, dense or sparse, dimensions, precision) and its chunks, so a
CBFDeserializer needs no StreamDefs (StreamDefs rename streams: ``StreamDef(field=<name in the file>)``; streams not
named keep their own names). Sequence keys are the sequences' numbers in the file. Run from the repository root:
``python examples/read_cbf.py``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from cntkio import CBFDeserializer, CTFDeserializer, FormatError, MinibatchSource, StreamDef, StreamDefs, write_cbf

# The file's own streams: no StreamDefs needed.
cbf = CBFDeserializer("examples/data/sequences.cbf")
print("streams:", [(info.name, info.storage_format, info.shape) for info in cbf.stream_infos()])
print("chunks:", cbf.num_chunks())
source = MinibatchSource(cbf, randomize=False, max_sweeps=1)
minibatch = source.next_minibatch(1000)
print("read", minibatch["features"].num_sequences, "sequences,", minibatch["features"].num_samples, "samples")
source.close()

streams = StreamDefs(
    features=StreamDef(field="features", shape=3), labels=StreamDef(field="label", shape=4, is_sparse=True)
)
with tempfile.TemporaryDirectory() as folder:
    # Any deserializer converts: every sequence in its order, streams as declared. The file is written under a
    # temporary name and renamed when complete. chunk_size_in_bytes=None keeps the source's chunks, so the CTF file
    # and its CBF read in the same randomized order.
    target = Path(folder) / "sequences.cbf"
    write_cbf(CTFDeserializer("examples/data/sequences.ctf", streams), target, chunk_size_in_bytes=None)
    print("wrote", target.name, target.stat().st_size, "bytes")

    # The same sequences, read from both files in the same randomized order (keys differ: CTF's are the ids in the
    # file, CBF's the sequence numbers; the ids here happen to be 0, 1, 2, ...).
    from_ctf = MinibatchSource(CTFDeserializer("examples/data/sequences.ctf", streams), randomization_seed=5,
                               max_sweeps=1)  # fmt: skip
    from_cbf = MinibatchSource(CBFDeserializer(target), randomization_seed=5, max_sweeps=1)
    a, b = from_ctf.next_minibatch(1000), from_cbf.next_minibatch(1000)
    lengths = np.array_equal(a["features"].sequence_lengths, b["features"].sequence_lengths)
    print("same order:", lengths, "same values:", np.array_equal(a["features"].values, b["features"].values))
    from_ctf.close()
    from_cbf.close()

    # A damaged file is a FormatError naming the byte offset (and the chunk and sequence where they apply).
    damaged = Path(folder) / "damaged.cbf"
    damaged.write_bytes(target.read_bytes()[:-20])  # cut inside the chunk table at the end
    try:
        CBFDeserializer(damaged)
    except FormatError as error:
        print("raised:", error)
