"""Image transforms (cntkio.transforms) and the image pipeline (spec image.md §3-§4).

Deterministic transforms are compared with an independent OpenCV/numpy computation; random ones are checked for
determinism (the same RandomDraws give the same image) and for their distributions over many draws.
"""

from __future__ import annotations

import hashlib
import logging
import math
import pickle
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from cntkio import ConfigError
from cntkio import transforms as T
from cntkio._src.formats.image_pipeline import ImagePipeline, RandomDraws, crop_window, key_hash

cv2 = pytest.importorskip("cv2")

DATA = Path("/work/shared/conformance/cntk/Data")
INTENSITY_FILE = DATA / "ImageNet1K_intensity.xml"


def random_image(rows: int, cols: int, channels: int = 3, seed: int = 0) -> np.ndarray:
    image = np.random.default_rng(seed).integers(0, 256, (rows, cols, channels), dtype=np.uint8)
    return image[:, :, 0].copy() if channels == 1 else image


def coordinate_image(rows: int, cols: int) -> np.ndarray:
    """Channel 0 holds the column, channel 1 the row, channel 2 a constant: crops and flips can be read back."""
    image = np.zeros((rows, cols, 3), dtype=np.uint8)
    image[:, :, 0] = np.arange(cols, dtype=np.uint8)[None, :]
    image[:, :, 1] = np.arange(rows, dtype=np.uint8)[:, None]
    image[:, :, 2] = 7
    return image


def chw(image: np.ndarray, dtype=np.float32) -> np.ndarray:
    """The expected pipeline output (CHW, BGR) of an HWC or HW image."""
    if image.ndim == 2:
        image = image[:, :, None]
    return np.ascontiguousarray(image.transpose(2, 0, 1)).astype(dtype)


def read_window(output: np.ndarray) -> tuple[int, int, int, int, bool]:
    """(x, y, width, height, flipped) of a crop of a coordinate image, from the CHW output."""
    _, height, width = output.shape
    first, last = int(output[0, 0, 0]), int(output[0, 0, -1])
    flipped = width > 1 and first > last
    return min(first, last), int(output[1, 0, 0]), width, height, flipped


def draws(*values: int) -> RandomDraws:
    return RandomDraws(tuple(values))


def write_storage(path: Path, **nodes: object) -> Path:
    storage = cv2.FileStorage(str(path), cv2.FILE_STORAGE_WRITE)
    for name, value in nodes.items():
        storage.write(name, value)
    storage.release()
    return path


# --- validation ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"crop_type": "corner"}, "crop_type"),
        ({"crop_type": 3}, "crop_type"),
        ({"crop_size": -1}, "crop_size"),
        ({"crop_size": (224, -1)}, "crop_size"),
        ({"crop_size": 22.5}, "crop_size"),
        ({"crop_size": (1, 2, 3)}, "crop_size"),
        ({"crop_size": True}, "crop_size"),
        ({"side_ratio": 1.5}, "side_ratio"),
        ({"side_ratio": -0.1}, "side_ratio"),
        ({"side_ratio": (0.8, 0.5)}, "side_ratio"),
        ({"side_ratio": (0.0, 0.5)}, "side_ratio"),
        ({"side_ratio": float("nan")}, "side_ratio"),
        ({"side_ratio": "0.5"}, "side_ratio"),
        ({"area_ratio": 1.01}, "area_ratio"),
        ({"area_ratio": (0.9, 0.1)}, "area_ratio"),
        ({"side_ratio": 0.5, "area_ratio": 0.5}, "both"),
        ({"aspect_ratio": 0}, "aspect_ratio"),
        ({"aspect_ratio": -1.0}, "aspect_ratio"),
        ({"aspect_ratio": (2.0, 1.0)}, "aspect_ratio"),
        ({"jitter_type": "uniform"}, "jitter_type"),
        ({"crop_type": "multiview10", "hflip": True}, "hflip"),
        ({"hflip": "yes"}, "hflip"),
        ({"seed": "1"}, "seed"),
    ],
)
def test_crop_validation(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        T.crop(**kwargs)


def test_crop_normalises_parameters():
    crop = T.crop("RandomSide", 224, side_ratio=(0.5, 1), aspect_ratio=(0.75, 4 / 3), jitter_type="UniRatio")
    assert crop.crop_type == "randomside"
    assert crop.crop_size == (224, 224)
    assert crop.side_ratio == (0.5, 1.0)
    assert crop.area_ratio == (0.0, 0.0)
    assert crop.aspect_ratio == (0.75, 4 / 3)
    assert crop.jitter_type == "uniratio"
    assert crop.hflip is True  # the default of the random crop types
    assert T.crop("randomarea").hflip is True
    assert T.crop("center").hflip is False
    assert T.crop("MultiView10").hflip is False
    assert T.crop("center", hflip=True).hflip is True
    assert T.crop(crop_size=(30, 20)).crop_size == (30, 20)
    assert T.crop(aspect_ratio=2.5).aspect_ratio == (2.5, 2.5)  # > 1 allowed
    assert T.crop(side_ratio=(0, 0)).side_ratio == (0.0, 0.0)  # unset


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((0, 10), {}, "width"),
        ((10, 0), {}, "width"),
        ((10, 10, 0), {}, "channels"),
        ((-10, -10), {}, "width"),
        (("10", 10), {}, "width"),
        ((10, 10), {"interpolations": "bilinear"}, "interpolations"),
        ((10, 10), {"interpolations": None}, "interpolations"),
        ((10, 10), {"scale_mode": "Fill"}, "scale_mode"),
        ((10, 10), {"scale_mode": "stretch"}, "scale_mode"),
        ((10, 10), {"pad_value": -2}, "pad_value"),
        ((10, 10), {"pad_value": -0.5}, "pad_value"),
        ((10, 10), {"pad_value": "0"}, "pad_value"),
        ((10, 10), {"pad_value": float("inf")}, "pad_value"),
    ],
)
def test_scale_validation(args, kwargs, message):
    with pytest.raises(ConfigError, match=message):
        T.scale(*args, **kwargs)


def test_scale_accepts():
    assert T.scale(4, 5).interpolations == "linear"
    for name in ("NEAREST", "Linear", "cubic", "LanczoS"):
        assert T.scale(4, 5, 3, name).interpolations == name.lower()
    assert T.scale(4, 5, 1, scale_mode="pad", pad_value=0).pad_value == 0
    assert T.scale(4, 5, 1, scale_mode="pad", pad_value=300).pad_value == 300
    assert T.scale(4, 5, 1, scale_mode="crop").scale_mode == "crop"


@pytest.mark.parametrize("name", ["brightness_radius", "contrast_radius", "saturation_radius"])
@pytest.mark.parametrize("value", [-0.1, 1.5, float("nan"), "0.5"])
def test_color_validation(name, value):
    with pytest.raises(ConfigError, match=name):
        T.color(**{name: value})


def test_color_accepts_bounds():
    color = T.color(0, 1, 0.5, seed=3)
    assert (color.brightness_radius, color.contrast_radius, color.saturation_radius, color.seed) == (0, 1, 0.5, 3)
    assert not T.color().is_random
    assert T.color(0.1).is_random


def test_mean_file_errors(tmp_path):
    with pytest.raises(ConfigError, match=r"missing\.xml"):
        T.mean(str(tmp_path / "missing.xml"))
    garbage = tmp_path / "garbage.xml"
    garbage.write_text("this is not an OpenCV file <<<")
    with pytest.raises(ConfigError, match=r"garbage\.xml"):
        T.mean(str(garbage))
    no_matrix = write_storage(tmp_path / "nomatrix.xml", Channel=3, Row=2, Col=2)
    with pytest.raises(ConfigError, match="MeanImg"):
        T.mean(str(no_matrix))
    no_rows = write_storage(tmp_path / "norows.xml", MeanImg=np.zeros((1, 12), np.float32), Channel=3, Col=2)
    with pytest.raises(ConfigError, match="Row"):
        T.mean(str(no_rows))
    wrong = write_storage(tmp_path / "wrong.yml", MeanImg=np.zeros((1, 12), np.float32), Channel=3, Row=2, Col=3)
    with pytest.raises(ConfigError, match=r"wrong\.yml.*Channel\*Row\*Col"):
        T.mean(str(wrong))


def test_mean_empty_filename_is_a_no_op():
    assert T.mean("").image is None
    image = random_image(5, 6)
    np.testing.assert_array_equal(ImagePipeline([T.mean("")]).run(image), chw(image))


def test_intensity_validation(tmp_path):
    with pytest.raises(ConfigError, match="intensity_stddev"):
        T.intensity(-1.0)
    with pytest.raises(ConfigError, match="intensity_stddev"):
        T.intensity("big")
    with pytest.raises(ConfigError, match=r"missing\.xml"):
        T.intensity(0.1, str(tmp_path / "missing.xml"))
    bad = write_storage(tmp_path / "bad.xml", EigVal=np.ones((1, 2), np.float32), EigVec=np.eye(3, dtype=np.float32))
    with pytest.raises(ConfigError, match="EigVal"):
        T.intensity(0.1, str(bad))


def test_intensity_no_ops(tmp_path):
    only_values = write_storage(tmp_path / "values.xml", EigVal=np.ones((1, 3), np.float32))
    image = random_image(5, 6)
    for transform in (
        T.intensity(),
        T.intensity(0.5),
        T.intensity(0, str(INTENSITY_FILE)),
        T.intensity(0.5, str(only_values)),
    ):
        assert not transform.is_random
        np.testing.assert_array_equal(ImagePipeline([transform]).run(image, draws(1, 2, 3)), chw(image))
    loaded = T.intensity(0.1, str(INTENSITY_FILE))
    assert loaded.is_random
    np.testing.assert_allclose(loaded.eigval, [0.2175, 0.0188, 0.0045], rtol=1e-6)
    assert loaded.eigvec.shape == (3, 3)


def test_pipeline_validation():
    with pytest.raises(ConfigError, match="layout"):
        ImagePipeline([], layout="CHW")
    with pytest.raises(ConfigError, match="channel_order"):
        ImagePipeline([], channel_order="RGB")
    with pytest.raises(ConfigError, match="dtype"):
        ImagePipeline([], dtype=np.int32)
    with pytest.raises(ConfigError, match="dtype"):
        ImagePipeline([], dtype="not a dtype")
    with pytest.raises(ConfigError, match="channels"):
        ImagePipeline([T.scale(4, 4, 3)], grayscale=True)
    with pytest.raises(ConfigError, match="channels"):
        ImagePipeline([T.scale(4, 4, 1)])
    with pytest.raises(ConfigError, match="transform"):
        ImagePipeline([{"type": "Crop"}])  # type: ignore[list-item]


def test_run_rejects_bad_input():
    pipeline = ImagePipeline([])
    with pytest.raises(ValueError, match="3-channel"):
        pipeline.run(random_image(4, 4, 1))
    with pytest.raises(ValueError, match="grayscale"):
        ImagePipeline([], grayscale=True).run(random_image(4, 4))
    with pytest.raises(ValueError, match="uint8"):
        pipeline.run(random_image(4, 4).astype(np.int16))
    with pytest.raises(ValueError, match="out"):
        pipeline.run(random_image(4, 4), out=np.empty((3, 4, 5), np.float32))
    with pytest.raises(ValueError, match="out"):
        pipeline.run(random_image(4, 4), out=np.empty((3, 4, 4), np.float64))


# --- deterministic transforms against OpenCV -------------------------------------------------------------------


def test_center_crop_side_and_area_ratio():
    image = random_image(40, 60)
    output = ImagePipeline([T.crop("center", side_ratio=0.5)]).run(image)
    np.testing.assert_array_equal(output, chw(image[10:30, 20:40]))  # s = round(0.5 * 40) = 20
    output = ImagePipeline([T.crop("center", area_ratio=0.25)]).run(image)
    s = round(math.sqrt(40 * 60 * 0.25))  # 24
    np.testing.assert_array_equal(output, chw(image[8:32, 18:42]))
    assert s == 24
    output = ImagePipeline([T.crop("center", side_ratio=0.45)]).run(image)  # 18: rounds half up
    np.testing.assert_array_equal(output, chw(image[11:29, 21:39]))
    # neither ratio nor size: the whole image
    np.testing.assert_array_equal(ImagePipeline([T.crop("center")]).run(image), chw(image))
    # randomside without a ratio or size does not fail: the whole image (at offset 0, maybe flipped)
    whole = ImagePipeline([T.crop("randomside", hflip=False)]).run(image, draws(1))
    np.testing.assert_array_equal(whole, chw(image))


def test_fixed_crop_size():
    image = random_image(40, 60)
    output = ImagePipeline([T.crop(crop_size=(30, 20), side_ratio=0.1)]).run(image)  # the ratio is ignored
    np.testing.assert_array_equal(output, chw(image[10:30, 15:45]))
    output = ImagePipeline([T.crop(crop_size=25)]).run(image)
    np.testing.assert_array_equal(output, chw(image[7:32, 17:42]))
    output = ImagePipeline([T.crop(crop_size=(100, 30))]).run(image)  # wider than the image: clipped
    np.testing.assert_array_equal(output, chw(image[5:35, :]))
    # one zero: not fixed, so the ratio decides
    output = ImagePipeline([T.crop(crop_size=(30, 0), side_ratio=0.5)]).run(image)
    np.testing.assert_array_equal(output, chw(image[10:30, 20:40]))


def test_center_crop_aspect_ratio_and_fallback():
    image = coordinate_image(40, 60)
    widths = set()
    for key in range(50):
        output = ImagePipeline([T.crop("center", side_ratio=0.5, aspect_ratio=2.0)]).run(image, draws(0, 0, key))
        x, y, width, height, flipped = read_window(output)
        assert not flipped
        assert {width, height} == {28, 14}  # area 400: floor(sqrt(800)), floor(sqrt(200))
        assert (x, y) == ((60 - width) // 2, (40 - height) // 2)
        widths.add(width)
    assert widths == {28, 14}  # both orientations, each with probability 1/2
    # a square image with an aspect ratio of 4 never fits: after 10 attempts, the whole image
    square = coordinate_image(30, 30)
    output = ImagePipeline([T.crop("center", aspect_ratio=4.0)]).run(square, draws(5))
    assert read_window(output)[2:4] == (30, 30)


@pytest.mark.parametrize("interpolation", ["nearest", "linear", "cubic", "lanczos"])
def test_scale_fill(interpolation):
    flags = {"nearest": cv2.INTER_NEAREST, "linear": cv2.INTER_LINEAR, "cubic": cv2.INTER_CUBIC}
    flags["lanczos"] = cv2.INTER_LANCZOS4
    image = random_image(37, 53)
    output = ImagePipeline([T.scale(20, 30, 3, interpolation.upper())]).run(image)
    expected = cv2.resize(image, (20, 30), interpolation=flags[interpolation])
    np.testing.assert_array_equal(output, chw(expected))
    assert output.shape == (3, 30, 20)


def test_scale_crop_mode():
    landscape = random_image(40, 60)  # shorter side = rows: height := 20, width := round(60 * 20 / 40) = 30
    output = ImagePipeline([T.scale(20, 20, scale_mode="crop")]).run(landscape)
    np.testing.assert_array_equal(output, chw(cv2.resize(landscape, (30, 20))[:, 5:25]))
    portrait = random_image(50, 30)  # width < height: width := 12, height := round(50 * 12 / 30) = 20
    output = ImagePipeline([T.scale(12, 12, scale_mode="crop", interpolations="cubic")]).run(portrait)
    expected = cv2.resize(portrait, (12, 20), interpolation=cv2.INTER_CUBIC)[4:16]
    np.testing.assert_array_equal(output, chw(expected))


@pytest.mark.parametrize("pad_value", [-1, 0, 200])
def test_scale_pad_mode(pad_value):
    image = random_image(40, 60)  # longer side = cols: width := 20, height := round(40 * 20 / 60) = 13
    output = ImagePipeline([T.scale(20, 20, scale_mode="pad", pad_value=pad_value)]).run(image)
    resized = cv2.resize(image, (20, 13))
    if pad_value == -1:
        expected = cv2.copyMakeBorder(resized, 3, 4, 0, 0, cv2.BORDER_REPLICATE)
        np.testing.assert_array_equal(expected[0], resized[0])  # replicated, not constant
    else:
        expected = cv2.copyMakeBorder(resized, 3, 4, 0, 0, cv2.BORDER_CONSTANT, value=(pad_value,) * 3)
        assert (expected[:3] == pad_value).all()
    np.testing.assert_array_equal(output, chw(expected))
    portrait = random_image(60, 30)  # height := 20, width := 10: pad left 5, right 5
    output = ImagePipeline([T.scale(20, 20, scale_mode="pad", pad_value=pad_value)]).run(portrait)
    resized = cv2.resize(portrait, (10, 20))
    if pad_value == -1:
        expected = cv2.copyMakeBorder(resized, 0, 0, 5, 5, cv2.BORDER_REPLICATE)
    else:
        expected = cv2.copyMakeBorder(resized, 0, 0, 5, 5, cv2.BORDER_CONSTANT, value=(pad_value,) * 3)
    np.testing.assert_array_equal(output, chw(expected))


def test_scale_to_the_same_size_and_non_square_targets():
    image = random_image(24, 24)
    np.testing.assert_array_equal(ImagePipeline([T.scale(24, 24)]).run(image), chw(image))
    # crop mode where matching the shorter side would not cover a non-square target: covers it
    output = ImagePipeline([T.scale(10, 30, scale_mode="crop")]).run(random_image(20, 20))
    assert output.shape == (3, 30, 10)
    output = ImagePipeline([T.scale(30, 10, scale_mode="pad")]).run(random_image(20, 20))
    assert output.shape == (3, 10, 30)


def test_mean_subtraction(tmp_path, caplog):
    image = random_image(6, 5)
    mean = np.random.default_rng(1).uniform(0, 255, (6, 5, 3)).astype(np.float32)
    path = write_storage(tmp_path / "mean.xml", MeanImg=mean.reshape(1, -1), Channel=3, Row=6, Col=5)
    transform = T.mean(str(path))
    np.testing.assert_array_equal(transform.image, mean)
    output = ImagePipeline([transform]).run(image)
    np.testing.assert_allclose(output, image.transpose(2, 0, 1).astype(np.float32) - mean.transpose(2, 0, 1))
    assert output.min() < 0  # not clamped
    # float64 output subtracts in double precision
    output64 = ImagePipeline([transform], dtype=np.float64).run(image)
    np.testing.assert_allclose(output64, image.transpose(2, 0, 1) - mean.transpose(2, 0, 1).astype(np.float64))
    # uint8 output: rounded and saturated
    output8 = ImagePipeline([transform], dtype=np.uint8).run(image)
    expected8 = np.clip(np.rint(image.astype(np.float32) - mean), 0, 255).astype(np.uint8)
    np.testing.assert_array_equal(output8, chw(expected8, np.uint8))
    # a different size: a warning, once, and nothing is subtracted
    pipeline = ImagePipeline([transform])
    other = random_image(7, 5)
    with caplog.at_level(logging.WARNING, logger="cntkio"):
        for _ in range(3):
            np.testing.assert_array_equal(pipeline.run(other), chw(other))
    warnings = [record for record in caplog.records if "mean.xml" in record.getMessage()]
    assert len(warnings) == 1
    assert "6x5x3" in warnings[0].getMessage()


def test_mean_yaml_and_grayscale(tmp_path):
    image = random_image(4, 3, channels=1)
    mean = np.arange(12, dtype=np.float32).reshape(4, 3)
    path = write_storage(tmp_path / "mean.yml", MeanImg=mean, Channel=1, Row=4, Col=3)
    output = ImagePipeline([T.mean(str(path))], grayscale=True).run(image)
    np.testing.assert_allclose(output, (image.astype(np.float32) - mean)[None])


def test_layout_channel_order_and_dtypes():
    image = random_image(5, 7)
    np.testing.assert_array_equal(ImagePipeline([]).run(image), chw(image))
    np.testing.assert_array_equal(ImagePipeline([], layout="hwc").run(image), image.astype(np.float32))
    np.testing.assert_array_equal(ImagePipeline([], channel_order="rgb").run(image), chw(image[:, :, ::-1]))
    rgb_hwc = ImagePipeline([], layout="hwc", channel_order="rgb", dtype=np.uint8).run(image)
    np.testing.assert_array_equal(rgb_hwc, image[:, :, ::-1])
    assert rgb_hwc.dtype == np.uint8
    double = ImagePipeline([], dtype="float64").run(image)
    assert double.dtype == np.float64
    np.testing.assert_array_equal(double, chw(image, np.float64))
    assert ImagePipeline([]).run(image).flags.c_contiguous
    # float64 work cast to float32 (CNTK's broken double -> float cast, fix #21)
    float_input = image.astype(np.float64) / 3
    np.testing.assert_allclose(ImagePipeline([]).run(float_input), chw(float_input), rtol=1e-6)


def test_grayscale_input():
    image = random_image(6, 8, channels=1)
    pipeline = ImagePipeline([T.crop(crop_size=(4, 2)), T.scale(8, 4, 1)], grayscale=True)
    output = pipeline.run(image)
    assert output.shape == (1, 4, 8) == pipeline.output_shape()
    np.testing.assert_array_equal(output, chw(cv2.resize(image[2:4, 2:6], (8, 4))))
    np.testing.assert_array_equal(ImagePipeline([], grayscale=True).run(image[:, :, None]), chw(image))
    hwc = ImagePipeline([T.color(0.3, 0.3, 0.3)], grayscale=True, layout="hwc").run(image, draws(1))
    assert hwc.shape == (6, 8, 1)


def test_conformance_images():
    multi = cv2.imread(str(DATA / "images" / "multi.png"))
    red = cv2.imread(str(DATA / "images" / "red.jpg"))
    pipeline = ImagePipeline([T.scale(8, 8, interpolations="nearest")])
    np.testing.assert_array_equal(pipeline.run(multi), chw(cv2.resize(multi, (8, 8), interpolation=cv2.INTER_NEAREST)))
    output = ImagePipeline([T.crop(crop_size=2), T.scale(4, 4)], channel_order="rgb").run(red)
    expected = cv2.resize(red[3:5, 1:3], (4, 4))[:, :, ::-1]
    np.testing.assert_array_equal(output, chw(expected))
    gray = cv2.imread(str(DATA / "images" / "grayscale.png"), cv2.IMREAD_GRAYSCALE)
    np.testing.assert_array_equal(ImagePipeline([], grayscale=True).run(gray), chw(gray))


def test_out_buffer_and_input_untouched():
    image = random_image(10, 12)
    before = image.copy()
    pipeline = ImagePipeline([T.crop("randomside", side_ratio=0.5), T.color(0.5, 0.5, 0.5), T.scale(6, 6)])
    chunk = np.zeros((3, 3, 6, 6), np.float32)
    result = pipeline.run(image, draws(1, 2, 3), out=chunk[1])
    assert result is not None and np.shares_memory(result, chunk)
    np.testing.assert_array_equal(chunk[1], pipeline.run(image, draws(1, 2, 3)))
    assert (chunk[0] == 0).all() and (chunk[2] == 0).all()
    np.testing.assert_array_equal(image, before)
    # a float input is not changed in place either
    float_image = image.astype(np.float32)
    ImagePipeline([T.color(0.5, 0.5), T.mean(""), T.intensity(1.0, str(INTENSITY_FILE))]).run(float_image, draws(4))
    np.testing.assert_array_equal(float_image, before.astype(np.float32))
    # no transforms: still a copy, never a view of the input
    hwc = ImagePipeline([], layout="hwc", dtype=np.uint8).run(image)
    assert not np.shares_memory(hwc, image)


# --- multiview10 ----------------------------------------------------------------------------------------------


def test_multiview10():
    image = coordinate_image(40, 60)
    pipeline = ImagePipeline([T.crop("multiview10", crop_size=20)])
    assert pipeline.multiview and not ImagePipeline([T.crop("center")]).multiview
    corners = [(0, 0), (40, 0), (0, 20), (40, 20), (20, 10)]
    for view in range(10):
        x, y, width, height, flipped = read_window(pipeline.run(image, draws(0, 0, 0, view), view))
        assert (x, y) == corners[view % 5]
        assert (width, height) == (20, 20)
        assert flipped == (view >= 5)
    np.testing.assert_array_equal(pipeline.run(image, None, 7), pipeline.run(image, None, 17))  # copy id mod 10
    flipped = pipeline.run(image, None, 6)
    np.testing.assert_array_equal(flipped, pipeline.run(image, None, 1)[:, :, ::-1])
    # with a side ratio instead of a size
    ratio = ImagePipeline([T.crop("multiview10", side_ratio=0.5)])
    assert read_window(ratio.run(image, None, 3))[:4] == (40, 20, 20, 20)


def test_crop_window_function():
    crop = T.crop("multiview10", crop_size=(4, 2))
    assert crop_window(crop, 10, 10, 8) == (6, 8, 4, 2, True)  # view 8: bottom-right, flipped
    assert crop_window(T.crop("center", side_ratio=0.5), 10, 20) == (7, 2, 5, 5, False)


# --- randomness -------------------------------------------------------------------------------------------------


def test_random_draws_contract():
    assert RandomDraws((1, -1, 2**64 + 5)).entropy == (1, 2**64 - 1, 5)
    with pytest.raises(TypeError):
        RandomDraws((1.5,))  # type: ignore[arg-type]
    first = RandomDraws((0, 1, 2, 3)).generator(0, 1, 0).random(4)
    np.testing.assert_array_equal(first, RandomDraws((0, 1, 2, 3)).generator(0, 1, 0).random(4))
    assert not np.array_equal(first, RandomDraws((0, 1, 2, 4)).generator(0, 1, 0).random(4))
    assert not np.array_equal(first, RandomDraws((0, 1, 2, 3)).generator(1, 1, 0).random(4))
    assert not np.array_equal(first, RandomDraws((0, 1, 2, 3, 0)).generator(0, 1, 0).random(4))
    # a large value is not confused with two small ones
    assert not np.array_equal(RandomDraws((2**32,)).generator().random(2), RandomDraws((0, 1)).generator().random(2))
    assert pickle.loads(pickle.dumps(RandomDraws((1, 2)))) == RandomDraws((1, 2))


def test_key_hash_is_stable():
    assert key_hash(12) == 12
    assert key_hash(-1) == 2**64 - 1
    assert key_hash(np.uint64(7)) == 7
    assert key_hash("abc") == key_hash(b"abc")
    # the same in every process (unlike hash(str)): the first 8 bytes of BLAKE2b, little-endian
    assert key_hash("abc") == int.from_bytes(hashlib.blake2b(b"abc", digest_size=8).digest(), "little")
    with pytest.raises(TypeError):
        key_hash(1.5)


RANDOM_PIPELINE = [
    T.crop("randomarea", area_ratio=(0.3, 0.9), aspect_ratio=(0.75, 4 / 3), jitter_type="uniratio"),
    T.scale(16, 16),
    T.color(0.4, 0.4, 0.4),
    T.intensity(5.0, str(INTENSITY_FILE)),
]


def test_random_pipeline_is_deterministic_per_tuple():
    image = random_image(40, 60)
    pipeline = ImagePipeline(RANDOM_PIPELINE)
    assert pipeline.is_random
    reference = pipeline.run(image, draws(7, 0, key_hash("img1"), 0))
    np.testing.assert_array_equal(reference, pipeline.run(image, draws(7, 0, key_hash("img1"), 0)))
    np.testing.assert_array_equal(
        reference, ImagePipeline(RANDOM_PIPELINE).run(image, draws(7, 0, key_hash("img1"), 0))
    )
    for other in [(8, 0, key_hash("img1"), 0), (7, 1, key_hash("img1"), 0), (7, 0, key_hash("img2"), 0)]:
        assert not np.array_equal(reference, pipeline.run(image, draws(*other)))
    assert not np.array_equal(reference, pipeline.run(image, draws(7, 0, key_hash("img1"), 1), 1))
    # a transform's own seed changes its draws
    reseeded = [*RANDOM_PIPELINE[:2], T.color(0.4, 0.4, 0.4, seed=1), RANDOM_PIPELINE[3]]
    assert not np.array_equal(reference, ImagePipeline(reseeded).run(image, draws(7, 0, key_hash("img1"), 0)))


def test_random_pipeline_is_thread_and_pickle_safe():
    image = random_image(40, 60)
    pipeline = ImagePipeline(RANDOM_PIPELINE)
    tuples = [(0, sweep, key, 0) for sweep in range(3) for key in range(20)]
    serial = [pipeline.run(image, draws(*values)) for values in tuples]
    with ThreadPoolExecutor(4) as pool:
        parallel = list(pool.map(lambda values: pipeline.run(image, draws(*values)), tuples))
    for a, b in zip(serial, parallel):
        np.testing.assert_array_equal(a, b)
    copy = pickle.loads(pickle.dumps(pipeline))
    for values, expected in zip(tuples[:5], serial):
        np.testing.assert_array_equal(copy.run(image, draws(*values)), expected)


def test_synchronised_crops():
    """Pipelines with the same crop give the same windows for the same draws, whatever else they hold."""
    image = coordinate_image(50, 70)
    crop = T.crop("randomside", side_ratio=(0.3, 0.8), jitter_type="uniratio")
    plain = ImagePipeline([crop])
    decorated = ImagePipeline([T.intensity(), T.color(0.2, 0.2), crop])
    mask = ImagePipeline([crop], grayscale=True)
    for key in range(30):
        d = draws(3, 1, key, 0)
        window = read_window(plain.run(image, d))
        assert read_window(ImagePipeline([crop]).run(image, d)) == window
        x, _, width, height, flipped = window
        mask_output = mask.run(np.ascontiguousarray(image[:, :, 0]), d)
        assert mask_output.shape == (1, height, width)
        assert int(mask_output[0, 0, 0]) == (x + width - 1 if flipped else x)
        assert decorated.run(image, d).shape == (3, height, width)


def test_random_crop_offsets_and_flips_are_uniform():
    image = coordinate_image(40, 60)
    pipeline = ImagePipeline([T.crop("randomside", crop_size=20)])
    count = 4000
    xs, ys, flips = [], [], 0
    for key in range(count):
        x, y, width, height, flipped = read_window(pipeline.run(image, draws(0, 0, key)))
        assert (width, height) == (20, 20)
        xs.append(x)
        ys.append(y)
        flips += flipped
    x_counts = np.bincount(xs, minlength=41)
    y_counts = np.bincount(ys, minlength=21)
    assert len(x_counts) == 41 and len(y_counts) == 21  # offsets 0..C-w and 0..R-h, never beyond
    assert x_counts.min() > 0.5 * count / 41 and x_counts.max() < 1.5 * count / 41
    assert y_counts.min() > 0.7 * count / 21 and y_counts.max() < 1.3 * count / 21
    assert abs(flips / count - 0.5) < 0.04
    # hflip=False: never flipped
    no_flip = ImagePipeline([T.crop("randomside", crop_size=20, hflip=False)])
    assert not any(read_window(no_flip.run(image, draws(0, 0, key)))[4] for key in range(200))


def test_random_side_and_area_ratio_distributions():
    image = coordinate_image(80, 100)
    side = ImagePipeline([T.crop("randomside", side_ratio=(0.25, 0.75), jitter_type="uniratio")])
    sides = np.array([read_window(side.run(image, draws(1, 0, key)))[2] for key in range(2000)])
    assert sides.min() >= 20 and sides.max() <= 60  # round(ratio * 80)
    assert abs(sides.mean() - 40) < 1.5
    assert sides.min() <= 22 and sides.max() >= 58
    # jitter none uses the minimum ratio
    fixed = ImagePipeline([T.crop("randomside", side_ratio=(0.25, 0.75))])
    assert {read_window(fixed.run(image, draws(1, 0, key)))[2] for key in range(50)} == {20}
    area = ImagePipeline(
        [T.crop("randomarea", area_ratio=(0.2, 0.6), aspect_ratio=(0.5, 2.0), jitter_type="uniratio", hflip=False)]
    )
    tall = wide = 0
    for key in range(1000):
        x, y, width, height, _ = read_window(area.run(image, draws(2, 0, key)))
        assert x + width <= 100 and y + height <= 80
        fraction = width * height / 8000
        whole = (width, height) == (100, 80)
        assert whole or 0.2 * 0.95 - 0.01 <= fraction <= 0.6 + 0.01
        assert whole or 0.5 - 0.05 <= width / height <= 2.0 + 0.1 or 0.5 - 0.05 <= height / width <= 2.0 + 0.1
        tall += height > width
        wide += width > height
    assert tall > 300 and wide > 300  # both orientations


def test_brightness_and_contrast_distributions():
    gray = np.full((4, 4, 3), 100, np.uint8)
    brightness = ImagePipeline([T.color(brightness_radius=0.4)])
    values = np.array([brightness.run(gray, draws(0, 0, key))[0, 0, 0] for key in range(2000)])
    assert values.min() >= 60 - 1e-3 and values.max() <= 140 + 1e-3  # 100 + U(-0.4, 0.4) * mean(100)
    assert abs(values.mean() - 100) < 2.0
    assert abs(values.std() - 80 / math.sqrt(12)) < 2.0  # uniform
    outputs = [brightness.run(gray, draws(0, 0, key)) for key in range(5)]
    for output in outputs:
        assert (output == output[0, 0, 0]).all()  # the same shift everywhere
    contrast = ImagePipeline([T.color(contrast_radius=0.3)])
    values = np.array([contrast.run(gray, draws(0, 0, key))[0, 0, 0] for key in range(2000)])
    assert values.min() >= 70 - 1e-3 and values.max() <= 130 + 1e-3  # 100 * (1 + U(-0.3, 0.3))
    assert abs(values.mean() - 100) < 1.5
    # clamped to [0, 255] before the cast
    bright = np.full((4, 4, 3), 250, np.uint8)
    both = ImagePipeline([T.color(1.0, 1.0)])
    clamped = np.array([both.run(bright, draws(0, 0, key)).max() for key in range(200)])
    assert clamped.max() == 255 and (clamped <= 255).all()
    as_uint8 = ImagePipeline([T.color(1.0, 1.0)], dtype=np.uint8)
    saturated = [as_uint8.run(bright, draws(0, 0, key)) for key in range(200)]
    assert any((s == 255).all() for s in saturated)
    assert any((s == 0).all() for s in saturated)  # negative values clamp to 0, not wrap


def test_saturation():
    gray = np.full((3, 3, 3), 90, np.uint8)
    pipeline = ImagePipeline([T.color(saturation_radius=0.5)], layout="hwc")
    for key in range(10):
        np.testing.assert_allclose(pipeline.run(gray, draws(key)), gray.astype(np.float32), atol=1e-3)
    colour = np.zeros((2, 2, 3), np.uint8)
    colour[:] = (200, 100, 50)  # BGR: S = (200 - 50) / 200 = 0.75, V = 200
    saturations = []
    for key in range(500):
        output = pipeline.run(colour, draws(key))[0, 0]
        high, low = output.max(), output.min()
        assert abs(high - 200) < 1e-3  # V kept
        assert output[0] >= output[1] >= output[2]  # hue kept
        saturation = (high - low) / high
        assert 0.75 * 0.5 - 1e-4 <= saturation <= 1 + 1e-6  # S * (1 + U(-0.5, 0.5)), capped at 1
        saturations.append(saturation)
    assert min(saturations) < 0.4 and max(saturations) == pytest.approx(1.0, abs=1e-5)  # some capped


def test_intensity_channel_mapping_and_distribution(tmp_path):
    # EigVec = I, EigVal = (1, 0, 0): only the first RGB component (R, the last BGR channel) moves
    path = write_storage(
        tmp_path / "pca.xml", EigVal=np.array([[1, 0, 0]], np.float32), EigVec=np.eye(3, dtype=np.float32)
    )
    gray = np.full((2, 2, 3), 128, np.uint8)
    pipeline = ImagePipeline([T.intensity(10.0, str(path))])
    shifts = []
    for key in range(2000):
        output = pipeline.run(gray, draws(key))
        assert (output[0] == 128).all() and (output[1] == 128).all()
        shifts.append(output[2, 0, 0] - 128)
    shifts_array = np.array(shifts)
    assert abs(shifts_array.mean()) < 1.0
    assert abs(shifts_array.std() - 10.0) < 0.8
    # the ImageNet eigenbasis moves every channel, by the same shift over the image, clamped to [0, 255]
    imagenet = ImagePipeline([T.intensity(50.0, str(INTENSITY_FILE))])
    per_channel = np.array([imagenet.run(gray, draws(key))[:, 0, 0] - 128 for key in range(2000)])
    assert (np.abs(per_channel.mean(axis=0)) < 0.5).all()
    eigval = np.array([0.2175, 0.0188, 0.0045])
    eigvec = np.array([[-0.5675, 0.7192, 0.4009], [-0.5808, -0.0045, -0.8140], [-0.5836, -0.6948, 0.4203]])
    expected_std = 50 * np.sqrt(((eigvec * eigval) ** 2).sum(axis=1))[::-1]  # RGB rows, BGR output
    np.testing.assert_allclose(per_channel.std(axis=0), expected_std, rtol=0.08)
    white = np.full((2, 2, 3), 250, np.uint8)
    strong = ImagePipeline([T.intensity(1000.0, str(INTENSITY_FILE))])
    values = np.array([strong.run(white, draws(key)) for key in range(50)])
    assert values.max() == 255 and values.min() >= 0


# --- output shapes and pickling -----------------------------------------------------------------------------


def test_output_shape():
    assert ImagePipeline([]).output_shape() is None
    assert ImagePipeline([]).output_shape((10, 20, 3)) == (3, 10, 20)
    assert ImagePipeline([], layout="hwc").output_shape((10, 20, 3)) == (10, 20, 3)
    assert ImagePipeline([T.scale(32, 24)]).output_shape() == (3, 24, 32)
    assert ImagePipeline([T.scale(32, 24)], layout="hwc").output_shape() == (24, 32, 3)
    assert ImagePipeline([T.crop(crop_size=(30, 20))]).output_shape() == (3, 20, 30)
    assert ImagePipeline([T.crop(crop_size=(30, 20))]).output_shape((10, 40)) == (3, 10, 30)
    assert ImagePipeline([T.crop(crop_size=(30, 20))], grayscale=True).output_shape() == (1, 20, 30)
    assert ImagePipeline([T.crop("randomside", side_ratio=0.5)]).output_shape() is None
    assert ImagePipeline([T.crop("randomside", side_ratio=0.5)]).output_shape((40, 60, 3)) == (3, 20, 20)
    uniratio = T.crop("randomside", side_ratio=(0.5, 0.9), jitter_type="uniratio")
    assert ImagePipeline([uniratio]).output_shape((40, 60, 3)) is None
    assert ImagePipeline([uniratio, T.scale(8, 8)]).output_shape() == (3, 8, 8)
    assert ImagePipeline([T.crop("center", side_ratio=0.5, aspect_ratio=2)]).output_shape((40, 60, 3)) is None
    assert ImagePipeline([T.scale(8, 8), T.crop(crop_size=4), T.color(0.1)]).output_shape() == (3, 4, 4)


def test_is_random():
    assert not ImagePipeline([T.crop(), T.scale(4, 4), T.mean(""), T.color(), T.intensity()]).is_random
    assert ImagePipeline([T.crop("randomside")]).is_random
    assert ImagePipeline([T.crop("randomside", hflip=False, crop_size=4)]).is_random  # offsets
    assert not ImagePipeline([T.crop("center", crop_size=4, aspect_ratio=2)]).is_random  # a fixed size
    assert ImagePipeline([T.crop("center", hflip=True)]).is_random
    assert ImagePipeline([T.crop("center", side_ratio=(0.5, 0.9), jitter_type="uniratio")]).is_random
    assert not ImagePipeline([T.crop("center", side_ratio=(0.5, 0.9))]).is_random
    assert ImagePipeline([T.crop("center", aspect_ratio=(0.5, 2.0))]).is_random
    assert not ImagePipeline([T.crop("multiview10", crop_size=4)]).is_random


def test_pickling(tmp_path):
    mean = np.ones((4, 4, 3), np.float32)
    path = write_storage(tmp_path / "mean.xml", MeanImg=mean.reshape(4, 12), Channel=3, Row=4, Col=4)
    transforms = [
        T.crop("randomarea", (10, 8), area_ratio=0.5, aspect_ratio=(0.5, 2), jitter_type="uniratio", seed=4),
        T.scale(4, 4, 3, "cubic", "pad", 3),
        T.mean(str(path)),
        T.color(0.1, 0.2, 0.3, seed=2),
        T.intensity(0.5, str(INTENSITY_FILE), seed=9),
    ]
    for transform in transforms:
        copy = pickle.loads(pickle.dumps(transform))
        assert copy == transform and hash(copy) == hash(transform)
    copy = pickle.loads(pickle.dumps(transforms[2]))
    np.testing.assert_array_equal(copy.image, mean)  # the mean image travels with the transform
    with pytest.raises(AttributeError):
        transforms[0].seed = 5  # type: ignore[misc]
    pipeline = ImagePipeline(transforms, channel_order="rgb", dtype=np.float64)
    image = random_image(20, 20)
    expected = pipeline.run(image, draws(1, 2, 3, 4))
    copy_pipeline = pickle.loads(pickle.dumps(pipeline))
    assert copy_pipeline.dtype == np.float64 and "ImagePipeline" in repr(copy_pipeline)
    np.testing.assert_array_equal(copy_pipeline.run(image, draws(1, 2, 3, 4)), expected)


def test_intermediate_buffers_are_not_shared_between_steps_or_results():
    image = random_image(30, 40)
    crop = T.crop("multiview10", crop_size=(36, 28))  # view 9: the centre, flipped
    pipeline = ImagePipeline([crop, T.scale(30, 20), T.scale(12, 10, 3, "cubic")])
    window = np.ascontiguousarray(image[1:29, 2:38, :][:, ::-1])
    expected = cv2.resize(cv2.resize(window, (30, 20)), (12, 10), interpolation=cv2.INTER_CUBIC)
    first = pipeline.run(image, None, 9)
    np.testing.assert_array_equal(first, chw(expected))
    kept = first.copy()
    np.testing.assert_array_equal(pipeline.run(image, None, 9), first)
    pipeline.run(random_image(30, 40, seed=5), None, 9)
    np.testing.assert_array_equal(first, kept)  # results never alias the reused buffers
    big = random_image(1100, 1000)  # above the scratch limit: allocated per image
    output = ImagePipeline([T.crop("multiview10", crop_size=(1000, 1100))]).run(big, None, 5)
    np.testing.assert_array_equal(output, chw(big[:, ::-1]))


# --- normalize (issue 24 point 3.3) ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"std": 0}, "std"),
        ({"std": (1.0, -1.0, 1.0)}, "std"),
        ({"std": 1e-40}, "std"),
        ({"mean": (0.1, 0.2)}, "1 or 3"),
        ({"mean": float("nan")}, "mean"),
        ({"mean": "0.5"}, "mean"),
        ({"mean": 1e40}, "mean"),
        ({"mean": (0.1, 0.2, 0.3), "std": (1.0,) * 3 + (1.0,)}, "std"),
        ({"max_value": 0}, "max_value"),
        ({"max_value": True}, "max_value"),
    ],
)
def test_normalize_validation(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        T.normalize(**kwargs)


def test_normalize_in_a_pipeline_is_checked():
    with pytest.raises(ConfigError, match="uint8"):
        ImagePipeline([T.normalize()], dtype=np.uint8)
    with pytest.raises(ConfigError, match="after normalize"):
        ImagePipeline([T.normalize(), T.color(0.1)])
    with pytest.raises(ConfigError, match="after normalize"):
        ImagePipeline([T.normalize(), T.mean("")])
    with pytest.raises(ConfigError, match="3 channels"):
        ImagePipeline([T.normalize((0.1, 0.2, 0.3))], grayscale=True)
    ImagePipeline([T.color(0.1), T.normalize(), T.scale(4, 4, 3)])  # resampling after it is fine


def test_normalize_scales_and_standardises_per_output_channel():
    image = random_image(9, 11)
    scaled = ImagePipeline([T.normalize()]).run(image)
    np.testing.assert_array_equal(scaled, chw(image) / np.float32(255))
    mean, std = (0.1, 0.5, 0.9), (0.5, 1.0, 2.0)
    f32 = np.float32
    for order, channels in (("rgb", image[:, :, ::-1]), ("bgr", image)):  # mean[c] and std[c]: output channel c
        got = ImagePipeline([T.normalize(mean, std)], channel_order=order).run(image)
        expected = (chw(channels) / f32(255) - np.array(mean, f32)[:, None, None]) / np.array(std, f32)[:, None, None]
        np.testing.assert_array_equal(got, expected)
        hwc = ImagePipeline([T.normalize(mean, std)], channel_order=order, layout="hwc").run(image)
        np.testing.assert_array_equal(hwc, expected.transpose(1, 2, 0))
    caffe = ImagePipeline([T.normalize((104.0, 117.0, 123.0), max_value=1)], dtype=np.float64).run(image)
    np.testing.assert_array_equal(caffe, chw(image, np.float64) - np.array([104.0, 117.0, 123.0])[:, None, None])
    gray = random_image(6, 5, channels=1)
    out = ImagePipeline([T.normalize(0.5, 0.25)], grayscale=True).run(gray)
    np.testing.assert_array_equal(out, (chw(gray) / f32(255) - f32(0.5)) / f32(0.25))


def test_normalize_composes_with_the_other_transforms():
    """After a mean (its 0..255 values) and before a scale (which resamples the normalised floats)."""
    image = random_image(16, 20)
    mean_image = np.full((16, 20, 3), 100, np.float32)
    got = ImagePipeline([T.Mean("", mean_image), T.normalize(0.0, 0.5), T.scale(10, 8, 3)], layout="hwc").run(image)
    normalised = ((image.astype(np.float32) - mean_image) / np.float32(255)) / np.float32(0.5)
    np.testing.assert_allclose(got, cv2.resize(normalised, (10, 8)), rtol=1e-5, atol=1e-6)
    random = ImagePipeline([T.crop("randomside", side_ratio=0.5), T.normalize()])
    cropped = ImagePipeline([T.crop("randomside", side_ratio=0.5)]).run(image, draws(3))  # (the same draws)
    np.testing.assert_array_equal(random.run(image, draws(3)), cropped / np.float32(255))


def test_normalize_pickles_and_is_public():
    transform = T.normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
    assert transform.mean == (0.485, 0.456, 0.406) and not transform.is_random
    copy = pickle.loads(pickle.dumps(transform))
    assert copy == transform and hash(copy) == hash(transform)
    assert "normalize" in T.__all__ and "Normalize" in T.__all__
    from cntkio.io import transforms as io_transforms

    assert io_transforms.normalize is T.normalize
