"""CNTK 2.0's spellings of the reader API, translated here (the edge; the core never imports it), each with a
``DeprecationWarning`` naming today's spelling.

* Renamed ``MinibatchSource`` keywords (``epoch_size``, ``distributed_after``, ``randomization_window`` with
  ``sample_based_randomization_window``) and ``next_minibatch``'s ``minibatch_size_in_sequences``:
  :func:`source_keywords`, :func:`sequence_limit`.
* Streams mapped after construction (``CTFDeserializer(path).map_input(...)``,
  ``ImageDeserializer(path).map_features(...).map_labels(...)``, made by the public names: ``faces.py``):
  :class:`CTFStreamMapping` and :class:`ImageStreamMapping` hold the mapping and build the real deserializer — which
  indexes the file — when a ``MinibatchSource`` first uses them (:func:`build_deferred`); the streams are final from
  then on.
* The static transform helpers of CNTK 2.0's ``ImageDeserializer`` (:func:`crop`, :func:`scale`, :func:`mean`,
  :func:`color`), with their 2.0 signatures.

The core never imports this module: the edge (``cntkio``, ``cntkio.io`` and ``compat/``) translates before calling
it.
"""

from __future__ import annotations

import abc
import math
import numbers
import warnings
from collections.abc import Callable
from typing import Any, NoReturn

from cntkio._src.common.errors import ConfigError
from cntkio._src.common.sentinels import DEFAULT_RANDOMIZATION_WINDOW_IN_CHUNKS, FULL_DATA_SWEEP, INFINITELY_REPEAT
from cntkio._src.common.streams import Record, StreamDef
from cntkio._src.formats import image_transforms as transforms
from cntkio._src.formats.protocol import Deserializer, DeserializerGroup

MAX_UI64 = INFINITELY_REPEAT  # CNTK 2.0 beta's "no limit"
_SOURCE_KEYWORDS = ("epoch_size", "distributed_after", "randomization_window", "sample_based_randomization_window")


def deprecated(old: str, new: str, *, stacklevel: int = 3) -> None:
    """Warns that CNTK's ``old`` spelling is deprecated in favour of ``new``."""
    warnings.warn(
        f"{old} is deprecated (a CNTK spelling kept for old code); use {new}", DeprecationWarning, stacklevel=stacklevel
    )


# --- MinibatchSource and next_minibatch keywords ---------------------------------------------------------------------


def max_samples_of_epoch_size(epoch_size: Any) -> Any:
    """CNTK 2.0's ``epoch_size`` as ``max_samples``: the samples the source delivers before it ends; 0 meant one
    sweep (``FULL_DATA_SWEEP``); ``MAX_UI64``/``INFINITELY_REPEAT``/``None``: no end. Other sentinels keep their
    meaning."""
    if epoch_size is None or epoch_size == MAX_UI64 or (isinstance(epoch_size, float) and math.isinf(epoch_size)):
        return MAX_UI64
    if isinstance(epoch_size, bool) or not isinstance(epoch_size, numbers.Integral) or epoch_size < 0:
        raise ConfigError(f"epoch_size must be a number of samples >= 0, got {epoch_size!r}")
    return FULL_DATA_SWEEP if epoch_size == 0 else int(epoch_size)


def window_keywords(window: Any, sample_based: bool) -> tuple[int, int]:
    """CNTK 2.0's ``randomization_window`` (chunks, or samples with ``sample_based_randomization_window``) as
    ``(randomization_window_in_chunks, randomization_window_in_samples)``."""
    window = DEFAULT_RANDOMIZATION_WINDOW_IN_CHUNKS if window is None else window
    if isinstance(window, bool) or not isinstance(window, numbers.Integral) or window < 0:
        raise ConfigError(f"randomization_window must be an integer >= 0, got {window!r}")
    return (0, int(window)) if sample_based else (int(window), 0)


def source_keywords(
    given: dict[str, Any], max_samples: Any, window_in_chunks: int, window_in_samples: int
) -> tuple[Any, int, int]:
    """Translates the CNTK 2.0 keywords of ``MinibatchSource`` in ``given`` (warning for each) into
    ``(max_samples, randomization_window_in_chunks, randomization_window_in_samples)``; an unknown keyword is a
    ``TypeError``, as for any function."""
    unknown = sorted(set(given) - set(_SOURCE_KEYWORDS))
    if unknown:
        raise TypeError(f"MinibatchSource() got an unexpected keyword argument {unknown[0]!r}")
    if "epoch_size" in given:
        deprecated("MinibatchSource(epoch_size=...)", "max_samples=... (0: max_samples=FULL_DATA_SWEEP)", stacklevel=4)
        if max_samples is not None and max_samples != MAX_UI64:
            raise ConfigError("epoch_size is the old name of max_samples: give one of them")
        max_samples = max_samples_of_epoch_size(given["epoch_size"])
    if "distributed_after" in given:
        deprecated(
            "MinibatchSource(distributed_after=...)",
            "next_minibatch(..., num_data_partitions=N, partition_index=i) from the first minibatch "
            "(distributed_after is ignored)",
            stacklevel=4,
        )
    if "randomization_window" in given or "sample_based_randomization_window" in given:
        sample_based = bool(given.get("sample_based_randomization_window", False))
        new = "randomization_window_in_samples" if sample_based else "randomization_window_in_chunks"
        deprecated("MinibatchSource(randomization_window=...)", new, stacklevel=4)
        if window_in_samples or window_in_chunks != DEFAULT_RANDOMIZATION_WINDOW_IN_CHUNKS:
            raise ConfigError(f"randomization_window is the old name of {new}: give one of them")
        window_in_chunks, window_in_samples = window_keywords(given.get("randomization_window"), sample_based)
    return max_samples, window_in_chunks, window_in_samples


def sequence_limit(samples: int | None, sequences: int | None) -> tuple[int, int]:
    """``next_minibatch``'s CNTK 2.0 beta form (``minibatch_size_in_samples`` and/or ``minibatch_size_in_sequences``,
    0 or None meaning unspecified) as ``(samples, sequences)``; ``samples`` 0 means no sample limit."""
    if sequences is None:
        raise TypeError("next_minibatch() missing its argument minibatch_size_in_samples")
    samples, sequences = int(samples or 0), int(sequences)
    if samples < 0 or sequences < 0 or not (samples or sequences):
        raise ValueError(
            "give minibatch_size_in_samples or minibatch_size_in_sequences (or both), > 0; "
            f"got {samples} and {sequences}"
        )
    deprecated("next_minibatch(minibatch_size_in_sequences=...)", "minibatch_size_in_samples", stacklevel=4)
    return samples, sequences


# --- streams mapped after construction -------------------------------------------------------------------------------


def node_name(node: Any) -> str:
    """The stream name of a CNTK input node or a string: ``node.name`` (a method in CNTK 2.0 beta)."""
    name = node if isinstance(node, str) else getattr(node, "name", None)
    if callable(name):
        name = name()
    if not isinstance(name, str) or not name:
        raise ConfigError(f"a stream needs a name: give a string, or a node with a name (got {node!r})")
    return name


class DeferredDeserializer(abc.ABC):
    """A deserializer whose streams are mapped after construction (CNTK 2.0's fluent style). Nothing is read until
    :meth:`build` (called by ``MinibatchSource``) makes the real deserializer with the streams mapped so far;
    from then on the mapping is final and :meth:`build` returns that same deserializer."""

    _how_to_map = "map a stream"  # (what the error of a deserializer without streams suggests)

    def __init__(self, factory: Callable[..., Deserializer], filename: Any, options: dict[str, Any]):
        self._factory, self.filename, self._options = factory, filename, options
        self._built: Deserializer | None = None

    @abc.abstractmethod
    def _stream_defs(self) -> Record:
        """The streams mapped so far, as ``StreamDefs``."""

    def _check_open(self, what: str) -> None:
        if self._built is not None:
            raise ConfigError(
                f"{self.filename}: {what} after a MinibatchSource used this deserializer (its streams are final "
                "then); map every stream first"
            )

    def build(self) -> Deserializer:
        """The deserializer of the mapped streams (made, and its file indexed, on the first call)."""
        if self._built is None:
            streams = self._stream_defs()
            if not streams:
                raise ConfigError(f"{self.filename}: no stream was mapped; {self._how_to_map} before reading")
            self._built = self._factory(self.filename, streams, **self._options)
        return self._built

    def as_deserializer(self) -> Deserializer:
        """:meth:`build`: a reader takes a mapping as the deserializer it builds (``cntkio.MinibatchSource`` too, which
        knows nothing of CNTK 2.0: the mapping is a ``ReadsAsDeserializer``)."""
        return self.build()

    def __repr__(self) -> str:
        state = "built" if self._built is not None else "streams not final"
        return f"{type(self).__name__}({self.filename!r}, {dict(self._stream_defs())!r}, {state})"


class CTFStreamMapping(DeferredDeserializer):
    """What ``CTFDeserializer(path)`` without streams gives: CNTK 2.0's ``map_input`` adds the streams.

    Example::

        reader = CTFDeserializer("train.ctf").map_input("features", dim=3).map_input("labels", 5, "sparse", "y")
        source = MinibatchSource(reader)   # the file is indexed here; no stream can be added after this
    """

    _how_to_map = "call map_input(name, dim, format, alias)"

    def __init__(self, factory: Callable[..., Deserializer], filename: Any, options: dict[str, Any]):
        super().__init__(factory, filename, options)
        self._streams: dict[str, StreamDef] = {}

    def map_input(self, node: Any, dim: int, format: str = "dense", alias: str | None = None) -> CTFStreamMapping:
        """Maps the input ``alias`` of the file (default: the node's name) to a stream named after ``node`` (a
        string or an object with a ``name``), of dimension ``dim``, ``'dense'`` or ``'sparse'``. Returns self."""
        self._check_open("map_input")
        deprecated("CTFDeserializer(path).map_input(...)", "CTFDeserializer(path, StreamDefs(name=StreamDef(...)))")
        name = node_name(node)
        kind = str(format).lower()
        if kind not in ("dense", "sparse"):
            raise ConfigError(f"map_input: format must be 'dense' or 'sparse', got {format!r}")
        self._streams[name] = StreamDef(field=alias or name, shape=dim, is_sparse=kind == "sparse")
        return self

    def _stream_defs(self) -> Record:
        return Record(self._streams)


class ImageStreamMapping(DeferredDeserializer):
    """What ``ImageDeserializer(map_file)`` without streams gives: CNTK 2.0's ``map_features``, ``map_labels`` and
    ``ignore_labels`` name the image and label streams.

    Example::

        images = ImageDeserializer("map.txt")
        images.map_features("features", [ImageDeserializer.scale(width=32, height=32, channels=3)])
        images.map_labels("labels", num_classes=10)          # or images.ignore_labels()
        source = MinibatchSource(images)
    """

    _how_to_map = "call map_features(name, transforms)"

    def __init__(self, factory: Callable[..., Deserializer], filename: Any, options: dict[str, Any]):
        super().__init__(factory, filename, options)
        self._features: tuple[str, list[Any]] | None = None
        self._labels: tuple[str, int] | None = None

    def map_features(self, node: Any, transforms: Any = None) -> ImageStreamMapping:
        """Names the image stream after ``node`` and sets its transforms (a list, one transform, or None)."""
        self._check_open("map_features")
        deprecated("ImageDeserializer(path).map_features(...)", "ImageDeserializer(path, StreamDefs(...))")
        listed = list(transforms) if isinstance(transforms, (list, tuple)) else [transforms] if transforms else []
        self._features = (node_name(node), listed)
        return self

    def map_labels(self, node: Any, num_classes: int) -> ImageStreamMapping:
        """Names the (one-hot, sparse) label stream after ``node``, with ``num_classes`` classes."""
        self._check_open("map_labels")
        deprecated("ImageDeserializer(path).map_labels(...)", "ImageDeserializer(path, StreamDefs(...))")
        self._labels = (node_name(node), num_classes)
        return self

    def ignore_labels(self) -> ImageStreamMapping:
        """No label stream: the map file's labels are not read."""
        self._check_open("ignore_labels")
        deprecated("ImageDeserializer(path).ignore_labels()", "ImageDeserializer(path, StreamDefs(...)) without labels")
        self._labels = None
        return self

    def _stream_defs(self) -> Record:
        if self._features is None:
            return Record()
        name, listed = self._features
        streams = Record({name: StreamDef(field="image", transforms=listed)})
        if self._labels is not None:
            label, classes = self._labels
            if label == name:
                raise ConfigError(f"{self.filename}: the image and label streams are both named {name!r}")
            streams[label] = StreamDef(field="label", shape=classes)
        return streams


def build_deferred(deserializers: Any) -> Any:
    """``MinibatchSource``'s deserializers with every :class:`DeferredDeserializer` built."""
    if isinstance(deserializers, DeferredDeserializer):
        return deserializers.build()
    if isinstance(deserializers, (list, tuple)) and not isinstance(deserializers, DeserializerGroup):
        return [d.build() if isinstance(d, DeferredDeserializer) else d for d in deserializers]
    return deserializers


def LatticeDeserializer(*args: Any, **kwargs: Any) -> NoReturn:  # CNTK's name
    """Not implemented: CNTK's lattice reader (sequence training of speech models) has no cntkio equivalent."""
    raise NotImplementedError(
        "cntkio does not implement LatticeDeserializer (CNTK's lattice reader for sequence training); "
        "HTKFeatureDeserializer and HTKMLFDeserializer read the features and labels"
    )


# --- CNTK 2.0's ImageDeserializer.crop/scale/mean/color --------------------------------------------------------------

_LATER_CROP_KEYWORDS = ("crop_size", "side_ratio", "area_ratio", "aspect_ratio")


def _ratio(value: Any) -> Any:
    """A ratio as 2.0 wrote it: a number, ``(min, max)`` or the text ``'min:max'`` (either order)."""
    if isinstance(value, str):
        parts = [float(part) for part in value.split(":")]
        return (min(parts), max(parts)) if len(parts) == 2 else parts[0]
    return value


def _size(value: Any) -> Any:
    """A crop size as 2.0 wrote it: a number, ``(width, height)`` or the text ``'width:height'``."""
    if isinstance(value, str):
        parts = [int(part) for part in value.split(":")]
        return tuple(parts) if len(parts) == 2 else parts[0]
    return value


def crop(crop_type: str = "center", ratio: Any = None, jitter_type: str | None = None, **later: Any) -> transforms.Crop:
    """``ImageDeserializer.crop`` of CNTK 2.0: ``crop(crop_type='center', ratio=1.0, jitter_type='uniRatio')``,
    ``crop_type`` ``'center'`` or ``'random'`` (today's ``'randomside'``), ``ratio`` the crop side over the shorter
    image side (a number, ``(min, max)`` or ``'min:max'``); or the later keywords of
    :func:`cntkio.transforms.crop` (``crop_size``, ``side_ratio``, ...), which it then calls.
    ``jitter_type`` ``'UniLength'``/``'UniArea'`` were dropped by CNTK 2.0 and are errors."""
    deprecated("ImageDeserializer.crop", "cntkio.transforms.crop (crop_type='randomside', side_ratio=...)")
    unknown = sorted(set(later) - set(_LATER_CROP_KEYWORDS))
    if unknown:
        raise TypeError(f"crop() got an unexpected keyword argument {unknown[0]!r}")
    kind = "randomside" if str(crop_type).lower() == "random" else crop_type
    jitter = str(jitter_type if jitter_type is not None else "none" if later else "uniratio").lower()
    if jitter not in transforms.JITTER_TYPES:
        raise ConfigError(f"crop: jitter_type {jitter_type!r} is not supported (use 'none' or 'uniRatio')")
    if later:
        if ratio is not None:
            raise ConfigError("crop: give ratio (CNTK 2.0 beta) or side_ratio, not both")
        given = {key: _size(value) if key == "crop_size" else _ratio(value) for key, value in later.items()}
        return transforms.crop(kind, jitter_type=jitter, **given)
    return transforms.crop(kind, side_ratio=_ratio(1.0 if ratio is None else ratio), jitter_type=jitter)


def scale(
    width: int,
    height: int,
    channels: int,
    interpolations: str = "linear",
    scale_mode: str = "fill",
    pad_value: float = -1,
    **camel_case: Any,
) -> transforms.Scale:
    """``ImageDeserializer.scale`` of CNTK 2.0 (:func:`cntkio.transforms.scale`); the ``scaleMode`` and
    ``padValue`` spellings of CNTK's samples are accepted."""
    deprecated("ImageDeserializer.scale", "cntkio.transforms.scale")
    unknown = sorted(set(camel_case) - {"scaleMode", "padValue"})
    if unknown:
        raise TypeError(f"scale() got an unexpected keyword argument {unknown[0]!r}")
    scale_mode = camel_case.get("scaleMode", scale_mode)
    pad_value = camel_case.get("padValue", pad_value)
    return transforms.scale(width, height, channels, interpolations, scale_mode, pad_value)


def mean(filename: str) -> transforms.Mean:
    """``ImageDeserializer.mean`` of CNTK 2.0 (:func:`cntkio.transforms.mean`)."""
    deprecated("ImageDeserializer.mean", "cntkio.transforms.mean")
    return transforms.mean(filename)


def color(
    brightness_radius: float = 0.0, contrast_radius: float = 0.0, saturation_radius: float = 0.0
) -> transforms.Color:
    """``ImageDeserializer.color`` of CNTK 2.0 (:func:`cntkio.transforms.color`)."""
    deprecated("ImageDeserializer.color", "cntkio.transforms.color")
    return transforms.color(brightness_radius, contrast_radius, saturation_radius)
