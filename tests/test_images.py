"""ImageDeserializer and Base64ImageDeserializer through MinibatchSource: output layouts against OpenCV, labels,
reproducible augmentation (threads, partitions, checkpoints, synchronised deserializers, sweeps), invalid images
counted under max_errors, clear errors, multi-view, and composites with CTF."""

from __future__ import annotations

import base64
import functools
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

cv2 = pytest.importorskip("cv2")

from cntkio import (  # noqa: E402
    Base64ImageDeserializer,
    CNTKIOError,
    CTFDeserializer,
    FormatError,
    ImageDeserializer,
    MaxErrorsExceeded,
    MinibatchSource,
    StreamDef,
    StreamDefs,
)
from cntkio import transforms as T  # noqa: E402

SIZE = 32


def make_images(folder: Path, count: int, seed: int = 0) -> list[Path]:
    """PNG images (lossless) of SIZE x SIZE with a gradient and a per-image colour."""
    rng = np.random.default_rng(seed)
    paths = []
    for i in range(count):
        image = rng.integers(0, 255, size=(SIZE, SIZE + 8, 3), dtype=np.uint8)
        image[: i % SIZE, :, 0] = i * 7 % 255
        path = folder / f"img{i}.png"
        cv2.imwrite(str(path), image)
        paths.append(path)
    return paths


def write_map(folder: Path, paths: list[Path], labels: list[int] | None = None, keys: bool = False) -> Path:
    labels = labels if labels is not None else [i % 5 for i in range(len(paths))]
    lines = [(f"{i}\t" if keys else "") + f"{p}\t{label}" for i, (p, label) in enumerate(zip(paths, labels))]
    map_file = folder / "map.txt"
    map_file.write_text("\n".join(lines) + "\n")
    return map_file


def streams(*transforms: Any, labels: int | None = 5) -> Any:
    defs = {"features": StreamDef(field="image", transforms=list(transforms))}
    if labels:
        defs["labels"] = StreamDef(field="label", shape=labels)
    return StreamDefs(**defs)


RANDOM = (
    T.crop("randomside", side_ratio=(0.5, 0.9), jitter_type="uniratio"),
    T.scale(16, 16, 3),
    T.color(0.3, 0.3, 0.3),
)


@pytest.fixture
def images(tmp_path: Path) -> Path:
    return write_map(tmp_path, make_images(tmp_path, 24))


def by_key(source: MinibatchSource, size: int = 5, **partition: Any) -> dict[Any, list[np.ndarray]]:
    """Every image read, per key, in reading order (one entry per sweep)."""
    seen: dict[Any, list[np.ndarray]] = defaultdict(list)
    while minibatch := source.next_minibatch(size, **partition):
        for (_, key), image in zip(minibatch.sequence_keys, minibatch["features"].values):
            seen[key].append(image.copy())
    return seen


# ------------------------------------------------------------------------------------------ output
@pytest.mark.parametrize(
    ("options", "convert"),
    [
        ({}, lambda img: img.transpose(2, 0, 1).astype(np.float32)),
        ({"channel_order": "rgb"}, lambda img: img[:, :, ::-1].transpose(2, 0, 1).astype(np.float32)),
        ({"layout": "hwc", "dtype": np.uint8}, lambda img: img),
        ({"precision": "double"}, lambda img: img.transpose(2, 0, 1).astype(np.float64)),
    ],
)
def test_deterministic_output_equals_opencv(images: Path, options: dict[str, Any], convert: Any) -> None:
    reader = ImageDeserializer(images, streams(T.crop("center", side_ratio=0.5), T.scale(20, 12, 3)), **options)
    minibatch = MinibatchSource(reader, randomize=False, max_sweeps=1).next_minibatch(100)
    paths = [line.split("\t")[0] for line in images.read_text().splitlines()]
    for path, got in zip(paths, minibatch["features"].values):
        decoded = cv2.imread(path, cv2.IMREAD_COLOR)
        side = round(0.5 * min(decoded.shape[:2]))
        y, x = (decoded.shape[0] - side) // 2, (decoded.shape[1] - side) // 2
        expected = convert(cv2.resize(decoded[y : y + side, x : x + side], (20, 12), interpolation=cv2.INTER_LINEAR))
        assert got.dtype == expected.dtype
        np.testing.assert_array_equal(got, expected)
    labels = minibatch["labels"].csr.toarray()
    assert labels.argmax(axis=1).tolist() == [i % 5 for i in range(24)] and (labels.sum(axis=1) == 1).all()


def test_without_a_label_stream_labels_are_not_read(tmp_path: Path) -> None:
    map_file = write_map(tmp_path, make_images(tmp_path, 3), labels=[7, 900, 3])  # fix #20: no hidden dimension
    reader = ImageDeserializer(map_file, streams(T.scale(8, 8, 3), labels=None))
    minibatch = MinibatchSource(reader, max_sweeps=1).next_minibatch(10)
    assert list(minibatch) and [info.name for info in minibatch] == ["features"]


def test_grayscale_and_images_of_the_same_size_without_a_scale(images: Path) -> None:
    reader = ImageDeserializer(images, streams(labels=None), grayscale=True)
    minibatch = MinibatchSource(reader, randomize=False, max_sweeps=1).next_minibatch(2)
    first = cv2.imread(images.read_text().split("\t")[0], cv2.IMREAD_GRAYSCALE)
    np.testing.assert_array_equal(minibatch["features"].values[0, 0], first.astype(np.float32))


# ------------------------------------------------------------------------------------------ reproducibility
def test_the_same_seed_gives_the_same_images_on_any_thread_count(images: Path) -> None:
    runs = []
    for threads, prefetch in [(0, False), (1, True), (2, True)]:
        source = MinibatchSource(
            ImageDeserializer(images, streams(*RANDOM), seed=3), max_sweeps=3, num_parse_threads=threads,
            prefetch=prefetch,
        )  # fmt: skip
        runs.append(by_key(source))
    for key in runs[0]:
        for other in runs[1:]:
            for a, b in zip(runs[0][key], other[key], strict=True):
                np.testing.assert_array_equal(a, b)
    # every sweep draws anew, another seed draws otherwise
    assert any(not np.array_equal(images_[0], images_[1]) for images_ in runs[0].values())
    other_seed = by_key(MinibatchSource(ImageDeserializer(images, streams(*RANDOM), seed=4), max_sweeps=1))
    assert any(not np.array_equal(runs[0][key][0], other_seed[key][0]) for key in other_seed)


def test_partitions_see_the_same_augmentation_as_one_reader(images: Path) -> None:
    whole = by_key(MinibatchSource(ImageDeserializer(images, streams(*RANDOM)), max_sweeps=2, randomization_seed=1))
    parts: dict[Any, list[np.ndarray]] = defaultdict(list)
    for index in range(3):
        source = MinibatchSource(ImageDeserializer(images, streams(*RANDOM)), max_sweeps=2, randomization_seed=1)
        for key, found in by_key(source, num_data_partitions=3, partition_index=index).items():
            parts[key] += found
    assert set(parts) == set(whole)
    for key, found in whole.items():
        assert sorted(a.tobytes() for a in parts[key]) == sorted(a.tobytes() for a in found)


def test_a_checkpoint_restores_the_following_augmented_minibatches(images: Path) -> None:
    def source() -> MinibatchSource:
        return MinibatchSource(ImageDeserializer(images, streams(*RANDOM)), randomization_window_in_chunks=4)

    first = source()
    for _ in range(7):  # into the second sweep
        first.next_minibatch(4)
    state = first.get_checkpoint_state()
    rest = [first.next_minibatch(4)["features"].values.copy() for _ in range(10)]
    again = source()
    again.restore_from_checkpoint(state)
    for expected in rest:
        np.testing.assert_array_equal(again.next_minibatch(4)["features"].values, expected)


def test_two_deserializers_over_the_same_images_get_the_same_crops(tmp_path: Path) -> None:
    map_file = write_map(tmp_path, make_images(tmp_path, 10), keys=True)
    crop = T.crop("randomside", side_ratio=(0.4, 0.9), jitter_type="uniratio")
    first = ImageDeserializer(map_file, StreamDefs(a=StreamDef(field="image", transforms=[crop, T.scale(12, 12, 3)])))
    second = ImageDeserializer(map_file, StreamDefs(b=StreamDef(field="image", transforms=[crop, T.scale(12, 12, 3)])))
    source = MinibatchSource([first, second], max_sweeps=2)
    while minibatch := source.next_minibatch(3):
        np.testing.assert_array_equal(minibatch["a"].values, minibatch["b"].values)


# ------------------------------------------------------------------------------------------ bad input
def test_an_undecodable_image_is_skipped_and_counted(tmp_path: Path) -> None:
    paths = make_images(tmp_path, 6)
    paths[2].write_bytes(paths[2].read_bytes()[:40])  # a truncated PNG
    (tmp_path / "text.jpg").write_text("not an image")
    paths[4] = tmp_path / "text.jpg"
    map_file = write_map(tmp_path, paths)
    with pytest.raises(FormatError, match="cannot decode") as error:
        MinibatchSource(ImageDeserializer(map_file, streams(T.scale(8, 8, 3))), randomize=False).next_minibatch(10)
    assert (error.value.file, error.value.line) == (str(map_file), 3)
    reader = ImageDeserializer(map_file, streams(T.scale(8, 8, 3)), max_errors=2)
    source = MinibatchSource(reader, randomize=False, max_sweeps=1)
    keys = [key for _, key in source.next_minibatch(100).sequence_keys]
    assert keys == [0, 1, 3, 5] and reader.errors.count == 2
    with pytest.raises(MaxErrorsExceeded):
        budget = ImageDeserializer(map_file, streams(T.scale(8, 8, 3)), max_errors=1)
        MinibatchSource(budget, randomize=False, max_sweeps=1).next_minibatch(100)


def test_undecodable_images_are_not_counted_again_after_a_restore(tmp_path: Path) -> None:
    """A restored source knows which chunks' bad images were counted (the error ledger in the state): reading them
    again (another sweep, a new process) does not count them twice, so max_errors keeps its meaning."""
    paths = make_images(tmp_path, 6)
    for bad in (1, 4):
        paths[bad].write_bytes(paths[bad].read_bytes()[:40])  # truncated PNGs
    map_file = write_map(tmp_path, paths)
    source = MinibatchSource(ImageDeserializer(map_file, streams(T.scale(8, 8, 3)), max_errors=2), max_sweeps=3)
    source.next_minibatch(6)
    state = source.get_checkpoint_state()
    assert source.error_report().by_kind == {"bad image": 2}
    restored = MinibatchSource(ImageDeserializer(map_file, streams(T.scale(8, 8, 3)), max_errors=2), max_sweeps=3)
    restored.restore_from_checkpoint(state)
    while restored.next_minibatch(4):  # two more sweeps over both bad images: within max_errors=2
        pass
    assert restored.error_report().total == 2


def test_a_missing_image_file_names_the_map_line(tmp_path: Path) -> None:
    paths = make_images(tmp_path, 3)
    paths[1].unlink()
    map_file = write_map(tmp_path, paths)
    source = MinibatchSource(ImageDeserializer(map_file, streams(T.scale(8, 8, 3))), randomize=False)
    with pytest.raises(FormatError, match=r"img1\.png") as error:
        source.next_minibatch(10)
    assert (error.value.file, error.value.line, error.value.sequence_key) == (str(map_file), 2, 1)


def test_bad_base64_is_an_invalid_sequence(tmp_path: Path) -> None:
    paths = make_images(tmp_path, 4)
    payloads = [base64.b64encode(p.read_bytes()).decode() for p in paths]
    payloads[1] = "!!!not base64!!!"
    payloads[2] = base64.b64encode(b"definitely not an image").decode()
    b64 = tmp_path / "images.b64"
    b64.write_text("".join(f"{10 + i}\t{i}\t{p}\n" for i, p in enumerate(payloads)))
    reader = Base64ImageDeserializer(b64, streams(T.scale(8, 8, 3)), max_errors=2)
    keys = [key for _, key in MinibatchSource(reader, randomize=False, max_sweeps=1).next_minibatch(10).sequence_keys]
    assert keys == [10, 13] and reader.errors.count == 2


# ------------------------------------------------------------------------------------------ multi-view, composites
def test_multiview10_gives_ten_views_of_every_image(images: Path) -> None:
    reader = ImageDeserializer(images, streams(T.crop("multiview10", side_ratio=0.5), labels=None))
    minibatch = MinibatchSource(reader, randomize=False, max_sweeps=1).next_minibatch(20)
    views = minibatch["features"].values
    assert views.shape[0] == 20 and [key for _, key in minibatch.sequence_keys] == [0] * 10 + [1] * 10
    np.testing.assert_array_equal(views[5:10], views[0:5][..., ::-1])  # views 5..9: 0..4 flipped


def test_images_join_ctf_side_data_by_key(tmp_path: Path) -> None:
    map_file = write_map(tmp_path, make_images(tmp_path, 6), keys=True)
    ctf = tmp_path / "side.ctf"
    ctf.write_text("".join(f"{i} |x {i * 10}\n" for i in reversed(range(1, 6))))  # key 0 has no side data
    side = CTFDeserializer(ctf, StreamDefs(x=StreamDef(field="x", shape=1)))
    for deserializers in ([side, ImageDeserializer(map_file, streams(T.scale(8, 8, 3)))],):
        source = MinibatchSource(deserializers, randomize=False, max_sweeps=1)
        minibatch = source.next_minibatch(100)
        keys = [key for _, key in minibatch.sequence_keys]
        assert sorted(keys) == [1, 2, 3, 4, 5]
        assert minibatch["x"].values[:, 0].tolist() == [k * 10 for k in keys]
        assert minibatch["labels"].csr.toarray().argmax(axis=1).tolist() == [k % 5 for k in keys]
    source = MinibatchSource([ImageDeserializer(map_file, streams(T.scale(8, 8, 3))), side], max_sweeps=1)
    assert source.join_report is not None and source.join_report.deserializers[1].missing.count == 1


def test_jpeg_decoding_equals_opencv_also_with_an_exif_orientation(tmp_path: Path) -> None:
    """JPEGs may be decoded by libjpeg-turbo directly (simplejpeg, when installed); the pixels must be OpenCV's,
    and a JPEG with an EXIF orientation (which OpenCV applies) must come out rotated as OpenCV rotates it."""
    image_module = pytest.importorskip("PIL.Image")
    pixels = np.random.default_rng(1).integers(0, 255, size=(24, 40, 3), dtype=np.uint8)
    picture = image_module.fromarray(pixels)
    exif = image_module.Exif()
    exif[0x0112] = 6  # orientation: rotate 90 degrees clockwise
    for name, options in (("plain", {}), ("rotated", {"exif": exif}), ("rotated-after-comment", {"exif": exif})):
        folder = tmp_path / name
        folder.mkdir()
        path = folder / f"{name}.jpg"
        picture.save(path, quality=90, **options)
        if name == "rotated-after-comment":  # 130 KB of comments before the EXIF segment (a byte search of the
            data = path.read_bytes()  # first 64 KB for the EXIF header missed it: the image came out unrotated)
            comment = b"\xff\xfe" + (65_000).to_bytes(2, "big") + bytes(64_998)
            path.write_bytes(data[:2] + comment * 2 + data[2:])
        reader = ImageDeserializer(
            write_map(folder, [path], labels=[0]), streams(labels=None), layout="hwc", dtype=np.uint8
        )
        got = MinibatchSource(reader, randomize=False).next_minibatch(1)["features"].values[0]
        expected = cv2.imread(str(path), cv2.IMREAD_COLOR)
        assert got.shape == expected.shape == ((40, 24, 3) if options else (24, 40, 3)), name
        np.testing.assert_array_equal(got, expected)


def test_a_source_of_only_undecodable_images_ends_or_says_so(tmp_path: Path) -> None:
    """A read whose images were all skipped reads on (a minibatch is never empty); a finite epoch then ends, an
    endless source raises once a whole sweep gave nothing usable (instead of looping forever)."""
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"\x89PNG broken")
    map_file = write_map(tmp_path, [bad, bad], labels=[0, 1])
    finite = MinibatchSource(ImageDeserializer(map_file, streams(T.scale(4, 4, 3)), max_errors=5), max_samples=6)
    assert finite.next_minibatch(3) == {}
    endless = MinibatchSource(ImageDeserializer(map_file, streams(T.scale(4, 4, 3)), max_errors=5))
    with pytest.raises(CNTKIOError, match="no usable sequence in a whole sweep"):
        endless.next_minibatch(3)


def augmented_source(map_file: str) -> MinibatchSource:
    """A randomized source of augmented images (top level, so that DataLoader workers can unpickle it)."""
    transforms = [T.crop("randomside", side_ratio=0.7), T.scale(8, 8, 3), T.color(0.3, 0.3, 0.3)]
    return MinibatchSource(
        ImageDeserializer(map_file, streams(*transforms), channel_order="rgb"), max_sweeps=2, randomization_seed=3
    )


@pytest.mark.filterwarnings("ignore:Sparse invariant checks are implicitly disabled:UserWarning")
def test_augmented_images_are_the_same_with_dataloader_workers(images: Path) -> None:
    """cntkio.torch over random augmentation: DataLoader workers (processes, each with its own source) give the
    batches of a single process, augmentation included, over two sweeps (each drawing anew)."""
    torch_data = pytest.importorskip("torch.utils.data")
    from cntkio.torch import MinibatchDataset

    dataset = MinibatchDataset(functools.partial(augmented_source, str(images)), 5)

    def batches(workers: int) -> list[tuple[list[Any], np.ndarray]]:
        dataset.set_epoch(0)  # (each iteration would read the next epoch)
        loader = torch_data.DataLoader(dataset, batch_size=None, num_workers=workers)
        return [([key for _, key in b.keys], b.tensors["features"].numpy().copy()) for b in loader]

    single, workers = batches(0), batches(2)
    assert len(single) == len(workers) > 8
    for (keys, pixels), (other_keys, other_pixels) in zip(single, workers):
        assert keys == other_keys
        np.testing.assert_array_equal(pixels, other_pixels)
    seen: dict[Any, list[np.ndarray]] = {}
    for keys, pixels in single:
        for key, image in zip(keys, pixels):
            seen.setdefault(key, []).append(image)
    assert sorted(len(v) for v in seen.values()) == [2] * 24  # two sweeps, every image once in each
    assert all(not np.array_equal(a, b) for a, b in seen.values())  # each sweep augments anew
