"""Image batches through cntkio.torch (issue 24 point 3.3): an image deserializer's label stream comes as int64 class
ids [B] by default (what nn.CrossEntropyLoss takes), its CSR rows by name; other sparse streams keep CSR under
"auto"; and the pipeline's normalize transform gives torchvision's ToTensor + Normalize values."""

from __future__ import annotations

import base64
import functools
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
cv2 = pytest.importorskip("cv2")

from torch.utils.data import DataLoader  # noqa: E402

from cntkio import Base64ImageDeserializer, CTFDeserializer, ImageDeserializer, MinibatchSource, StreamDef, StreamDefs  # noqa: E402
from cntkio import transforms as T  # noqa: E402
from cntkio.torch import MinibatchDataset  # noqa: E402

CLASSES = 5
COUNT = 12


@pytest.fixture(scope="module")
def image_map(tmp_path_factory: pytest.TempPathFactory) -> str:
    folder = tmp_path_factory.mktemp("torch_images")
    rng = np.random.default_rng(0)
    lines, encoded = [], []
    for i in range(COUNT):
        path = folder / f"img{i}.png"
        cv2.imwrite(str(path), rng.integers(0, 256, (10, 12, 3), dtype=np.uint8))
        lines.append(f"{i}\t{path}\t{(i * 3) % CLASSES}")
        encoded.append(f"{i}\t{(i * 3) % CLASSES}\t{base64.b64encode(path.read_bytes()).decode()}")
    (folder / "map.txt").write_text("\n".join(lines) + "\n")
    (folder / "images.b64").write_text("\n".join(encoded) + "\n")
    return str(folder / "map.txt")


def make_source(map_file: str, *transforms: Any, sharded: bool = False, **options: Any) -> MinibatchSource:
    streams = StreamDefs(features=StreamDef(field="image", transforms=list(transforms) or [T.scale(8, 8, 3)]),
                         labels=StreamDef(field="label", shape=CLASSES))  # fmt: skip
    if sharded:  # (a corpus of Base64 image files: one file here)
        images: Any = Base64ImageDeserializer.sharded([str(Path(map_file).with_name("images.b64"))], streams)
    else:
        images = ImageDeserializer(map_file, streams, **options)
    return MinibatchSource(images, max_sweeps=1, randomization_seed=1)


def expected_labels(batch: Any) -> list[int]:
    return [(int(key) * 3) % CLASSES for _, key in batch.keys]


@pytest.mark.parametrize("sharded", [False, True])
def test_an_image_label_stream_comes_as_class_ids_by_default(image_map: str, sharded: bool) -> None:
    dataset = MinibatchDataset(functools.partial(make_source, image_map, sharded=sharded), 5)
    batches = list(DataLoader(dataset, batch_size=None))
    assert sum(len(b.keys) for b in batches) == COUNT
    for batch in batches:
        labels = batch["labels"]
        assert labels.dtype == torch.int64 and labels.shape == (len(batch.keys),)
        assert labels.tolist() == expected_labels(batch)
        assert batch["features"].shape == (len(batch.keys), 3, 8, 8) and batch["features"].dtype == torch.float32
    loss = torch.nn.functional.cross_entropy(torch.zeros(len(batches[0].keys), CLASSES), batches[0]["labels"])
    assert torch.isfinite(loss)


def test_the_csr_rows_stay_reachable_by_name(image_map: str) -> None:
    for layout in ({"labels": "csr"}, {"labels": "per_sequence"}):
        dataset = MinibatchDataset(functools.partial(make_source, image_map), 5, layout=layout)
        for batch in dataset:
            labels = batch["labels"]
            if layout["labels"] == "csr":
                assert labels.layout == torch.sparse_csr and labels.shape == (len(batch.keys), CLASSES)
                assert labels.col_indices().tolist() == expected_labels(batch)
            else:
                assert labels.tolist() == expected_labels(batch)


def test_other_sparse_streams_keep_csr_under_auto(tmp_path: Path) -> None:
    """Only the case the issue names changes: a CTF one-hot stream of one sample per sequence stays CSR."""
    path = tmp_path / "labels.ctf"
    path.write_text("".join(f"{i} |y {i % 3}:1\n" for i in range(6)))
    streams = StreamDefs(y=StreamDef(field="y", shape=3, is_sparse=True))
    make = functools.partial(MinibatchSource, CTFDeserializer(str(path), streams), max_sweeps=1)
    (batch,) = list(MinibatchDataset(make, 6))
    assert batch["y"].layout == torch.sparse_csr


def test_padding_batches_of_an_image_source_have_class_ids(image_map: str) -> None:
    """Equal steps "pad": a rank out of data yields empty batches, the labels an empty int64 [0]."""
    shapes = set()
    for rank in range(5):
        dataset = MinibatchDataset(functools.partial(make_source, image_map), 5, num_partitions=5,
                                   partition_index=rank, equal_steps="pad")  # fmt: skip
        for batch in dataset:
            assert batch["labels"].dtype == torch.int64 and batch["labels"].dim() == 1
            shapes.add((batch.weight, tuple(batch["labels"].shape)))
    assert (0.0, (0,)) in shapes


def test_normalised_images_are_torchvisions_tensors(image_map: str) -> None:
    """T.normalize in the pipeline (native, in the per-pixel pass) gives the float32 CHW RGB tensors of torchvision's
    ToTensor + Normalize over the decoded images, to the bit."""
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    make = functools.partial(make_source, image_map, T.normalize(mean, std), channel_order="rgb")
    seen = 0
    for batch in MinibatchDataset(make, 5):
        for (_, key), image in zip(batch.keys, batch["features"], strict=True):
            decoded = cv2.imread(str(Path(image_map).with_name(f"img{key}.png")))[:, :, ::-1]  # RGB
            tensor = torch.from_numpy(decoded.copy()).permute(2, 0, 1).contiguous().float().div(255)  # ToTensor
            tensor = tensor.sub(torch.tensor(mean).view(-1, 1, 1)).div(torch.tensor(std).view(-1, 1, 1))  # Normalize
            assert torch.equal(image, tensor)
            seen += 1
    assert seen == COUNT
