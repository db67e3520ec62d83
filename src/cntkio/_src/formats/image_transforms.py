"""Image transforms of the image deserializers, with the ``cntk.io.transforms`` names and signatures.

Each function returns a frozen, picklable transform object holding validated parameters; an invalid parameter raises
:class:`~cntkio._src.common.errors.ConfigError` at construction. The transforms are applied, in list order, by
:class:`cntkio._src.formats.image_pipeline.ImagePipeline` (spec image.md §4).

Random transforms take a keyword-only ``seed`` (CNTK's per-transform ``seed`` key). Their random numbers come from a
generator derived from that seed and the :class:`~cntkio._src.formats.image_pipeline.RandomDraws` of the image (the
deserializer's seed, the sweep, the sequence key and the view), never from global state: the same image in the same
sweep is always augmented the same way, on any thread or process. :func:`normalize` is cntkio's own (CNTK had only
``mean``): scaling to [0, 1] and/or standardising per channel, as PyTorch models expect.

OpenCV (``cv2``) is an optional dependency (``pip install cntkio[image]``); it is only needed to read the ``mean`` and
``intensity`` files here and to run a pipeline.
"""

from __future__ import annotations

import math
import operator
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from cntkio._src.common.errors import ConfigError

__all__ = [
    "Color",
    "Crop",
    "ImageTransform",
    "Intensity",
    "Mean",
    "Normalize",
    "Scale",
    "color",
    "crop",
    "intensity",
    "mean",
    "normalize",
    "scale",
]

CROP_TYPES = ("center", "randomside", "randomarea", "multiview10")
RANDOM_CROP_TYPES = ("randomside", "randomarea")
JITTER_TYPES = ("none", "uniratio")
INTERPOLATIONS = ("nearest", "linear", "cubic", "lanczos")
SCALE_MODES = ("fill", "crop", "pad")

Ratio = float | tuple[float, float]
Size = int | tuple[int, int]


def require_cv2() -> Any:
    """Imports OpenCV, or raises an ImportError saying how to install it."""
    try:
        import cv2
    except ImportError as error:
        raise ImportError(
            "cntkio's image reader needs OpenCV: pip install cntkio[image] (or pip install opencv-python-headless)"
        ) from error
    return cv2


# --- validation helpers ---------------------------------------------------------------------------------------------


def _integer(name: str, value: object) -> int:
    if isinstance(value, bool):
        raise ConfigError(f"{name} must be an integer, got {value!r}")
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise ConfigError(f"{name} must be an integer, got {value!r}") from None


def _real(name: str, value: object) -> float:
    if isinstance(value, (bool, str, bytes)):
        raise ConfigError(f"{name} must be a number, got {value!r}")
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be a number, got {value!r}") from None
    if not math.isfinite(number):
        raise ConfigError(f"{name} must be a finite number, got {value!r}")
    return number


def _pair(name: str, value: object, convert: Any) -> tuple[Any, Any]:
    """A scalar ``v`` as ``(v, v)``, or a ``(a, b)`` sequence as a tuple, each converted."""
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise ConfigError(f"{name} must be a single value or a pair (min, max), got {value!r}")
        return convert(name, value[0]), convert(name, value[1])
    one = convert(name, value)
    return one, one


def _ratio_range(name: str, value: object) -> tuple[float, float]:
    """A ratio (side/area): 0 means unset; otherwise 0 < min <= max <= 1."""
    low, high = _pair(name, value, _real)
    if low == 0 and high == 0:
        return 0.0, 0.0
    if not (0 < low <= 1 and 0 < high <= 1):
        raise ConfigError(f"{name} values must be in (0, 1] (or 0 for unset), got {value!r}")
    if low > high:
        raise ConfigError(f"{name} minimum must be <= maximum, got {value!r}")
    return low, high


def _choice(name: str, value: object, allowed: tuple[str, ...], *, any_case: bool) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"{name} must be a string, one of {', '.join(allowed)}; got {value!r}")
    key = value.lower() if any_case else value
    if key not in allowed:
        case = " (any case)" if any_case else " (lower case)"
        raise ConfigError(f"invalid {name} {value!r}: expected one of {', '.join(allowed)}{case}")
    return key


def _radius(name: str, value: object) -> float:
    radius = _real(name, value)
    if not 0 <= radius <= 1:
        raise ConfigError(f"{name} must be in [0, 1], got {value!r}")
    return radius


def _set(instance: object, name: str, value: object) -> None:
    object.__setattr__(instance, name, value)  # normalising a frozen dataclass in __post_init__


def _read_file_storage(path: str, what: str) -> Any:
    """Opens an OpenCV FileStorage (XML/YAML/JSON) file for reading, or raises a ConfigError naming it."""
    cv2 = require_cv2()
    if not os.path.isfile(path):  # checked first: OpenCV would also log an error of its own
        raise ConfigError(f"cannot open {what} {path!r}: no such file")
    try:
        storage = cv2.FileStorage(path, cv2.FILE_STORAGE_READ)
    except (cv2.error, SystemError) as error:  # a parse error surfaces as SystemError from the constructor
        cause = error.__cause__ if isinstance(error, SystemError) and error.__cause__ is not None else error
        raise ConfigError(f"cannot parse {what} {path!r} as an OpenCV FileStorage file: {cause}") from error
    if not storage.isOpened():
        raise ConfigError(f"cannot open {what} {path!r}")
    return storage


def _node_matrix(storage: Any, name: str) -> np.ndarray | None:
    node = storage.getNode(name)
    if node.empty() or node.isNone():
        return None
    matrix = node.mat()
    return None if matrix is None else np.asarray(matrix)


def _node_int(storage: Any, name: str, path: str) -> int:
    node = storage.getNode(name)
    if node.empty() or node.isNone() or not (node.isInt() or node.isReal()):
        raise ConfigError(f"mean file {path!r}: missing integer node {name!r}")
    value = node.real()
    if value != int(value):
        raise ConfigError(f"mean file {path!r}: node {name!r} must be an integer, got {value}")
    return int(value)


# --- transforms -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ImageTransform:
    """Base class of the image transforms. ``kind`` names the transform (CNTK's ``type``)."""

    kind: ClassVar[str] = ""

    @property
    def is_random(self) -> bool:
        """Whether applying the transform may draw random numbers."""
        return False


@dataclass(frozen=True)
class Crop(ImageTransform):
    """Crop (spec §4.1). Sizes are ``(width, height)``; ratios and the aspect ratio are ``(min, max)``.

    ``crop_size`` with both values > 0 fixes the size (the ratios are then ignored). ``hflip=None`` means the CNTK
    default: on for ``randomside``/``randomarea``, off otherwise (``multiview10`` flips views 5-9 itself).
    """

    crop_type: str = "center"
    crop_size: Size = (0, 0)
    side_ratio: Ratio = (0.0, 0.0)
    area_ratio: Ratio = (0.0, 0.0)
    aspect_ratio: Ratio = (1.0, 1.0)
    jitter_type: str = "none"
    hflip: bool | None = None
    seed: int = 0

    kind: ClassVar[str] = "crop"

    def __post_init__(self) -> None:
        crop_type = _choice("crop_type", self.crop_type, CROP_TYPES, any_case=True)
        width, height = _pair("crop_size", self.crop_size, _integer)
        if width < 0 or height < 0:
            raise ConfigError(f"crop_size must be >= 0, got {self.crop_size!r}")
        side = _ratio_range("side_ratio", self.side_ratio)
        area = _ratio_range("area_ratio", self.area_ratio)
        if side[1] > 0 and area[1] > 0:
            raise ConfigError("crop: side_ratio and area_ratio cannot both be set")
        aspect = _pair("aspect_ratio", self.aspect_ratio, _real)
        if not aspect[0] > 0:
            raise ConfigError(f"aspect_ratio minimum must be > 0, got {self.aspect_ratio!r}")
        if aspect[0] > aspect[1]:
            raise ConfigError(f"aspect_ratio minimum must be <= maximum, got {self.aspect_ratio!r}")
        jitter = _choice("jitter_type", self.jitter_type, JITTER_TYPES, any_case=True)
        hflip = self.hflip
        if hflip is None:
            hflip = crop_type in RANDOM_CROP_TYPES
        elif not isinstance(hflip, (bool, np.bool_)):
            raise ConfigError(f"hflip must be True, False or None, got {hflip!r}")
        elif hflip and crop_type == "multiview10":
            raise ConfigError("hflip cannot be used with crop_type='multiview10' (views 5-9 are the flipped crops)")
        _set(self, "crop_type", crop_type)
        _set(self, "crop_size", (width, height))
        _set(self, "side_ratio", side)
        _set(self, "area_ratio", area)
        _set(self, "aspect_ratio", aspect)
        _set(self, "jitter_type", jitter)
        _set(self, "hflip", bool(hflip))
        _set(self, "seed", _integer("seed", self.seed))

    @property
    def fixed_size(self) -> tuple[int, int] | None:
        """``(width, height)`` when ``crop_size`` fixes the crop size."""
        width, height = self.crop_size  # type: ignore[misc]
        return (width, height) if width > 0 and height > 0 else None

    @property
    def is_random(self) -> bool:
        if self.crop_type in RANDOM_CROP_TYPES or self.hflip:
            return True
        if self.fixed_size is not None:
            return False
        aspect: tuple[float, float] = self.aspect_ratio  # type: ignore[assignment]
        ratio: tuple[float, float] = max(self.side_ratio, self.area_ratio)  # type: ignore[assignment]
        if self.jitter_type == "none":
            return aspect[0] != 1  # only the width/height swap of a non-square aspect ratio is random
        return aspect != (1.0, 1.0) or ratio[0] != ratio[1]


@dataclass(frozen=True)
class Scale(ImageTransform):
    """Scale (spec §4.2) to ``width`` x ``height``; ``channels`` fixes the output shape (it converts no colour)."""

    width: int
    height: int
    channels: int = 3
    interpolations: str = "linear"
    scale_mode: str = "fill"
    pad_value: float = -1

    kind: ClassVar[str] = "scale"

    def __post_init__(self) -> None:
        width = _integer("width", self.width)
        height = _integer("height", self.height)
        channels = _integer("channels", self.channels)
        if width <= 0 or height <= 0 or channels <= 0:
            raise ConfigError(
                f"scale: width, height and channels must be > 0 (width*height*channels > 0), "
                f"got {self.width}x{self.height}x{self.channels}"
            )
        interpolation = _choice("interpolations", self.interpolations, INTERPOLATIONS, any_case=True)
        mode = _choice("scale_mode", self.scale_mode, SCALE_MODES, any_case=False)
        pad_value = self.pad_value
        if isinstance(pad_value, (bool, np.bool_)) or not isinstance(pad_value, (int, float, np.integer, np.floating)):
            raise ConfigError(f"pad_value must be a number, got {pad_value!r}")
        if not math.isfinite(pad_value) or (pad_value != -1 and pad_value < 0):
            raise ConfigError(f"pad_value must be -1 (replicate the border) or >= 0, got {pad_value!r}")
        _set(self, "width", width)
        _set(self, "height", height)
        _set(self, "channels", channels)
        _set(self, "interpolations", interpolation)
        _set(self, "scale_mode", mode)
        _set(self, "pad_value", int(pad_value) if float(pad_value).is_integer() else float(pad_value))


@dataclass(frozen=True)
class Mean(ImageTransform):
    """Mean subtraction (spec §4.3). ``image`` is the mean image, ``(rows, cols, channels)`` float32, or None (no-op).

    The file is read when the transform is made; pickling carries the mean image, not the file name only.
    """

    filename: str = ""
    image: np.ndarray | None = field(default=None, compare=False, repr=False)

    kind: ClassVar[str] = "mean"

    def __post_init__(self) -> None:
        filename = self.filename
        if filename is None:
            filename = ""
        if not isinstance(filename, (str, os.PathLike)):
            raise ConfigError(f"mean filename must be a path, got {filename!r}")
        filename = os.fspath(filename)
        _set(self, "filename", filename)
        if self.image is not None:  # given directly (or unpickled): rows x cols x channels
            image = np.asarray(self.image, dtype=np.float32)
            if image.ndim != 3:
                raise ConfigError(f"mean image must be rows x cols x channels, got shape {image.shape}")
            _set(self, "image", image)
            return
        if not filename:
            return
        storage = _read_file_storage(filename, "mean file")
        try:
            matrix = _node_matrix(storage, "MeanImg")
            if matrix is None:
                raise ConfigError(f"mean file {filename!r}: missing matrix node 'MeanImg'")
            channels = _node_int(storage, "Channel", filename)
            rows = _node_int(storage, "Row", filename)
            cols = _node_int(storage, "Col", filename)
        finally:
            storage.release()
        if channels <= 0 or rows <= 0 or cols <= 0 or channels * rows * cols != matrix.size:
            raise ConfigError(
                f"mean file {filename!r}: Channel*Row*Col = {channels}*{rows}*{cols} does not match the "
                f"{matrix.size} elements of MeanImg"
            )
        image = np.ascontiguousarray(matrix, dtype=np.float32).reshape(rows, cols, channels)
        image.setflags(write=False)
        _set(self, "image", image)


@dataclass(frozen=True)
class Color(ImageTransform):
    """Colour jitter (spec §4.4): brightness, contrast and saturation radii, each in [0, 1]."""

    brightness_radius: float = 0.0
    contrast_radius: float = 0.0
    saturation_radius: float = 0.0
    seed: int = 0

    kind: ClassVar[str] = "color"

    def __post_init__(self) -> None:
        _set(self, "brightness_radius", _radius("brightness_radius", self.brightness_radius))
        _set(self, "contrast_radius", _radius("contrast_radius", self.contrast_radius))
        _set(self, "saturation_radius", _radius("saturation_radius", self.saturation_radius))
        _set(self, "seed", _integer("seed", self.seed))

    @property
    def is_random(self) -> bool:
        return self.brightness_radius > 0 or self.contrast_radius > 0 or self.saturation_radius > 0


@dataclass(frozen=True)
class Intensity(ImageTransform):
    """AlexNet PCA lighting noise (spec §4.5). ``eigval`` (3,) and ``eigvec`` (3, 3) come from ``intensity_file``.

    No file, a file without ``EigVal``/``EigVec``, or ``intensity_stddev == 0`` make the transform a no-op.
    """

    intensity_stddev: float = 0.0
    intensity_file: str | None = None
    seed: int = 0
    eigval: np.ndarray | None = field(default=None, compare=False, repr=False)
    eigvec: np.ndarray | None = field(default=None, compare=False, repr=False)

    kind: ClassVar[str] = "intensity"

    def __post_init__(self) -> None:
        stddev = _real("intensity_stddev", self.intensity_stddev)
        if stddev < 0:
            raise ConfigError(f"intensity_stddev must be >= 0, got {self.intensity_stddev!r}")
        _set(self, "intensity_stddev", stddev)
        _set(self, "seed", _integer("seed", self.seed))
        filename = self.intensity_file
        if filename is not None and not isinstance(filename, (str, os.PathLike)):
            raise ConfigError(f"intensity_file must be a path, got {filename!r}")
        filename = os.fspath(filename) if filename else None
        _set(self, "intensity_file", filename)
        if filename is None or self.eigval is not None:
            return
        storage = _read_file_storage(filename, "intensity file")
        try:
            eigval = _node_matrix(storage, "EigVal")
            eigvec = _node_matrix(storage, "EigVec")
        finally:
            storage.release()
        if eigval is None or eigvec is None:
            return  # CNTK: without both matrices the transform does nothing
        if eigval.size != 3 or eigvec.shape != (3, 3):
            raise ConfigError(
                f"intensity file {filename!r}: EigVal must be 1x3 and EigVec 3x3, "
                f"got {'x'.join(map(str, eigval.shape))} and {'x'.join(map(str, eigvec.shape))}"
            )
        values = np.ascontiguousarray(eigval, dtype=np.float64).reshape(3)
        vectors = np.ascontiguousarray(eigvec, dtype=np.float64)
        values.setflags(write=False)
        vectors.setflags(write=False)
        _set(self, "eigval", values)
        _set(self, "eigvec", vectors)

    @property
    def is_random(self) -> bool:
        return self.intensity_stddev > 0 and self.eigval is not None


@dataclass(frozen=True)
class Normalize(ImageTransform):
    """Normalisation (cntkio's, not CNTK's): ``(p / max_value - mean[c]) / std[c]`` for every pixel ``p`` of channel
    ``c``. ``mean`` and ``std`` are 3-tuples in the order of the output channels (``channel_order``), or 1-tuples
    (grayscale, or the same for every channel); ``max_value`` > 0. Applied in the native per-pixel pass."""

    mean: float | tuple[float, ...] = 0.0
    std: float | tuple[float, ...] = 1.0
    max_value: float = 255.0

    kind: ClassVar[str] = "normalize"

    def __post_init__(self) -> None:
        mean = _per_channel("normalize mean", self.mean)
        std = _per_channel("normalize std", self.std)
        if not all(value >= _SMALLEST_DIVISOR for value in std):
            raise ConfigError(f"normalize std must be > 0 (at least {_SMALLEST_DIVISOR:g}), got {self.std!r}")
        if len(mean) != len(std) and 1 not in (len(mean), len(std)):
            raise ConfigError(f"normalize mean {self.mean!r} and std {self.std!r} give different channel counts")
        max_value = _real("normalize max_value", self.max_value)
        if not max_value >= _SMALLEST_DIVISOR:
            raise ConfigError(
                f"normalize max_value must be > 0 (at least {_SMALLEST_DIVISOR:g}), got {self.max_value!r}"
            )
        _set(self, "mean", mean)
        _set(self, "std", std)
        _set(self, "max_value", max_value)

    @property
    def channels(self) -> int:
        """The channels the parameters name: 3, or 1 (the same for every channel)."""
        return max(len(self.mean), len(self.std))  # type: ignore[arg-type]

    def parameters(self, channels: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """``(mean, std)`` for each of ``channels`` output channels."""
        mean: tuple[float, ...] = self.mean  # type: ignore[assignment]
        std: tuple[float, ...] = self.std  # type: ignore[assignment]
        return (mean * channels if len(mean) == 1 else mean), (std * channels if len(std) == 1 else std)


_SMALLEST_DIVISOR = 1e-30  # (a float32 the kernel divides by: not 0 once narrowed)


def _per_channel(name: str, value: object) -> tuple[float, ...]:
    """A number, or a sequence of 1 or 3 numbers, as a tuple of finite floats."""
    values = list(value) if isinstance(value, (tuple, list, np.ndarray)) else [value]
    if len(values) not in (1, 3):
        raise ConfigError(f"{name} must be a number or a sequence of 1 or 3 numbers (one per channel), got {value!r}")
    numbers = tuple(_real(name, item) for item in values)
    if any(abs(number) > 1e30 for number in numbers):
        raise ConfigError(f"{name} values must be at most 1e30 in magnitude, got {value!r}")
    return numbers


# --- the cntk.io.transforms functions -------------------------------------------------------------------------------


def crop(
    crop_type: str = "center",
    crop_size: Size = 0,
    side_ratio: Ratio = 0.0,
    area_ratio: Ratio = 0.0,
    aspect_ratio: Ratio = 1.0,
    jitter_type: str = "none",
    *,
    hflip: bool | None = None,
    seed: int = 0,
) -> Crop:
    """Crop transform (``cntk.io.transforms.crop``).

    Args:
        crop_type: ``'center'``, ``'randomside'``, ``'randomarea'`` or ``'multiview10'`` (any case).
        crop_size: an int or ``(width, height)``; both > 0 fix the crop size and the ratios are ignored.
        side_ratio: crop side as a fraction of the shorter image side, a number or ``(min, max)`` in (0, 1].
        area_ratio: crop area as a fraction of the image area, likewise; not together with ``side_ratio``.
        aspect_ratio: a number or ``(min, max)``, min > 0.
        jitter_type: ``'none'`` (use the minimum ratios) or ``'uniratio'`` (uniform in [min, max]).
        hflip: random horizontal flip; None means on for the random crop types.
        seed: this transform's seed (combined with the per-image random draws).
    """
    return Crop(crop_type, crop_size, side_ratio, area_ratio, aspect_ratio, jitter_type, hflip, seed)


def scale(
    width: int,
    height: int,
    channels: int = 3,
    interpolations: str = "linear",
    scale_mode: str = "fill",
    pad_value: float = -1,
) -> Scale:
    """Scale transform (``cntk.io.transforms.scale``).

    Args:
        width, height, channels: the output shape (``channels`` must match the decoded images).
        interpolations: ``'nearest'``, ``'linear'``, ``'cubic'`` or ``'lanczos'`` (any case).
        scale_mode: ``'fill'`` (stretch), ``'crop'`` (fit the shorter side, centre crop) or ``'pad'`` (fit the longer
            side, centre and pad); lower case only.
        pad_value: -1 replicates the border; a value >= 0 pads with that constant.
    """
    return Scale(width, height, channels, interpolations, scale_mode, pad_value)


def mean(filename: str) -> Mean:
    """Mean subtraction (``cntk.io.transforms.mean``) from an OpenCV FileStorage file (``MeanImg``, ``Channel``,
    ``Row``, ``Col``). An empty file name gives a transform that does nothing."""
    return Mean(filename)


def color(
    brightness_radius: float = 0.0,
    contrast_radius: float = 0.0,
    saturation_radius: float = 0.0,
    *,
    seed: int = 0,
) -> Color:
    """Colour jitter (``cntk.io.transforms.color``); each radius is in [0, 1]."""
    return Color(brightness_radius, contrast_radius, saturation_radius, seed)


def intensity(intensity_stddev: float = 0.0, intensity_file: str | None = None, *, seed: int = 0) -> Intensity:
    """PCA intensity noise (CNTK's ``Intensity`` transform, not exposed by ``cntk.io.transforms``).

    Args:
        intensity_stddev: standard deviation of the eigenvalue weights; 0 disables the transform.
        intensity_file: OpenCV XML/YAML with ``EigVal`` (1x3) and ``EigVec`` (3x3) in RGB order.
        seed: this transform's seed.
    """
    return Intensity(intensity_stddev, intensity_file, seed)


def normalize(
    mean: float | Sequence[float] = 0.0, std: float | Sequence[float] = 1.0, *, max_value: float = 255.0
) -> Normalize:
    """Normalisation of the pixel values (cntkio's; CNTK had only ``mean``): every pixel ``p`` of output channel ``c``
    becomes ``(p / max_value - mean[c]) / std[c]``, in the native per-pixel pass.

    ``normalize()`` scales 0..255 to [0, 1] (torchvision's ``ToTensor``); ``normalize(mean, std)`` then standardises
    as torchvision's ``Normalize`` does, with the mean and std of [0, 1] pixels — the same float32 values, e.g.
    ``normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))`` with ``channel_order="rgb"`` for ImageNet models.
    ``max_value=1`` standardises 0..255 values directly (Caffe-style means such as ``(123.68, 116.78, 103.94)``).
    It comes after the colour, mean and intensity transforms (which work on 0..255 values) and needs a float output
    ``dtype``.

    Args:
        mean, std: a number (every channel) or one per output channel, in the output's order (``channel_order``);
            ``std`` > 0.
        max_value: what pixels are divided by first (> 0; 1 divides by nothing).
    """
    return Normalize(
        tuple(mean) if isinstance(mean, Sequence) else mean, tuple(std) if isinstance(std, Sequence) else std, max_value
    )
