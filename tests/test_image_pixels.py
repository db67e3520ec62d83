"""The native per-pixel tail of the image pipeline (``cntkio._native.image_pixels``, src/native/image_pixels.hpp)
against a NumPy + OpenCV reference of spec image.md §4.3-§4.5 (colour with OpenCV's float HSV round trip, mean,
intensity) and of the output layout, on strided, mirrored views of every source type; and the pipeline's deferred
flips against materialised ones."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cntkio import _native
from cntkio import transforms as T
from cntkio._src.formats.image_pipeline import ImagePipeline, RandomDraws

cv2 = pytest.importorskip("cv2")

BRIGHTNESS_CONTRAST, SATURATION, SUBTRACT_MEAN, SHIFT_CLAMP, NORMALIZE = 1, 2, 3, 4, 5


def reference(source: np.ndarray, flip: bool, ops: list[tuple], out_dtype, chw: bool, rgb: bool) -> np.ndarray:
    work = np.float64 if out_dtype == np.float64 else np.float32
    img = (source[:, ::-1] if flip else source).astype(work)
    for op in ops:
        if op[0] == BRIGHTNESS_CONTRAST:
            beta = op[2] * img.astype(np.float64).mean()
            img = np.clip(img * work(op[1]) + work(beta), 0, 255).astype(work)
        elif op[0] == SATURATION and img.shape[2] == 3:
            hsv = cv2.cvtColor(img.astype(np.float32), cv2.COLOR_BGR2HSV)
            hsv[:, :, 1] = np.minimum(hsv[:, :, 1] * op[1], 1)
            img = cv2.cvtColor(hsv, cv2.COLOR_HSV2BGR).astype(work)
        elif op[0] == SUBTRACT_MEAN:
            img = img - op[1]
        elif op[0] == SHIFT_CLAMP:
            img = np.clip(img + np.array(op[1 : 1 + img.shape[2]], dtype=work), 0, 255).astype(work)
        elif op[0] == NORMALIZE:
            channels = img.shape[2]
            mean, std = np.array(op[2 : 2 + channels], dtype=work), np.array(op[5 : 5 + channels], dtype=work)
            img = ((img / work(op[1]) if op[1] != 1 else img) - mean) / std
    if rgb and img.shape[2] == 3:
        img = img[:, :, ::-1]
    if chw:
        img = img.transpose(2, 0, 1)
    if out_dtype == np.uint8:
        return np.rint(np.clip(img, 0, 255)).astype(np.uint8)
    return img.astype(out_dtype)


@st.composite
def cases(draw):
    height, width = draw(st.integers(1, 24)), draw(st.integers(1, 24))
    channels = draw(st.sampled_from([1, 3]))
    source_dtype = draw(st.sampled_from([np.uint8, np.float32, np.float64]))
    out_dtype = draw(st.sampled_from([np.float32, np.float64, np.uint8]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    pad_rows, pad_cols = draw(st.integers(0, 3)), draw(st.integers(0, 3))
    shape = (height + pad_rows, width + pad_cols, channels)
    if source_dtype == np.uint8:
        parent = rng.integers(0, 256, shape, dtype=np.uint8)
    else:
        parent = rng.uniform(-300, 300, shape).astype(source_dtype)
    top, left = draw(st.integers(0, pad_rows)), draw(st.integers(0, pad_cols))
    source = parent[top : top + height, left : left + width]
    if draw(st.booleans()) and channels == 3:  # a non-interleaved view: planes
        source = np.ascontiguousarray(source.transpose(2, 0, 1)).transpose(1, 2, 0)
    work = np.float64 if out_dtype == np.float64 else np.float32
    ops: list[tuple] = []
    for _ in range(draw(st.integers(0, 4))):
        kind = draw(st.sampled_from([BRIGHTNESS_CONTRAST, SATURATION, SUBTRACT_MEAN, SHIFT_CLAMP, NORMALIZE]))
        if kind == BRIGHTNESS_CONTRAST:
            ops.append((kind, draw(st.floats(0.0, 2.0)), draw(st.floats(-1.0, 1.0))))
        elif kind == SATURATION:
            ops.append((kind, draw(st.floats(0.0, 2.0))))
        elif kind == SUBTRACT_MEAN:
            ops.append((kind, rng.uniform(0, 255, (height, width, channels)).astype(work)))
        elif kind == NORMALIZE:
            divisor = draw(st.sampled_from([1.0, 255.0, 0.5]))
            ops.append((kind, divisor, *(float(v) for v in rng.uniform(-1, 1, 3)),
                        *(float(v) for v in rng.uniform(0.05, 3, 3))))  # fmt: skip
        else:
            ops.append((kind, *(float(v) for v in rng.uniform(-100, 100, 3))))
    return source, draw(st.booleans()), ops, out_dtype, draw(st.booleans()), draw(st.booleans())


@settings(max_examples=300, deadline=None)
@given(cases())
def test_native_pixels_match_the_reference(case):
    source, flip, ops, out_dtype, chw, rgb = case
    height, width, channels = source.shape
    out = np.empty((channels, height, width) if chw else (height, width, channels), dtype=out_dtype)
    _native.image_pixels(source, flip, ops, out, chw, rgb)
    expected = reference(source, flip, ops, out_dtype, chw, rgb)
    if out_dtype == np.uint8:  # a float rounding either side of .5 may round the other way
        assert np.abs(out.astype(np.int16) - expected.astype(np.int16)).max(initial=0) <= 1
    else:
        np.testing.assert_allclose(out, expected, rtol=1e-4, atol=2e-3)


def test_saturation_stays_in_range_and_keeps_grey():
    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)
    image[:8] = 77  # grey pixels: no saturation to change
    for factor in (0.0, 0.5, 1.0, 1.7, 2.0):
        out = np.empty((64, 64, 3), np.float32)
        _native.image_pixels(image, False, [(SATURATION, factor)], out, False, False)
        assert out.min() >= 0 and out.max() <= 255  # never below 0 from rounding (OpenCV's round trip is not)
        np.testing.assert_array_equal(out[:8], 77)
        np.testing.assert_allclose(out.max(axis=2), image.max(axis=2), atol=1e-3)  # V kept
    unchanged = np.empty((64, 64, 3), np.float32)
    _native.image_pixels(image, False, [(SATURATION, 1.0)], unchanged, False, False)
    np.testing.assert_allclose(unchanged, image, atol=2e-3)


def test_uint8_output_rounds_half_to_even_and_saturates():
    source = np.array([[[0.5], [1.5], [2.5], [254.5], [-3.0], [300.0], [np.nan], [7.49]]], dtype=np.float32)
    out = np.empty((1, 8, 1), np.uint8)
    _native.image_pixels(source, False, [], out, False, False)
    assert out.ravel().tolist() == [0, 2, 2, 254, 0, 255, 0, 7]


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda s, o: _native.image_pixels(s[:, :, :2], False, [], o[:2], True, False), "1 or 3 channels"),
        (lambda s, o: _native.image_pixels(s, False, [], o[:, :, :3], True, False), "size"),
        (lambda s, o: _native.image_pixels(s, False, [(9,)], o, True, False), "unknown"),
        (lambda s, o: _native.image_pixels(s, False, [(1, 1.0)], o, True, False), "number of parameters"),
        (lambda s, o: _native.image_pixels(s, False, [(3, np.zeros((4, 4, 3)))], o, True, False), "working type"),
        (lambda s, o: _native.image_pixels(s, False, [(3, np.zeros((4, 5, 3), np.float32))], o, True, False), "mean"),
        (lambda s, o: _native.image_pixels(s, False, [(2, -1.0)], o, True, False), ">= 0"),
        (lambda s, o: _native.image_pixels(s, False, [], o.transpose(0, 2, 1), True, False), "contiguous"),
        (lambda s, o: _native.image_pixels(s.astype(np.int32), False, [], o, True, False), "uint8, float32"),
        (lambda s, o: _native.image_pixels(s, False, [(5, 255.0, 0.0, 0.0, 0.0, 1.0, 1.0)], o, True, False),
         "number of parameters"),
        (lambda s, o: _native.image_pixels(s, False, [(5, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0)], o, True, False),
         "divisor"),
        (lambda s, o: _native.image_pixels(s, False, [(5, 255.0, 0.0, 0.0, 0.0, 1.0, 0.0, 1.0)], o, True, False),
         "std"),
        (lambda s, o: _native.image_pixels(s, False, [(5, 255.0, 0.0, 0.0, 0.0, 1.0, 1e-50, 1.0)], o, True, False),
         "std"),
        (lambda s, o: _native.image_pixels(s, False, [(5, 1e300, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0)], o, True, False),
         "divisor"),
        (lambda s, o: _native.image_pixels(s, False, [(5, 1.0, np.nan, 0.0, 0.0, 1.0, 1.0, 1.0)], o, True, False),
         "mean"),
    ],
)
def test_native_pixels_reject_bad_arguments(call, message):
    source = np.zeros((4, 4, 3), np.uint8)
    out = np.zeros((3, 4, 4), np.float32)
    with pytest.raises((ValueError, TypeError), match=message):
        call(source, out)


def test_deferred_flips_equal_materialised_ones():
    """A flip is a flag until pixels are needed: crops of a mirrored image, a no-op scale, a resize and a pad after
    it give what mirroring first gives."""
    rng = np.random.default_rng(3)
    image = rng.integers(0, 256, (40, 52, 3), dtype=np.uint8)
    for view in range(5, 10):  # the mirrored views of multiview10
        pipelines = [
            [T.crop("multiview10", crop_size=30), T.crop("center", crop_size=20)],
            [T.crop("multiview10", crop_size=30), T.scale(30, 30, 3)],
            [T.crop("multiview10", crop_size=30), T.scale(17, 23, 3)],
            [T.crop("multiview10", crop_size=30), T.scale(20, 16, 3, scale_mode="crop")],
            [T.crop("multiview10", crop_size=30), T.scale(24, 16, 3, scale_mode="pad", pad_value=0)],
        ]
        for transforms in pipelines:
            got = ImagePipeline(transforms, layout="hwc", dtype=np.uint8).run(image, RandomDraws(), view)
            # the same window, mirrored by hand: view v >= 5 is view v - 5 of the unmirrored corners, flipped
            unmirrored = ImagePipeline([transforms[0]], layout="hwc", dtype=np.uint8).run(
                image, RandomDraws(), view - 5
            )
            rest = ImagePipeline(transforms[1:], layout="hwc", dtype=np.uint8)
            expected = rest.run(np.ascontiguousarray(cv2.flip(unmirrored, 1)), RandomDraws())
            np.testing.assert_array_equal(got, expected, err_msg=f"{transforms} view {view}")


def test_colour_after_mean_matches_opencv_with_negative_values(tmp_path):
    """Saturation of mean-subtracted (partly negative) pixels follows OpenCV's float HSV round trip, quirks
    included, as CNTK's ColorTransformer did."""
    rng = np.random.default_rng(4)
    image = rng.integers(0, 256, (12, 10, 3), dtype=np.uint8)
    mean = rng.uniform(0, 255, (12, 10, 3)).astype(np.float32)
    out = np.empty((12, 10, 3), np.float32)
    _native.image_pixels(image, False, [(SUBTRACT_MEAN, mean), (SATURATION, 1.5)], out, False, False)
    shifted = image.astype(np.float32) - mean
    assert (shifted < 0).any() and (shifted > 0).any()
    hsv = cv2.cvtColor(shifted, cv2.COLOR_BGR2HSV)
    hsv[:, :, 1] = np.minimum(hsv[:, :, 1] * 1.5, 1)
    np.testing.assert_allclose(out, cv2.cvtColor(hsv, cv2.COLOR_HSV2BGR), rtol=1e-4, atol=1e-3)
    assert math.isfinite(float(out.sum()))


def test_grayscale_pipelines_that_materialise_pixels_mid_way():
    """Grayscale images whose pipeline needs pixels before the end (a pending flip before a resize or a pad, a
    colour or mean before a crop or scale) go through HW x 1 views (stride 0 on the last axis): they were refused
    as not contiguous."""
    rng = np.random.default_rng(6)
    gray = rng.integers(0, 256, (30, 40), dtype=np.uint8)
    pipelines = [
        [T.crop("multiview10", crop_size=20), T.scale(16, 16, 1)],
        [T.crop("multiview10", crop_size=20), T.scale(16, 12, 1, scale_mode="pad", pad_value=0)],
        [T.color(0.3, 0.3), T.crop("center", crop_size=20), T.scale(10, 10, 1)],
    ]
    for transforms in pipelines:
        pipeline = ImagePipeline(transforms, grayscale=True)
        for view in (0, 7):
            out = pipeline.run(gray, RandomDraws((1, 2, 3)), view)
            assert out.shape[0] == 1 and np.isfinite(out).all() and out.min() >= 0 and out.max() <= 255
    options: dict = {"grayscale": True, "dtype": np.uint8, "layout": "hwc"}
    mirrored = ImagePipeline(pipelines[0], **options).run(gray, RandomDraws(), 7)
    corner = ImagePipeline(pipelines[0][:1], **options).run(gray, RandomDraws(), 2)[:, :, 0]  # view 7 = 2, mirrored
    expected = ImagePipeline(pipelines[0][1:], **options).run(np.ascontiguousarray(corner[:, ::-1]), RandomDraws())
    np.testing.assert_array_equal(mirrored, expected)


def test_views_with_negative_strides_and_relaxed_out_strides_are_accepted():
    rng = np.random.default_rng(7)
    image = rng.integers(0, 256, (12, 16, 3), dtype=np.uint8)
    pipeline = ImagePipeline([T.crop("center", crop_size=8)], layout="hwc", dtype=np.uint8)
    for view in (image[:, :, ::-1], image[::-1], image[:, ::-1]):
        np.testing.assert_array_equal(pipeline.run(view), pipeline.run(np.ascontiguousarray(view)))
    gray = ImagePipeline([], grayscale=True)
    out = np.empty((5, 4, 1), np.float32).transpose(2, 0, 1)  # C-contiguous for NumPy: its length-1 axis is free
    assert out.flags.c_contiguous
    source = rng.integers(0, 256, (5, 4), dtype=np.uint8)
    gray.run(source, out=out)
    np.testing.assert_array_equal(out[0], source)


@pytest.mark.parametrize("out_dtype", [np.float32, np.float64])
def test_normalize_is_torchvision_to_the_bit(out_dtype):
    """Issue 24 point 3.3: the native normalisation (p / 255 - mean) / std, per channel, gives the very values of
    torchvision's ToTensor + Normalize (float32: x.div(255), then sub(mean).div(std)); IEEE divisions, no reciprocal,
    so the baseline and AVX2 kernels agree too (fuzz/image_pixels_fuzz.cpp compares their bytes)."""
    rng = np.random.default_rng(8)
    image = rng.integers(0, 256, (31, 45, 3), dtype=np.uint8)
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    out = np.empty((3, 31, 45), out_dtype)
    _native.image_pixels(image, False, [(NORMALIZE, 255.0, *mean, *std)], out, True, False)
    work = np.dtype(out_dtype).type
    chw = image.transpose(2, 0, 1).astype(work)
    expected = (chw / work(255) - np.array(mean, work)[:, None, None]) / np.array(std, work)[:, None, None]
    np.testing.assert_array_equal(out, expected)
    torch = pytest.importorskip("torch")
    dtype = torch.float32 if out_dtype == np.float32 else torch.float64
    tensor = torch.from_numpy(image).permute(2, 0, 1).contiguous().to(dtype).div(255)  # ToTensor
    per_channel = [torch.tensor(values, dtype=dtype).view(-1, 1, 1) for values in (mean, std)]
    tensor = tensor.sub(per_channel[0]).div(per_channel[1])  # Normalize
    np.testing.assert_array_equal(out, tensor.numpy())
    unit = np.empty((31, 45, 3), np.float32)
    _native.image_pixels(image, False, [(NORMALIZE, 255.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0)], unit, False, False)
    np.testing.assert_array_equal(unit, image.astype(np.float32) / np.float32(255))  # scale to [0, 1]
    assert unit.min() >= 0 and unit.max() <= 1
