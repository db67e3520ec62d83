"""The Deserializer protocol is the plug-in API: a format in a few lines reads through MinibatchSource."""

from __future__ import annotations

import numpy as np

from cntkio import ChunkIndex, DenseStream, Deserializer, MinibatchSource, StreamInformation


class Squares(Deserializer):
    """Chunk c holds sequences k = 3c, 3c+1, 3c+2; sequence k has k % 4 + 1 samples [k, step, step**2]."""

    def __init__(self, chunks: int):
        self.chunks = chunks
        self.info = StreamInformation("x", 0, "dense", np.dtype(np.float32), (3,))

    def stream_infos(self) -> list[StreamInformation]:
        return [self.info]

    def num_chunks(self) -> int:
        return self.chunks

    def chunk_index(self, chunk_id: int) -> ChunkIndex:
        keys = np.arange(3 * chunk_id, 3 * chunk_id + 3)
        return ChunkIndex(chunk_id, keys, keys % 4 + 1)

    def get_chunk(self, chunk_id: int) -> dict[str, DenseStream]:
        index = self.chunk_index(chunk_id)
        rows = [[k, step, step**2] for k, n in zip(index.keys, index.lengths) for step in range(n)]
        offsets = np.concatenate([[0], np.cumsum(index.lengths)])
        return {"x": DenseStream(np.array(rows, dtype=np.float32), offsets)}


def test_a_plugin_reads_in_file_order():
    source = MinibatchSource(Squares(4), randomize=False, max_sweeps=1)
    sequences = []
    while minibatch := source.next_minibatch(5):
        assert [key for _, key in minibatch.sequence_keys] == [int(s[0, 0]) for s in minibatch["x"].as_sequences()]
        sequences += minibatch["x"].as_sequences()
    assert [int(s[0, 0]) for s in sequences] == list(range(12))
    assert all(
        len(s) == k % 4 + 1 and s[:, 2].tolist() == [j * j for j in range(len(s))] for k, s in enumerate(sequences)
    )


def test_a_plugin_is_randomized_and_partitioned():
    keys = []
    for index in range(2):
        source = MinibatchSource(Squares(6), max_sweeps=1, randomization_window_in_chunks=2, randomization_seed=3)
        while minibatch := source.next_minibatch(4, num_data_partitions=2, partition_index=index):
            keys += [key for _, key in minibatch.sequence_keys]
    assert sorted(keys) == list(range(18)) and keys != sorted(keys)
