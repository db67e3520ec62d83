"""CNTK 2.0's fluent image reader through ``cntkio.io``: ``ImageDeserializer(map_file)`` then ``map_features``,
``map_labels`` or ``ignore_labels`` with the ``ImageDeserializer.crop/scale/mean`` helpers, alone and joined with CTF
side data in a ``ReaderConfig`` (the shape of CNTK's Fast R-CNN sample)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

cv2 = pytest.importorskip("cv2")

import cntkio.io as C  # noqa: E402
import cntkio.io.transforms as xforms  # noqa: E402
from cntkio import ConfigError  # noqa: E402
from cntkio._src.compat.legacy import ImageStreamMapping  # noqa: E402

COUNT, CLASSES = 3, 4


class Node:
    """Stands for a CNTK input variable: only its ``name`` is used."""

    def __init__(self, name: str):
        self.name = name


@pytest.fixture
def map_file(tmp_path: Path) -> str:
    """Three lossless 40x32 images with labels 0, 1, 2 (keys: line numbers)."""
    rng = np.random.default_rng(5)
    lines = []
    for i in range(COUNT):
        path = tmp_path / f"img{i}.png"
        cv2.imwrite(str(path), rng.integers(0, 255, size=(32, 40, 3), dtype=np.uint8))
        lines.append(f"{path}\t{i}")
    (tmp_path / "map.txt").write_text("\n".join(lines) + "\n")
    return str(tmp_path / "map.txt")


def read_all(deserializer: object) -> dict[str, np.ndarray]:
    source = C.MinibatchSource(deserializer, randomize=False, max_sweeps=1)
    return {info.name: np.asarray(data.data) for info, data in source.next_minibatch(COUNT).items()}


def test_map_features_and_labels_read_what_stream_defs_read(map_file: str) -> None:
    images = C.ImageDeserializer(map_file)
    assert isinstance(images, ImageStreamMapping)
    with pytest.warns(DeprecationWarning):
        steps = [C.ImageDeserializer.crop(crop_type="center", ratio=0.5), C.ImageDeserializer.scale(16, 8, 3)]
        images.map_features(Node("features"), steps).map_labels("labels", num_classes=CLASSES)
    fluent = read_all(images)
    modern = read_all(
        C.ImageDeserializer(
            map_file,
            C.StreamDefs(
                features=C.StreamDef(
                    field="image", transforms=[xforms.crop("center", side_ratio=0.5), xforms.scale(16, 8, 3)]
                ),
                labels=C.StreamDef(field="label", shape=CLASSES),
            ),
        )
    )
    assert fluent["features"].shape == (COUNT, 1, 3, 8, 16)
    assert np.array_equal(fluent["features"], modern["features"])
    assert fluent["labels"][:, 0].tolist() == np.eye(CLASSES)[:COUNT].tolist()


def test_ignore_labels_gives_only_the_image_stream(map_file: str) -> None:
    with pytest.warns(DeprecationWarning):
        images = C.ImageDeserializer(map_file).map_labels("labels", CLASSES).ignore_labels()
        images.map_features("features", C.ImageDeserializer.scale(width=8, height=8, channels=3))
    assert list(read_all(images)) == ["features"]


def test_streams_are_final_once_used_and_an_image_stream_is_needed(map_file: str) -> None:
    with pytest.raises(ConfigError, match="no stream was mapped; call map_features"):
        C.MinibatchSource(C.ImageDeserializer(map_file))
    with pytest.warns(DeprecationWarning):
        images = C.ImageDeserializer(map_file).map_features("features", None)
    C.MinibatchSource(images)
    with pytest.raises(ConfigError, match="after a MinibatchSource used"):
        images.map_labels("labels", CLASSES)
    with pytest.warns(DeprecationWarning):
        clash = C.ImageDeserializer(map_file).map_features("x", None).map_labels("x", CLASSES)
    with pytest.raises(ConfigError, match="both named 'x'"):
        C.MinibatchSource(clash)


def test_reader_config_of_images_and_ctf_regions(tmp_path: Path, map_file: str) -> None:
    rois = tmp_path / "rois.txt"
    rois.write_text("".join(f"{i} |rois {i} {i + 1} {i + 2} {i + 3}\n" for i in range(COUNT)))
    with pytest.warns(DeprecationWarning):
        image_source = C.ImageDeserializer(map_file)
        image_source.ignore_labels()
        image_source.map_features(
            "features",
            [C.ImageDeserializer.scale(width=20, height=20, channels=3, scaleMode="pad", padValue=114)],
        )
        roi_source = C.CTFDeserializer(str(rois))
        roi_source.map_input("rois", dim=4, format="dense")
        source = C.ReaderConfig([image_source, roi_source], epoch_size=C.FULL_DATA_SWEEP, randomize=False)
    mb = source.minibatch_source().next_minibatch(COUNT)
    assert mb["features"].data.shape == (COUNT, 1, 3, 20, 20)
    padded = np.asarray(mb["features"].data)[:, 0, :, :2, :]  # 40x32 fits 20x16: two padded rows at the top
    assert (padded == 114).all()
    assert mb["rois"].data.asarray()[:, 0].tolist() == [[i, i + 1, i + 2, i + 3] for i in range(COUNT)]
