"""The per-image transform pipeline of the image deserializers (spec image.md §3-§4).

An :class:`ImagePipeline` applies a list of :mod:`cntkio.transforms` to one decoded image (HWC uint8 BGR as
``cv2.imdecode`` gives it, or HW for grayscale), then lays the result out as CHW (or HWC), in BGR (or RGB) order and
casts it to the output dtype, optionally straight into a preallocated slice of a chunk buffer.

Randomness never comes from global or per-thread state. The caller passes a :class:`RandomDraws` built from a tuple of
integers identifying the image occurrence (the deserializer uses ``(seed, sweep, key_hash(key), view)``); each random
transform draws from its own generator derived from that tuple, its ``seed`` and its place in the pipeline, created
only when it is needed. The same tuple always gives the same image, on any thread or process and at any position in a
minibatch, and two pipelines holding the same random transforms give the same crops for the same tuple (CNTK's
synchronised transforms, e.g. an image and its mask).

Crops are views and a flip is a flag; per-pixel transforms (colour, mean, intensity) become operations of a native
kernel (``cntkio._native.image_pixels``, src/native/image_pixels.hpp) that mirrors, applies them, lays the image out
and casts it into the output in one pass with the GIL released. Pixels are materialised only where a resampling
(OpenCV's resize and copyMakeBorder, which release the GIL too) needs them.
"""

from __future__ import annotations

import hashlib
import logging
import math
import operator
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from cntkio import _native
from cntkio._src.common.errors import ConfigError
from cntkio._src.formats.image_transforms import (
    RANDOM_CROP_TYPES,
    Color,
    Crop,
    ImageTransform,
    Intensity,
    Mean,
    Normalize,
    Scale,
    require_cv2,
)

logger = logging.getLogger("cntkio")

__all__ = ["ImagePipeline", "RandomDraws", "crop_window", "key_hash", "require_cv2"]

_MASK32 = (1 << 32) - 1
_MASK64 = (1 << 64) - 1
_CROP_ATTEMPTS = 10
_SCRATCH_LIMIT = 1 << 23  # bytes: larger intermediate images are allocated afresh rather than kept per thread

# Generator stream ids: a transform's generator is keyed by (seed, kind id, occurrence of that kind), so adding a
# deterministic or a different transform elsewhere in the list does not change the draws of a crop.
_KIND_IDS = {"crop": 1, "scale": 2, "mean": 3, "color": 4, "intensity": 5, "normalize": 6}

_OUTPUT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.uint8))

# Per-pixel operations of cntkio._native.image_pixels (src/native/image_pixels.hpp, PixelOp::Kind).
_BRIGHTNESS_CONTRAST, _SATURATION, _SUBTRACT_MEAN, _SHIFT_CLAMP, _NORMALIZE = 1, 2, 3, 4, 5


def key_hash(key: object) -> int:
    """A stable 64-bit hash of a sequence key, for :class:`RandomDraws` (Python's ``hash`` of a str is salted per
    process, so it must not be used). Integer keys map to themselves (mod 2**64); strings and bytes to the first 8
    bytes of their BLAKE2b digest."""
    if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
        return int(key) & _MASK64
    if isinstance(key, str):
        data = key.encode("utf-8")
    elif isinstance(key, (bytes, bytearray, memoryview)):
        data = bytes(key)
    else:
        raise TypeError(f"key_hash: expected an int, str or bytes key, got {type(key).__name__}")
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


@dataclass(frozen=True)
class RandomDraws:
    """Where a pipeline's random numbers come from for one image: a tuple of integers naming the image occurrence.

    The deserializer builds it as ``RandomDraws((seed, sweep, key_hash(key), view))``. Every integer is taken mod
    2**64 (negative values are allowed). The same tuple always gives the same draws.
    """

    entropy: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        try:
            values = tuple(operator.index(value) & _MASK64 for value in self.entropy)
        except TypeError:
            raise TypeError(f"RandomDraws needs a tuple of integers, got {self.entropy!r}") from None
        object.__setattr__(self, "entropy", values)

    def generator(self, *stream: int) -> np.random.Generator:
        """A fresh generator for one transform: ``stream`` (e.g. seed, kind id, occurrence) plus this tuple.

        Each 64-bit value becomes two 32-bit words, with the word count last, so distinct tuples never share a seed.
        """
        values = [value & _MASK64 for value in stream]
        values += self.entropy
        words: list[int] = []
        for value in values:
            words += (value & _MASK32, value >> 32)
        words.append(len(values))
        return np.random.default_rng(np.array(words, dtype=np.uint32))


class _LazyGenerator:
    """Creates a transform's generator on first use only (deterministic transforms never pay for one)."""

    __slots__ = ("_draws", "_generator", "_stream")

    def __init__(self, draws: RandomDraws, stream: tuple[int, int, int]):
        self._draws = draws
        self._stream = stream
        self._generator: np.random.Generator | None = None

    def get(self) -> np.random.Generator:
        if self._generator is None:
            self._generator = self._draws.generator(*self._stream)
        return self._generator


def _round(value: float) -> int:
    """Rounds half away from zero (C's ``round``) for non-negative values."""
    return math.floor(value + 0.5)


def _pick(bounds: tuple[float, float], uniratio: bool, rng: _LazyGenerator | None) -> float:
    low, high = bounds
    if not uniratio or low == high or rng is None:
        return low
    return float(rng.get().uniform(low, high))


def _crop_size(crop: Crop, rows: int, cols: int, rng: _LazyGenerator | None) -> tuple[int, int]:
    """The crop ``(width, height)`` from the ratios (spec §4.1 step 2). ``rng=None`` takes the minimum ratios and no
    aspect swap (used to compute fixed output shapes)."""
    side: tuple[float, float] = crop.side_ratio  # type: ignore[assignment]
    area: tuple[float, float] = crop.area_ratio  # type: ignore[assignment]
    aspect: tuple[float, float] = crop.aspect_ratio  # type: ignore[assignment]
    uniratio = crop.jitter_type == "uniratio"
    attempt_is_random = rng is not None and (
        (uniratio and (side[0] != side[1] or area[0] != area[1] or aspect[0] != aspect[1])) or aspect[0] != 1
    )
    for _ in range(_CROP_ATTEMPTS):
        if side[1] > 0:
            width = height = _round(_pick(side, uniratio, rng) * min(rows, cols))
        elif area[1] > 0:
            width = height = _round(math.sqrt(rows * cols * _pick(area, uniratio, rng)))
        else:
            width, height = cols, rows
        ratio = _pick(aspect, uniratio, rng)
        if ratio != 1 and rng is not None:
            pixels = width * height
            wide, narrow = math.floor(math.sqrt(pixels * ratio)), math.floor(math.sqrt(pixels / ratio))
            width, height = (wide, narrow) if rng.get().random() < 0.5 else (narrow, wide)
        width, height = max(width, 1), max(height, 1)
        if width <= cols and height <= rows:
            return width, height
        if not attempt_is_random:
            break
    return cols, rows


def crop_window(
    crop: Crop, rows: int, cols: int, view: int = 0, rng: _LazyGenerator | None = None
) -> tuple[int, int, int, int, bool]:
    """Where ``crop`` cuts an image of ``rows`` x ``cols``: ``(x, y, width, height, flip)`` (spec §4.1)."""
    fixed = crop.fixed_size
    if fixed is not None:
        width, height = min(cols, fixed[0]), min(rows, fixed[1])
    else:
        width, height = _crop_size(crop, rows, cols, rng)
    flip = False
    if crop.crop_type in RANDOM_CROP_TYPES and rng is not None:
        generator = rng.get()
        x = int(generator.integers(0, cols - width + 1))
        y = int(generator.integers(0, rows - height + 1))
    elif crop.crop_type == "multiview10":
        view %= 10
        corner = view % 5
        x = (cols - width) // 2 if corner == 4 else (0 if corner in (0, 2) else cols - width)
        y = (rows - height) // 2 if corner == 4 else (0 if corner in (0, 1) else rows - height)
        flip = view >= 5
    else:
        x, y = (cols - width) // 2, (rows - height) // 2
    if crop.hflip and rng is not None:
        flip = bool(rng.get().random() < 0.5)
    return x, y, width, height, flip


def _crop_size_is_random(crop: Crop) -> bool:
    """Whether the crop size may differ between images of the same size."""
    if crop.fixed_size is not None:
        return False
    aspect: tuple[float, float] = crop.aspect_ratio  # type: ignore[assignment]
    if aspect[0] != 1:
        return True
    if crop.jitter_type == "none":
        return False
    ratio: tuple[float, float] = max(crop.side_ratio, crop.area_ratio)  # type: ignore[assignment]
    return aspect[0] != aspect[1] or ratio[0] != ratio[1]


class _Scratch(threading.local):
    """Per-thread scratch buffers of a pipeline, by (transform index, role)."""

    def __init__(self) -> None:
        self.buffers: dict[tuple[int, int], np.ndarray] = {}


class ImagePipeline:
    """Applies image transforms to decoded images (spec image.md §4), then the layout, channel order and cast.

    Args:
        transforms: :mod:`cntkio.transforms` objects, applied in order.
        grayscale: the decoded images are HW grayscale (one channel) rather than HWC BGR.
        layout: ``'chw'`` (CNTK's Python output, default) or ``'hwc'``.
        channel_order: ``'bgr'`` (as decoded, CNTK's order) or ``'rgb'``.
        dtype: ``np.float32`` (default), ``np.float64`` or ``np.uint8`` (float values are rounded and saturated).

    The pipeline is immutable apart from remembering which mean-size warnings it has printed, and is safe to share
    between threads and to pickle.
    """

    def __init__(
        self,
        transforms: Sequence[ImageTransform],
        *,
        grayscale: bool = False,
        layout: str = "chw",
        channel_order: str = "bgr",
        dtype: Any = np.float32,
    ):
        transforms = tuple(transforms)
        for transform in transforms:
            if not isinstance(transform, ImageTransform):
                raise ConfigError(f"not an image transform (use cntkio.transforms): {transform!r}")
        if layout not in ("chw", "hwc"):
            raise ConfigError(f"layout must be 'chw' or 'hwc', got {layout!r}")
        if channel_order not in ("bgr", "rgb"):
            raise ConfigError(f"channel_order must be 'bgr' or 'rgb', got {channel_order!r}")
        try:
            output_dtype = np.dtype(dtype)
        except TypeError:
            raise ConfigError(f"dtype must be float32, float64 or uint8, got {dtype!r}") from None
        if output_dtype not in _OUTPUT_DTYPES:
            raise ConfigError(f"dtype must be float32, float64 or uint8, got {output_dtype}")
        self.channels = 1 if grayscale else 3
        for transform in transforms:
            if isinstance(transform, Scale) and transform.channels != self.channels:
                raise ConfigError(
                    f"scale(channels={transform.channels}) does not match the decoded images "
                    f"({self.channels} channel{'s' if self.channels > 1 else ''}, grayscale={bool(grayscale)}); "
                    f"Scale does not convert colour"
                )
        _check_normalize(transforms, self.channels, output_dtype)
        self.transforms = transforms
        self.grayscale = bool(grayscale)
        self.layout = layout
        self.channel_order = channel_order
        self.dtype = output_dtype
        self._work_dtype = np.dtype(np.float64) if output_dtype == np.float64 else np.dtype(np.float32)
        occurrences: dict[str, int] = {}
        streams = []
        for transform in transforms:
            occurrence = occurrences.get(transform.kind, 0)
            occurrences[transform.kind] = occurrence + 1
            streams.append((getattr(transform, "seed", 0), _KIND_IDS[transform.kind], occurrence))
        self._streams = tuple(streams)
        # Mean images (rows x cols x channels) in the working type, as the native subtraction takes them.
        self._means = {
            index: np.ascontiguousarray(transform.image, dtype=self._work_dtype)
            for index, transform in enumerate(transforms)
            if isinstance(transform, Mean) and transform.image is not None
        }
        self._warned: set[int] = set()
        self._scratch = _Scratch()

    def __repr__(self) -> str:
        return (
            f"ImagePipeline({list(self.transforms)!r}, grayscale={self.grayscale}, layout={self.layout!r}, "
            f"channel_order={self.channel_order!r}, dtype=np.{self.dtype.name})"
        )

    @property
    def is_random(self) -> bool:
        """Whether any transform draws random numbers (if not, the :class:`RandomDraws` are never used)."""
        return any(transform.is_random for transform in self.transforms)

    @property
    def multiview(self) -> bool:
        """Whether a ``multiview10`` crop is present: each image then becomes 10 sequences, views 0..9."""
        return any(isinstance(t, Crop) and t.crop_type == "multiview10" for t in self.transforms)

    def output_shape(self, decoded_shape: Sequence[int] | None = None) -> tuple[int, ...] | None:
        """The output shape when the pipeline fixes it, else None (shapes vary from image to image).

        A Scale fixes it, and so does a fixed ``crop_size`` (assuming images at least that large, unless
        ``decoded_shape``, the ``(rows, cols[, channels])`` of every decoded image, says otherwise).
        """
        channels = self.channels
        size: tuple[int, int] | None = None  # (rows, cols)
        if decoded_shape is not None:
            size = (int(decoded_shape[0]), int(decoded_shape[1]))
            if len(decoded_shape) > 2:
                channels = int(decoded_shape[2])
        for transform in self.transforms:
            if isinstance(transform, Scale):
                size = (transform.height, transform.width)
                channels = transform.channels
            elif isinstance(transform, Crop):
                fixed = transform.fixed_size
                if fixed is not None:
                    size = (fixed[1], fixed[0]) if size is None else (min(size[0], fixed[1]), min(size[1], fixed[0]))
                elif size is not None and not _crop_size_is_random(transform):
                    width, height = _crop_size(transform, size[0], size[1], None)
                    size = (height, width)
                else:
                    size = None
        if size is None:
            return None
        return (channels, *size) if self.layout == "chw" else (*size, channels)

    # --- applying -----------------------------------------------------------------------------------------------

    def run(
        self,
        image: np.ndarray,
        draws: RandomDraws | None = None,
        view: int = 0,
        out: np.ndarray | None = None,
    ) -> np.ndarray:
        """Transforms one decoded image and returns it laid out and cast (written into ``out`` when given).

        Args:
            image: HWC (BGR) or HW (grayscale) uint8, as ``cv2.imdecode`` gives it; float32/float64 are accepted too.
                It is never modified.
            draws: the random draws of this image occurrence; None means ``RandomDraws()``.
            view: the multi-view copy id (0..9, taken mod 10) for a ``multiview10`` crop.
            out: an array of exactly the output shape and dtype to write into (any strides, e.g. a slice of a
                chunk buffer); the result is never a view of ``image`` or of internal buffers.
        """
        cv2 = require_cv2()
        img = np.asarray(image)
        if img.ndim == 3 and img.shape[2] == 1:
            img = img[:, :, 0]
        channels = 1 if img.ndim == 2 else img.shape[2]
        if img.ndim not in (2, 3) or channels != self.channels:
            raise ValueError(
                f"expected a {'HW grayscale' if self.grayscale else 'HWC 3-channel'} image, got shape {img.shape}"
            )
        if img.dtype not in (np.uint8, np.float32, np.float64):
            raise ValueError(f"expected a uint8 (or float) image, got {img.dtype}")
        if img.shape[0] == 0 or img.shape[1] == 0:
            raise ValueError(f"empty image of shape {img.shape}")
        if any(stride < 0 for stride in img.strides):  # (the native pass reads forward strides only)
            img = np.ascontiguousarray(img)
        if draws is None:
            draws = RandomDraws()
        # The image so far is ``img`` mirrored left-right when ``flip``, then ``ops`` (native per-pixel operations):
        # both are applied only when a resampling needs the pixels, or at the end straight into the output.
        flip = False
        ops: list[tuple[Any, ...]] = []
        for index, (transform, stream) in enumerate(zip(self.transforms, self._streams)):
            rng = _LazyGenerator(draws, stream)
            if isinstance(transform, Crop):
                if ops:
                    img, flip, ops = self._pixels(img, flip, ops, index), False, []
                x, y, width, height, mirror = crop_window(transform, img.shape[0], img.shape[1], view, rng)
                if flip:  # the window is in the mirrored image
                    x = img.shape[1] - x - width
                img = img[y : y + height, x : x + width]
                flip ^= mirror
            elif isinstance(transform, Scale):
                if ops:
                    img, flip, ops = self._pixels(img, flip, ops, index), False, []
                img, flip = self._scale(cv2, img, flip, transform, index)
            elif isinstance(transform, Mean):
                ops += self._mean(img, transform, index)
            elif isinstance(transform, Color):
                ops += self._color(img, transform, rng)
            elif isinstance(transform, Intensity):
                ops += self._intensity(img, transform, rng)
            elif isinstance(transform, Normalize):
                ops.append(self._normalize(img, transform))
        return self._finish(img, flip, ops, out)

    # Intermediate images go to per-thread buffers, one set per pipeline and transform, reused from image to image
    # (up to 8 MiB each): fresh arrays of a few hundred KiB cost a page fault per 4 KiB on every image, as malloc
    # returns them to the system when they are freed. This is scratch memory only, never random state.

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_scratch"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._scratch = _Scratch()

    def _buffer(self, slot: tuple[int, int], shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        """A scratch array of ``shape`` and ``dtype`` for ``slot`` (transform index, role), this thread only."""
        dtype = np.dtype(dtype)
        nbytes = math.prod(shape) * dtype.itemsize
        if nbytes > _SCRATCH_LIMIT:
            return np.empty(shape, dtype=dtype)
        buffers = self._scratch.buffers
        flat = buffers.get(slot)
        if flat is None or flat.nbytes < nbytes:
            flat = buffers[slot] = np.empty(max(nbytes, 1), dtype=np.uint8)
        view: np.ndarray = flat[:nbytes].view(dtype).reshape(shape)
        return view

    def _pixels(self, img: np.ndarray, flip: bool, ops: list[tuple[Any, ...]], index: int) -> np.ndarray:
        """The pixels of ``img`` mirrored when ``flip`` and with ``ops`` applied, as a new HWC (or HW) array: of
        the working type after per-pixel operations, else of ``img``'s type (a flip keeps uint8 images uint8)."""
        dtype = self._work_dtype if ops else img.dtype
        result = self._buffer((index, 1), img.shape, dtype)
        _native.image_pixels(_hwc(img), flip, ops, _hwc(result), False, False)
        return result

    def _scale(self, cv2: Any, img: np.ndarray, flip: bool, transform: Scale, index: int) -> tuple[np.ndarray, bool]:
        """The scaled image (``img`` mirrored when ``flip``), and whether it is still to be mirrored."""
        rows, cols = img.shape[:2]
        width, height = transform.width, transform.height
        mode = transform.scale_mode
        if mode == "fill":
            new_width, new_height = width, height
        elif mode == "crop":  # the shorter side matches; cover the target if CNTK's rule would not
            if cols < rows:
                new_width, new_height = width, _round(rows * width / cols)
            else:
                new_width, new_height = _round(cols * height / rows), height
            if new_width < width or new_height < height:
                factor = max(width / cols, height / rows)
                new_width, new_height = max(width, _round(cols * factor)), max(height, _round(rows * factor))
        else:  # pad: the longer side matches; fit inside the target if CNTK's rule would not
            if cols >= rows:
                new_width, new_height = width, _round(rows * width / cols)
            else:
                new_width, new_height = _round(cols * height / rows), height
            if new_width > width or new_height > height:
                factor = min(width / cols, height / rows)
                new_width, new_height = min(width, _round(cols * factor)), min(height, _round(rows * factor))
            new_width, new_height = max(new_width, 1), max(new_height, 1)
        padded = mode == "pad" and (new_width, new_height) != (width, height)
        if flip and ((new_width, new_height) != (cols, rows) or padded):
            img, flip = self._pixels(img, flip, [], index), False  # resampling needs the mirrored pixels
        if (new_width, new_height) != (cols, rows):
            dst = self._buffer((index, 0), (new_height, new_width, *img.shape[2:]), img.dtype)
            interpolation = _interpolation(cv2, transform.interpolations)
            img = cv2.resize(img, (new_width, new_height), dst=dst, interpolation=interpolation)
        if mode == "crop":
            x, y = (new_width - width) // 2, (new_height - height) // 2
            if flip:  # the window is in the mirrored image
                x = new_width - x - width
            img = img[y : y + height, x : x + width]
        elif padded:
            top, left = (height - new_height) // 2, (width - new_width) // 2
            bottom, right = height - new_height - top, width - new_width - left
            dst = self._buffer((index, 2), (height, width, *img.shape[2:]), img.dtype)
            if transform.pad_value == -1:
                img = cv2.copyMakeBorder(img, top, bottom, left, right, cv2.BORDER_REPLICATE, dst=dst)
            else:
                value = (float(transform.pad_value),) * 4
                img = cv2.copyMakeBorder(img, top, bottom, left, right, cv2.BORDER_CONSTANT, dst=dst, value=value)
        return img, flip

    def _mean(self, img: np.ndarray, transform: Mean, index: int) -> list[tuple[Any, ...]]:
        mean_image = self._means.get(index)
        if mean_image is None:
            return []
        rows, cols = img.shape[:2]
        channels = 1 if img.ndim == 2 else img.shape[2]
        if mean_image.shape != (rows, cols, channels):
            if index not in self._warned:
                self._warned.add(index)
                logger.warning(
                    "mean file %r is %s (rows x cols x channels) but the image is %s: the mean is not subtracted "
                    "(warned once)",
                    transform.filename,
                    "x".join(map(str, mean_image.shape)),
                    f"{rows}x{cols}x{channels}",
                )
            return []
        return [(_SUBTRACT_MEAN, mean_image)]

    def _color(self, img: np.ndarray, transform: Color, rng: _LazyGenerator) -> list[tuple[Any, ...]]:
        if not transform.is_random:
            return []
        generator = rng.get()
        brightness = transform.brightness_radius
        contrast = transform.contrast_radius
        saturation = transform.saturation_radius
        ops: list[tuple[Any, ...]] = []
        if brightness > 0 or contrast > 0:
            # beta = U(-b, b) x the mean of all pixels of the image as it is here (computed natively)
            beta_factor = float(generator.uniform(-brightness, brightness)) if brightness > 0 else 0.0
            alpha = 1.0 + float(generator.uniform(-contrast, contrast)) if contrast > 0 else 1.0
            ops.append((_BRIGHTNESS_CONTRAST, alpha, beta_factor))
        if saturation > 0 and img.ndim == 3 and img.shape[2] == 3:
            ops.append((_SATURATION, 1.0 + float(generator.uniform(-saturation, saturation))))
        return ops

    def _intensity(self, img: np.ndarray, transform: Intensity, rng: _LazyGenerator) -> list[tuple[Any, ...]]:
        if not transform.is_random:
            return []
        eigval, eigvec = transform.eigval, transform.eigvec
        assert eigval is not None and eigvec is not None
        alpha = rng.get().normal(0.0, transform.intensity_stddev, 3)
        shift = eigvec @ (alpha * eigval)  # RGB order; channel c of a BGR pixel gets shift[channels - 1 - c]
        if img.ndim == 2:
            return [(_SHIFT_CLAMP, float(shift[0]), 0.0, 0.0)]
        return [(_SHIFT_CLAMP, float(shift[2]), float(shift[1]), float(shift[0]))]

    def _normalize(self, img: np.ndarray, transform: Normalize) -> tuple[Any, ...]:
        """The native normalisation: the parameters (in output channel order) moved to the channels' memory order."""
        channels = 1 if img.ndim == 2 else img.shape[2]
        mean, std = transform.parameters(channels)
        if channels == 3 and self.channel_order == "rgb":  # memory holds BGR; output channel c is memory 2 - c
            mean, std = mean[::-1], std[::-1]
        return (_NORMALIZE, transform.max_value, *(*mean, 0.0, 0.0)[:3], *(*std, 1.0, 1.0)[:3])

    def _finish(self, img: np.ndarray, flip: bool, ops: list[tuple[Any, ...]], out: np.ndarray | None) -> np.ndarray:
        """Mirrors ``img`` when ``flip``, applies ``ops``, lays the result out (CHW/HWC, BGR/RGB) and casts it into
        ``out`` (or a new array), in one native pass."""
        channels = 1 if img.ndim == 2 else img.shape[2]
        rows, cols = img.shape[:2]
        shape = (channels, rows, cols) if self.layout == "chw" else (rows, cols, channels)
        if out is None:
            out = np.empty(shape, dtype=self.dtype)
        elif out.shape != shape or out.dtype != self.dtype:
            raise ValueError(
                f"out has shape {out.shape} and dtype {out.dtype}, the image needs {shape} and {self.dtype}"
            )
        target = out if out.flags.c_contiguous else np.empty(shape, dtype=self.dtype)
        reverse = self.channel_order == "rgb" and channels == 3
        _native.image_pixels(_hwc(img), flip, ops, target, self.layout == "chw", reverse)
        if target is not out:
            np.copyto(out, target)
        return out


def _check_normalize(transforms: Sequence[ImageTransform], channels: int, dtype: np.dtype[Any]) -> None:
    """A ``normalize`` fits: a float output, its channels, and no transform after it that works on 0..255 values."""
    seen: Normalize | None = None
    for transform in transforms:
        if isinstance(transform, Normalize):
            if dtype == np.uint8:
                raise ConfigError("normalize gives values outside 0..255: it needs dtype float32 or float64, not uint8")
            if transform.channels > channels:
                raise ConfigError(f"normalize names {transform.channels} channels; the images have {channels}")
            seen = transform
        elif seen is not None and isinstance(transform, (Mean, Color, Intensity)):
            raise ConfigError(
                f"{transform.kind} comes after normalize, but works on 0..255 pixel values (its clamps and means): put "
                "normalize after it"
            )


def _hwc(img: np.ndarray) -> np.ndarray:
    """A HW (grayscale) image as a HW x 1 view; HWC unchanged."""
    return img[:, :, None] if img.ndim == 2 else img


def _interpolation(cv2: Any, name: str) -> int:
    flags: dict[str, int] = {
        "nearest": cv2.INTER_NEAREST,
        "linear": cv2.INTER_LINEAR,
        "cubic": cv2.INTER_CUBIC,
        "lanczos": cv2.INTER_LANCZOS4,
    }
    return flags[name]
