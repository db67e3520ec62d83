"""A data format of your own as a cntk.io-style UserDeserializer plug-in, read alone and joined with a CTF file.

The plug-in makes 12 noisy sine waves of 5 to 12 steps (3 chunks of 4 sequences), each step a dense sample of 2
values, from the chunk id alone: ``get_chunk`` must give the same data every time it is called for a chunk. Its
sequences' keys are their numbers (0-11), so it joins examples/data/labels.ctf, whose sequence ids are those
numbers. Run from the repository root: ``python examples/user_deserializer.py``.
"""

from __future__ import annotations

import numpy as np

from cntkio import CTFDeserializer, MinibatchSource, StreamDef, StreamDefs, StreamInformation, UserDeserializer


class SineWaves(UserDeserializer):
    """Sequence mode: ``get_chunk`` returns, per stream, a list with one ``(length, *shape)`` array per sequence."""

    def __init__(self, chunks: int = 3, per_chunk: int = 4):
        super().__init__()
        self.chunks, self.per_chunk = chunks, per_chunk

    def stream_infos(self) -> list[StreamInformation]:
        return [StreamInformation("wave", 0, "dense", np.float32, (2,))]

    def num_chunks(self) -> int:
        return self.chunks

    def get_chunk(self, chunk_id: int) -> dict[str, list[np.ndarray]]:
        rng = np.random.default_rng(chunk_id)  # a generator of its own, seeded by the chunk: stateless chunks
        waves = []
        for _ in range(self.per_chunk):
            t = np.arange(int(rng.integers(5, 13)), dtype=np.float32)[:, None]
            phase = rng.uniform(0, np.pi)
            waves.append(np.concatenate([np.sin(t / 2 + phase), np.cos(t / 2 + phase)], axis=1).astype(np.float32))
        return {"wave": waves}


source = MinibatchSource(SineWaves(), randomize=False, max_sweeps=1)
while minibatch := source.next_minibatch(40):  # up to 40 samples a minibatch
    wave = minibatch["wave"]
    print(
        f"{wave.num_sequences} sequences, lengths {wave.sequence_lengths.tolist()}, "
        f"keys {[key for _, key in minibatch.sequence_keys]}, values {wave.asarray().shape}"
    )
source.close()

# Plug-ins compose with every other deserializer: joined by key with a CTF file of labels (ids 5 and 9 lack one).
labels = CTFDeserializer(
    "examples/data/labels.ctf", StreamDefs(label=StreamDef(field="label", shape=4, is_sparse=True))
)
source = MinibatchSource([SineWaves(), labels], randomization_seed=4, max_sweeps=1)
keys = []
while minibatch := source.next_minibatch(30):
    keys += [key for _, key in minibatch.sequence_keys]
print("joined with labels.ctf:", sorted(keys))
print(source.join_report)
source.close()
