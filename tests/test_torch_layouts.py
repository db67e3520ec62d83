"""Per-stream output layouts of cntkio.torch: token ids (padded, or flat with offsets for EmbeddingBag), one sample
per sequence, padded with masks, PackedSequence and nested tensors — checked against the dense arrays of the same
minibatch, directly and through a DataLoader with worker processes."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch.nn.utils.rnn import pad_packed_sequence  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

from cntkio import CTFDeserializer, MinibatchSource, StreamDef, StreamDefs  # noqa: E402
from cntkio.torch import LAYOUTS, MinibatchDataset, stream_tensors  # noqa: E402

WORDS, INTENTS = 50, 5
STREAMS = StreamDefs(
    words=StreamDef(field="w", shape=WORDS, is_sparse=True),
    intent=StreamDef(field="i", shape=INTENTS, is_sparse=True),
    feats=StreamDef(field="f", shape=3),
)


def write_atis_like(path: Path, sequences: int = 120, seed: int = 0) -> Path:
    """ATIS's shape: a one-hot word per sample, a one-hot intent on a sequence's first line only, dense features."""
    rng = np.random.default_rng(seed)
    lines = []
    for s in range(sequences):
        for t in range(int(rng.integers(1, 9))):
            intent = f" |i {int(rng.integers(0, INTENTS))}:1" if t == 0 else ""
            lines.append(f"{s} |w {int(rng.integers(0, WORDS))}:1{intent} |f {s} {t} 0.5")
    path.write_text("\n".join(lines) + "\n")
    return path


def make_source(path: str, max_sweeps: int = 1) -> MinibatchSource:
    return MinibatchSource(
        CTFDeserializer(path, STREAMS, chunk_size_in_bytes=2000), max_sweeps=max_sweeps, randomization_seed=3
    )


@pytest.fixture(scope="module")
def path(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(write_atis_like(tmp_path_factory.mktemp("layouts") / "atis_like.ctf"))


@pytest.fixture
def minibatch(path: str) -> Any:
    source = make_source(path)
    yield source.next_minibatch(200)
    source.close()


def test_token_ids_are_the_one_hot_columns_padded_with_pad_id(minibatch: Any) -> None:
    words = minibatch["words"]
    dense = words.asarray()  # [batch, max_len, WORDS]
    ids = stream_tensors(words, "token_ids", pad_id=-7)
    assert ids.value.dtype == torch.int64 and tuple(ids.value.shape) == dense.shape[:2]
    valid = np.arange(words.max_length) < words.sequence_lengths[:, None]
    np.testing.assert_array_equal(ids.mask.numpy(), valid)
    np.testing.assert_array_equal(ids.value.numpy()[valid], dense.argmax(-1)[valid])
    assert (ids.value.numpy()[~valid] == -7).all()


def test_token_offsets_feed_an_embedding_bag(minibatch: Any) -> None:
    words = minibatch["words"]
    flat = stream_tensors(words, "token_offsets")
    np.testing.assert_array_equal(flat.value.numpy(), words.indices)
    np.testing.assert_array_equal(flat.offsets.numpy(), words.sequence_offsets[:-1])
    bag = torch.nn.EmbeddingBag(WORDS, 4, mode="sum")
    out = bag(flat.value, flat.offsets)
    expected = torch.stack([bag.weight[torch.from_numpy(ids)].sum(0) for ids in
                            np.split(words.indices.astype(np.int64), words.sequence_offsets[1:-1])])  # fmt: skip
    torch.testing.assert_close(out, expected)


def test_a_per_sequence_stream_is_one_value_per_sequence(minibatch: Any) -> None:
    intent = minibatch["intent"]
    assert (intent.sequence_lengths == 1).all()  # on the first line of each sequence only
    labels = stream_tensors(intent, "per_sequence").value
    assert labels.dtype == torch.int64 and tuple(labels.shape) == (intent.num_sequences,)
    np.testing.assert_array_equal(labels.numpy(), intent.asarray()[:, 0].argmax(-1))
    with pytest.raises(ValueError, match=r"'feats'.*one sample per sequence; sequence"):
        stream_tensors(minibatch["feats"], "per_sequence")


def test_padded_packed_and_nested_hold_the_same_samples(minibatch: Any) -> None:
    feats = minibatch["feats"]
    dense = feats.asarray()
    padded = stream_tensors(feats, "padded")
    np.testing.assert_array_equal(padded.value.numpy(), dense)
    np.testing.assert_array_equal(padded.mask.numpy().sum(1), feats.sequence_lengths)
    unpacked, lengths = pad_packed_sequence(stream_tensors(feats, "packed").value, batch_first=True)
    np.testing.assert_array_equal(unpacked.numpy(), dense)
    np.testing.assert_array_equal(lengths.numpy(), feats.sequence_lengths)
    nested = stream_tensors(feats, "nested").value
    for component, sequence in zip(nested.unbind(), feats.as_sequences(), strict=True):
        np.testing.assert_array_equal(component.numpy(), sequence)


def test_layouts_that_do_not_fit_a_stream_say_why(minibatch: Any, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="'feats' is dense: layout 'token_ids'"):
        stream_tensors(minibatch["feats"], "token_ids")
    with pytest.raises(ValueError, match="'feats' is dense: layout 'csr'"):
        stream_tensors(minibatch["feats"], "csr")
    with pytest.raises(ValueError, match="unknown layout 'ids'"):
        stream_tensors(minibatch["words"], "ids")
    two = tmp_path / "two.ctf"
    two.write_text("0 |w 1:1 2:1 |i 0:1 |f 0 0 0\n")
    source = make_source(str(two))
    with pytest.raises(ValueError, match=r"'words'.*one entry per sample.*sample 0 of this minibatch has 2"):
        stream_tensors(source.next_minibatch(10)["words"], "token_ids")
    source.close()
    with pytest.raises(ValueError, match="unknown layout"):
        MinibatchDataset(functools.partial(make_source, str(two)), 10, layout={"words": "tokens"})


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_dataloader_gives_each_stream_its_layout(path: str, num_workers: int) -> None:
    layout = {"words": "token_ids", "intent": "per_sequence", "feats": "packed"}
    dataset = MinibatchDataset(functools.partial(make_source, path), 64, layout=layout, pad_id=0)
    reference = make_source(path)
    for batch in DataLoader(dataset, batch_size=None, num_workers=num_workers):
        expected = reference.next_minibatch(64)
        assert batch.keys == expected.sequence_keys
        np.testing.assert_array_equal(batch["words"].numpy(), stream_tensors(expected["words"], "token_ids").value)
        np.testing.assert_array_equal(batch.masks["words"].numpy().sum(1), expected["words"].sequence_lengths)
        np.testing.assert_array_equal(batch["intent"].numpy(), expected["intent"].asarray()[:, 0].argmax(-1))
        unpacked, _ = pad_packed_sequence(batch["feats"], batch_first=True)
        np.testing.assert_array_equal(unpacked.numpy(), expected["feats"].asarray())
    assert not reference.next_minibatch(64)
    reference.close()


def test_every_layout_is_documented() -> None:
    assert set(LAYOUTS) == {
        "auto", "flat", "padded", "csr", "token_ids", "token_offsets", "packed", "nested", "per_sequence",
    }  # fmt: skip


def test_a_sparse_stream_declared_one_by_dim_is_a_dim_wide_csr_tensor() -> None:
    """CNTK's tests declare sparse samples (1, n): the tensor's rows are n wide (its size came from the declared
    shape: (N, 1, n), which torch refuses for CSR)."""
    import scipy.sparse

    from cntkio import StreamInformation, UserDeserializer
    from cntkio.torch import to_tensor

    class OneHot(UserDeserializer):
        def stream_infos(self) -> list[StreamInformation]:
            return [StreamInformation("y", 0, "sparse", np.float32, (1, 3))]

        def num_chunks(self) -> int:
            return 1

        def get_chunk(self, chunk_id: int) -> dict[str, Any]:
            return {"y": scipy.sparse.csr_matrix(np.eye(3, dtype=np.float32)[[0, 1, 2, 1]])}

    minibatch = MinibatchSource(OneHot(), randomize=False, max_sweeps=1).next_minibatch(4)
    tensor = to_tensor(minibatch["y"])
    assert tensor.shape == (4, 3)
    assert tensor.to_dense().argmax(dim=1).tolist() == [0, 1, 2, 1]
