"""Builds cntkio deserializers and ``MinibatchSource`` options from a reader section, in either form: the legacy
``readerType = ...`` section or the composite ``deserializers = ( ... )`` one (spec/brainscript-reader-config.md §2).

Reader-level options are looked up in the reader section and then in its parents, as CNTK's parameter lookup did
(a top-level ``frameMode=true`` or ``maxErrors=4`` applies to the reader); structural keys (``file``, ``input``,
``dim`` …) only where they are written.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cntkio._src.common.errors import ConfigError
from cntkio._src.common.sentinels import FULL_DATA_SWEEP
from cntkio._src.common.streams import StreamDef, StreamDefs
from cntkio._src.config import keys as K
from cntkio._src.config.syntax import Section, Value
from cntkio._src.formats import image_transforms as T
from cntkio._src.formats import registry, remote
from cntkio._src.formats.cbf import CBFDeserializer
from cntkio._src.formats.ctf import DEFAULT_CHUNK_SIZE_IN_BYTES, CTFDeserializer
from cntkio._src.formats.htk_features import HTKFeatureDeserializer
from cntkio._src.formats.htk_labels import HTKMLFDeserializer
from cntkio._src.formats.image import Base64ImageDeserializer, ImageDeserializer
from cntkio._src.formats.mlf import read_mlf_file_list
from cntkio._src.formats.protocol import Deserializer
from cntkio._src.formats.registry import Format

WINDOW_BYTES = 4 * 1024**3  # CNTK's chunk-based default window: 4 GiB of chunks
WHOLE_CORPUS = 2**62  # "the whole data set" as a window in samples


@dataclass
class ReaderPlan:
    """What a reader section describes: the deserializers (primary first) and the ``MinibatchSource`` options."""

    deserializers: list[Deserializer] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)

    def close(self) -> None:
        for deserializer in self.deserializers:
            deserializer.close()


@dataclass(frozen=True)
class Context:
    """Where relative paths resolve, and the options every deserializer of the reader inherits."""

    base_dir: str
    precision: str
    trace_level: int
    compat: bool = False  # CTF parsing with CNTK's quirks, and CNTK's randomized order


def build_reader(reader: Section, base_dir: str, *, compat: bool = False) -> ReaderPlan:
    """The deserializers and source options of ``reader`` (``compat``: read as CNTK did, its quirks included)."""
    plan = ReaderPlan()
    try:
        _build(reader, Context(base_dir, _precision(reader), _int(reader.find("traceLevel"), 1), compat), plan)
    except BaseException:
        plan.close()
        raise
    return plan


def _build(reader: Section, context: Context, plan: ReaderPlan) -> None:
    composite = "deserializers" in reader
    reader_type = "CompositeDataReader" if composite else _reader_type(reader)
    if composite:
        K.check_keys(reader, K.COMPOSITE_READER, "the reader section")
        for element in reader["deserializers"].elements():
            plan.deserializers += _deserializer(element, context)
        if not plan.deserializers:
            raise ConfigError(f"{reader['deserializers'].where}: 'deserializers' lists no deserializer")
    else:
        plan.deserializers += LEGACY_READERS[reader_type](reader, context)
    plan.options.update(_source_options(reader, reader_type, plan.deserializers))
    if context.compat:
        plan.options["compat"] = True


def _reader_type(reader: Section) -> str:
    value = reader.get("readerType")
    if value is None:
        raise ConfigError(
            f"{reader.where}: section '{reader.name}' has neither 'readerType' nor 'deserializers': is it a reader "
            "section?"
        )
    return _choose(value, list(LEGACY_READERS), "reader type", NOT_SUPPORTED_READERS)


def _choose(value: Value, names: list[str], what: str, unsupported: dict[str, str], *, any_case: bool = True) -> str:
    text = value.text
    for name in names:
        if text == name or (any_case and text.lower() == name.lower()):
            return name
    if text in unsupported:
        raise value.error(f"{what} '{text}' is not supported by cntkio: {unsupported[text]}")
    close = difflib.get_close_matches(text, names, n=1, cutoff=0.6)
    hint = f"; did you mean '{close[0]}'?" if close else f" (supported: {', '.join(names)})"
    raise value.error(f"unknown {what} '{text}'{hint}")


# --- reader-level options ---------------------------------------------------------------------------------------------


def _source_options(reader: Section, reader_type: str, deserializers: list[Deserializer]) -> dict[str, Any]:
    options: dict[str, Any] = {"max_samples": _epoch_size(reader)}
    only_images = len(deserializers) == 1 and isinstance(deserializers[0], (ImageDeserializer, Base64ImageDeserializer))
    legacy_htk = reader_type in ("HTKMLFReader", "HTKDeserializers")
    frame_mode = _bool(reader.find("frameMode"), default=legacy_htk)  # images: one sample per sequence anyway
    randomize, window = _randomization(reader, reader_type, deserializers, only_images)
    action = reader.find("action")
    if action is not None and action.text.lower() == "write":
        randomize, frame_mode = False, False
    truncated = _bool(reader.find("truncated"), default=False)
    if truncated:
        length = reader.find("truncationLength")
        if length is None and legacy_htk:  # HTKMLFReader cut utterances at the minibatch size (per parallel slot)
            length = reader.find("minibatchSize") or _sgd(reader, "minibatchSize")
        if length is None or int(length.as_numbers()[0]) <= 0:
            raise ConfigError(f"{reader.where}: truncated=true needs truncationLength = SAMPLES (> 0)")
        options["truncation_length"] = int(length.as_numbers()[0])
        frame_mode = False
    options["frame_mode"] = frame_mode
    options["randomize"] = randomize
    options.update(window)
    seed = reader.find("randomizationSeed")
    options["randomization_seed"] = 0 if seed is None else seed.as_int()
    prefetch = reader.find("prefetch")
    if prefetch is not None:
        options["prefetch"] = prefetch.as_bool()
    trace = reader.find("traceLevel")
    if trace is not None:
        options["trace_level"] = trace.as_int()
    return options


def _sgd(reader: Section, key: str) -> Value | None:
    """``key`` of the ``SGD`` section beside the reader (the training settings of the same command)."""
    parent = reader.parent
    return None if parent is None or "SGD" not in parent else parent.section("SGD").get(key)


def _epoch_size(reader: Section) -> Any:
    """``epochSize`` of the reader (or its parents), else of the ``SGD`` section beside it; 0 or absent: a sweep."""
    value = reader.find("epochSize") or _sgd(reader, "epochSize")
    if value is None or value.text.lower() in ("0", "auto", ""):
        return FULL_DATA_SWEEP
    size = value.as_int()
    if size < 0:
        raise value.error(f"epochSize must be >= 0 (0: one sweep), got {size}")
    return size


def _randomize(value: Value | None) -> tuple[bool, int | None]:
    """``randomize``: a boolean, ``auto`` (on) or ``none`` (off); or, as HTKMLFReader took it, a window in frames
    (a number above 1). Returns (on, that window)."""
    text = "auto" if value is None else value.text.lower()
    if text in ("auto", "none"):
        return text == "auto", None
    assert value is not None
    if text.isascii() and text.isdigit() and value.as_int() > 1:
        return True, value.as_int()
    return value.as_bool(), None


def _window(size: int, sample_based: bool) -> dict[str, int]:
    if sample_based:
        return {"randomization_window_in_samples": size, "randomization_window_in_chunks": 0}
    return {"randomization_window_in_chunks": size}


def _randomization(
    reader: Section, reader_type: str, deserializers: list[Deserializer], only_images: bool
) -> tuple[bool, dict[str, int]]:
    """``randomize`` and the window (spec/randomization-and-packing.md §2, defaults per reader form)."""
    enabled, frames = _randomize(reader.find("randomize"))
    if not enabled:
        return False, _window(0, False)
    if frames is not None:
        return True, _window(frames, True)
    based = reader.find("sampleBasedRandomizationWindow")
    sample_based = None if based is None else based.as_bool()
    window = reader.find("randomizationWindow")
    if window is not None and window.text.lower() != "auto":
        size = window.as_int()  # counted in samples by default in the composite reader, in chunks in the legacy ones
        return size > 0, _window(size, reader_type == "CompositeDataReader" if sample_based is None else sample_based)
    if only_images:
        return True, _window(1, False)
    if reader_type in ("CNTKTextFormatReader", "CNTKBinaryReader") or any(
        isinstance(d, CTFDeserializer) for d in deserializers
    ):
        if sample_based:
            raise ConfigError(
                f"{reader.where}: sampleBasedRandomizationWindow=true requires an explicit randomizationWindow"
            )
        chunk_size = _int(reader.find("chunkSizeInBytes"), DEFAULT_CHUNK_SIZE_IN_BYTES)
        return True, _window(max(1, WINDOW_BYTES // max(1, chunk_size)), False)
    return True, _window(WHOLE_CORPUS, True)


# --- values -----------------------------------------------------------------------------------------------------------


def _bool(value: Value | None, *, default: bool) -> bool:
    return default if value is None else value.as_bool()


def _text(value: Value | None, default: str) -> str:
    return default if value is None else value.text


def _int(value: Value | None, default: int) -> int:
    return default if value is None else value.as_int()


def _precision(section: Section) -> str:
    value = section.find("precision")
    if value is None:
        return "float"
    text = value.text.lower()
    if text not in ("float", "double"):
        raise value.error(f"precision must be 'float' or 'double', got {value.text!r}")
    return text


def _path(value: Value, context: Context) -> str:
    path = value.text
    return path if os.path.isabs(path) or remote.is_remote(path) else os.path.join(context.base_dir, path)


def _required(section: Section, key: str, what: str) -> Value:
    value = section.get(key)
    if value is None:
        raise ConfigError(f"{section.where}: {what} '{section.name}' needs '{key}'")
    return value


def _options(section: Section, context: Context) -> dict[str, Any]:
    """Options every file deserializer takes: precision, error budget, trace level."""
    return {
        "precision": _precision(section) if "precision" in section else context.precision,
        "max_errors": _int(section.find("maxErrors"), 0),
        "trace_level": _int(section.get("traceLevel"), context.trace_level),
    }


def _streams(section: Section, what: str) -> list[tuple[str, Section]]:
    inputs = section.get("input")
    if inputs is None:
        raise ConfigError(f"{section.where}: {what} '{section.name}' needs an 'input' section (its streams)")
    streams = inputs.as_section()
    result = [(value.key, value.as_section()) for value in streams.values()]
    if not result:
        raise ConfigError(f"{inputs.where}: 'input' of {what} '{section.name}' lists no stream")
    return result


# --- CTF and CBF ------------------------------------------------------------------------------------------------------


def _ctf(section: Section, context: Context, *, legacy: bool = False) -> list[Deserializer]:
    if not legacy:
        K.check_keys(section, K.CTF, "a CNTKTextFormatDeserializer section")
    streams = {}
    for name, stream in _streams(section, "CTF deserializer"):
        K.check_keys(stream, K.CTF_STREAM, f"CTF stream '{name}'")
        storage = _required(stream, "format", "CTF stream")
        if storage.text.lower() not in ("dense", "sparse"):
            raise storage.error(f"format must be 'dense' or 'sparse', got {storage.text!r}")
        alias = stream.get("alias")
        streams[name] = StreamDef(
            field=name if alias is None else alias.text,
            shape=_required(stream, "dim", "CTF stream").as_int(),
            is_sparse=storage.text.lower() == "sparse",
            defines_mb_size=_bool(stream.get("definesMBSize"), default=False),
        )
    return [
        CTFDeserializer(
            _path(_required(section, "file", "CTF deserializer"), context),
            StreamDefs(**streams),
            skip_sequence_ids=_bool(section.find("skipSequenceIds"), default=False),
            chunk_size_in_bytes=_int(section.find("chunkSizeInBytes"), DEFAULT_CHUNK_SIZE_IN_BYTES),
            keep_data_in_memory=_bool(section.find("keepDataInMemory"), default=False),
            cache_index=_bool(section.find("cacheIndex"), default=False),
            compat=context.compat,
            **_options(section, context),
        )
    ]


def _cbf(section: Section, context: Context, *, legacy: bool = False) -> list[Deserializer]:
    if not legacy:
        K.check_keys(section, K.CBF, "a CNTKBinaryFormatDeserializer section")
    streams: dict[str, StreamDef] | None = None
    if "input" in section:
        streams = {}
        for name, stream in _streams(section, "CBF deserializer"):
            K.check_keys(stream, K.CBF_STREAM, f"CBF stream '{name}'")
            alias = stream.get("alias")
            streams[name] = StreamDef(field=name if alias is None else alias.text)
    options = _options(section, context)
    if "precision" not in section and section.find("precision") is None:
        options["precision"] = None  # the file's own precision
    return [
        CBFDeserializer(
            _path(_required(section, "file", "CBF deserializer"), context),
            None if streams is None else StreamDefs(**streams),
            keep_data_in_memory=_bool(section.find("keepDataInMemory"), default=False),
            **options,
        )
    ]


# --- images -----------------------------------------------------------------------------------------------------------


def _image(kind: type[ImageDeserializer] | type[Base64ImageDeserializer]) -> Callable[..., list[Deserializer]]:
    def build(section: Section, context: Context) -> list[Deserializer]:
        K.check_keys(section, K.IMAGE, f"an {kind.__name__} section")
        image: tuple[str, list[Any], bool] | None = None
        streams: dict[str, StreamDef] = {}
        for name, stream in _streams(section, kind.__name__):
            if "labelDim" in stream or ("dim" in stream and "transforms" not in stream):
                streams[name] = _label_stream(name, stream)
                continue
            K.check_keys(stream, K.IMAGE_STREAM, f"image stream '{name}'")
            if image is not None:
                raise ConfigError(
                    f"{stream.where}: {kind.__name__} takes one image stream (with 'transforms') and one label "
                    f"stream (with 'labelDim'); '{image[0]}' and '{name}' are both image streams"
                )
            transforms, transposed = _transforms(stream.get("transforms"), context)
            image = (name, transforms, transposed)
            streams[name] = StreamDef(field="image", transforms=transforms)
        if image is None:
            raise ConfigError(f"{section.where}: {kind.__name__} '{section.name}' has no image stream")
        options = _options(section, context)
        multi_view = section.get("multiViewCrop")
        if multi_view is not None:
            options["multi_view"] = multi_view.as_bool()
        return [
            kind(
                _path(_required(section, "file", kind.__name__), context),
                StreamDefs(**streams),
                grayscale=_bool(section.get("grayscale"), default=False),
                layout="chw" if image[2] else "hwc",
                **options,
            )
        ]

    return build


def _label_stream(name: str, stream: Section) -> StreamDef:
    """An image deserializer's label stream: ``labelDim`` (or ``dim``) classes, one-hot."""
    K.check_keys(stream, K.LABEL_STREAM, f"label stream '{name}'")
    dim = stream.get("labelDim") or stream["dim"]
    return StreamDef(field="label", shape=dim.as_int())


def _transforms(value: Value | None, context: Context) -> tuple[list[Any], bool]:
    """The transforms of an image stream and whether the list ends with Transpose (CHW output)."""
    if value is None:
        return [], False
    result: list[Any] = []
    transposed = False
    for element in value.elements():
        transform = element.as_section()
        kind = _choose(_required(transform, "type", "transform"), list(K.TRANSFORMS), "transform", {}, any_case=False)
        K.check_keys(transform, K.TRANSFORMS[kind] | K.TRANSFORM_COMMON, f"a {kind} transform")
        if transposed:
            raise ConfigError(f"{transform.where}: Transpose must be the last transform")
        if kind == "Transpose":
            transposed = True
        elif kind != "Cast":
            result.append(_transform(kind, transform, context))
    return result, transposed


def _ratio(value: Value | None, default: float) -> Any:
    if value is None:
        return default
    numbers = value.as_numbers()
    return numbers[0] if len(numbers) == 1 else (numbers[0], numbers[1])


def _transform(kind: str, section: Section, context: Context) -> Any:
    seed = _int(section.get("seed"), 0)
    get = section.get
    if kind == "Crop":
        size = get("cropSize")
        sizes = [0] if size is None else size.as_ints()
        hflip = get("hflip")
        return T.crop(
            crop_type=_text(get("cropType"), "center"),
            crop_size=sizes[0] if len(sizes) == 1 else (sizes[0], sizes[1]),
            side_ratio=_ratio(get("sideRatio"), 0.0),
            area_ratio=_ratio(get("areaRatio"), 0.0),
            aspect_ratio=_ratio(get("aspectRatio"), 1.0),
            jitter_type=_text(get("jitterType"), "none"),
            hflip=None if hflip is None else hflip.as_bool(),
            seed=seed,
        )
    if kind == "Scale":
        return T.scale(
            _required(section, "width", "Scale transform").as_int(),
            _required(section, "height", "Scale transform").as_int(),
            _required(section, "channels", "Scale transform").as_int(),
            _text(get("interpolations"), "linear"),
            scale_mode=_text(get("scaleMode"), "fill"),
            pad_value=-1 if get("padValue") is None else section["padValue"].as_float(),
        )
    if kind == "Mean":
        mean_file = get("meanFile")
        return T.mean("" if mean_file is None or not mean_file.text else _path(mean_file, context))
    if kind == "Color":
        return T.color(
            *(_ratio(get(f"{name}Radius"), 0.0) for name in ("brightness", "contrast", "saturation")), seed=seed
        )
    intensity_file = get("intensityFile")
    return T.intensity(
        _ratio(get("intensityStdDev"), 0.0),
        None if intensity_file is None else _path(intensity_file, context),
        seed=seed,
    )


def _legacy_image(reader: Section, context: Context) -> list[Deserializer]:
    """``readerType=ImageReader``: Crop, Scale, Color, Intensity, Mean, then Transpose, from the feature section's
    keys; the label section holds ``labelDim``."""
    stream_keys = K.check_keys(reader, K.LEGACY_IMAGE_READER, "an ImageReader section", streams=True)
    streams: dict[str, StreamDef] = {}
    channels = None
    for name in stream_keys:
        stream = reader.section(name)
        if "labelDim" in stream:
            streams[name] = _label_stream(name, stream)
            continue
        K.check_keys(stream, K.LEGACY_IMAGE_FEATURES, f"image stream '{name}'")
        steps: list[Any] = []
        if any(key in stream for key in K.TRANSFORMS["Crop"]):
            steps.append(_transform("Crop", stream, context))
        steps.append(_transform("Scale", stream, context))
        channels = stream["channels"].as_int()
        if any(key in stream for key in K.TRANSFORMS["Color"]):
            steps.append(_transform("Color", stream, context))
        if "intensityFile" in stream:
            steps.append(_transform("Intensity", stream, context))
        if "meanFile" in stream:
            steps.append(_transform("Mean", stream, context))
        streams[name] = StreamDef(field="image", transforms=steps)
    if channels is None:
        raise ConfigError(f"{reader.where}: the ImageReader section '{reader.name}' has no image stream (width, ...)")
    grayscale = reader.get("grayscale")
    return [
        ImageDeserializer(
            _path(_required(reader, "file", "ImageReader"), context),
            StreamDefs(**streams),
            grayscale=channels == 1 if grayscale is None else grayscale.as_bool(),
            **_options(reader, context),
        )
    ]


# --- HTK features and MLF labels --------------------------------------------------------------------------------------


def _paths(value: Value, context: Context) -> str | list[str]:
    parts = [_path(element, context) for element in value.elements()] if value.is_array else [_path(value, context)]
    return parts[0] if len(parts) == 1 else parts


def _htk_feature_stream(name: str, stream: Section, section: Section, context: Context) -> HTKFeatureDeserializer:
    K.check_keys(stream, K.HTK_FEATURE_STREAM, f"HTK feature stream '{name}'")
    kind = stream.get("type")
    if kind is not None and kind.text.lower() != "real":
        raise kind.error(f"HTK features are type 'real', got {kind.text!r}")
    window = stream.get("contextWindow")
    context_window: Any = None
    if window is not None:
        sides = window.as_ints()
        context_window = sides[0] if len(sides) == 1 else (sides[0], sides[1])
    expand = stream.get("expandToUtterance") or section.get("expandToUtterance")
    length = stream.get("maxSequenceLength")
    prefix = stream.get("prefixPathInSCP") or section.find("prefixPathInSCP")
    definition = StreamDef(
        shape=_required(stream, "dim", "HTK feature stream").as_int(),
        scp=_paths(_required(stream, "scpFile", "HTK feature stream"), context),
        context=context_window,
        broadcast=None if expand is None else expand.as_bool(),
        defines_mb_size=_bool(stream.get("definesMBSize"), default=False),
        max_sequence_length=None if length is None else length.as_int(),
    )
    options = _options(section, context)
    return HTKFeatureDeserializer(
        StreamDefs(**{name: definition}), prefix_path=None if prefix is None else prefix.text, **options
    )


def _mlf_stream(name: str, stream: Section, section: Section, context: Context) -> HTKMLFDeserializer:
    K.check_keys(stream, K.MLF_STREAM, f"MLF label stream '{name}'")
    label_type = stream.get("labelType") or stream.get("type")
    if label_type is not None and label_type.text.lower() != "category":
        raise label_type.error(f"MLF labels are labelType 'category', got {label_type.text!r}")
    dim = stream.get("labelDim") or stream.get("dim")
    if dim is None:
        raise ConfigError(f"{stream.where}: MLF label stream '{name}' needs labelDim")
    mlf_file, mlf_list = stream.get("mlfFile"), stream.get("mlfFileList")
    if mlf_file is not None:
        mlf: Any = _paths(mlf_file, context)
    elif mlf_list is not None:
        mlf = _mlf_file_list(mlf_list, context)
    else:
        raise ConfigError(f"{stream.where}: MLF label stream '{name}' needs mlfFile or mlfFileList")
    mapping = stream.get("labelMappingFile") or section.get("labelMappingFile")
    boundaries = stream.get("phoneBoundaries") or section.get("phoneBoundaries")
    options = _options(section, context)
    chunk = section.get("chunkSizeInBytes")
    if chunk is not None:
        options["chunk_size_in_bytes"] = chunk.as_int()
    return HTKMLFDeserializer(
        None if mapping is None else _path(mapping, context),
        StreamDefs(**{name: StreamDef(shape=dim.as_int(), mlf=mlf)}),
        _bool(boundaries, default=False),
        **options,
    )


def _mlf_file_list(value: Value, context: Context) -> list[str]:
    """``mlfFileList``: an array of MLF paths, or a text file naming one MLF per line."""
    if value.is_array:
        return [_path(element, context) for element in value.elements()]
    listing = _path(value, context)
    try:
        names = read_mlf_file_list(listing)
    except OSError as error:
        raise value.error(f"cannot read the MLF list {listing!r}: {error.strerror}") from None
    return [name if os.path.isabs(name) else os.path.join(context.base_dir, name) for name in names]


def _htk_features(section: Section, context: Context) -> list[Deserializer]:
    K.check_keys(section, K.HTK_FEATURES, "an HTKFeatureDeserializer section")
    return [_htk_feature_stream(name, stream, section, context) for name, stream in _streams(section, "HTK features")]


def _mlf(section: Section, context: Context) -> list[Deserializer]:
    K.check_keys(section, K.MLF, "an HTKMLFDeserializer section")
    return [_mlf_stream(name, stream, section, context) for name, stream in _streams(section, "HTK MLF labels")]


def _legacy_htk(reader: Section, context: Context) -> list[Deserializer]:
    """``readerType=HTKMLFReader`` / ``HTKDeserializers``: each sub-section with ``scpFile`` is a feature stream,
    each with ``mlfFile``/``mlfFileList`` a label stream; features first (the primary), labels after."""
    stream_keys = K.check_keys(reader, K.LEGACY_HTK_READER, "an HTK reader section", streams=True)
    features: list[Deserializer] = []
    labels: list[Deserializer] = []
    for name in stream_keys:
        stream = reader.section(name)
        if "scpFile" in stream:
            features.append(_htk_feature_stream(name, stream, reader, context))
        elif "mlfFile" in stream or "mlfFileList" in stream:
            labels.append(_mlf_stream(name, stream, reader, context))
        else:
            raise ConfigError(f"{stream.where}: HTK stream '{name}' has neither scpFile (features) nor mlfFile/labels")
    if not features:
        raise ConfigError(f"{reader.where}: the HTK reader section '{reader.name}' has no feature stream (scpFile)")
    return features + labels


# --- dispatch ---------------------------------------------------------------------------------------------------------

Build = Callable[[Section, Context], list[Deserializer]]

# legacy reader types: the modules of the registry's formats (HTKMLFReader: the older name of HTKDeserializers)
LEGACY_READERS: dict[str, Build] = {
    registry.CTF.brainscript_module: lambda reader, context: _legacy_ctf(reader, context),
    registry.CBF.brainscript_module: lambda reader, context: _legacy_cbf(reader, context),
    registry.IMAGE_MAP.brainscript_module: _legacy_image,
    "HTKMLFReader": _legacy_htk,
    registry.SCP.brainscript_module: _legacy_htk,
}
NOT_SUPPORTED_READERS = {
    name: "convert the data to CTF (cntkio reads CTF, CBF, HTK/MLF and image maps)"
    for name in ("UCIFastReader", "LMSequenceReader", "LUSequenceReader", "DSSMReader", "SparsePCReader",
                 "LibSVMBinaryReader", "Kaldi2Reader", "BinaryReader")
}  # fmt: skip


def _legacy_ctf(reader: Section, context: Context) -> list[Deserializer]:
    K.check_keys(reader, K.COMPOSITE_READER | K.CTF, "a CNTKTextFormatReader section")
    return _ctf(reader, context, legacy=True)


def _legacy_cbf(reader: Section, context: Context) -> list[Deserializer]:
    K.check_keys(reader, K.COMPOSITE_READER | K.CBF, "a CNTKBinaryReader section")
    return _cbf(reader, context, legacy=True)


# how the deserializer section of each format is built, in the order messages list them
_BUILDERS: dict[Format, Build] = {
    registry.CTF: _ctf,
    registry.CBF: _cbf,
    registry.IMAGE_MAP: _image(ImageDeserializer),
    registry.BASE64_IMAGE: _image(Base64ImageDeserializer),
    registry.SCP: _htk_features,
    registry.MLF: _mlf,
}
# deserializer type -> (its module, how it is built): the names are the registry's
DESERIALIZERS: dict[str, tuple[str, Build]] = {
    form.brainscript_type: (form.brainscript_module, build) for form, build in _BUILDERS.items()
}
NOT_SUPPORTED_DESERIALIZERS = {
    "LatticeDeserializer": "lattices are not supported (sequence training); read features and labels without them",
}


def _deserializer(element: Value, context: Context) -> list[Deserializer]:
    section = element.as_section()
    composable = section.get("composable")
    if composable is not None and not composable.as_bool():
        raise composable.error(
            "a user deserializer (composable=false) is Python code: build it in Python (cntkio.UserDeserializer) "
            "and pass it to MinibatchSource with the deserializers load_reader(...).deserializers gives"
        )
    kind = _choose(
        _required(section, "type", "deserializer"),
        list(DESERIALIZERS),
        "deserializer type",
        NOT_SUPPORTED_DESERIALIZERS,
        any_case=False,
    )
    module, build = DESERIALIZERS[kind]
    given = section.get("module")
    if given is not None and given.text != module:
        raise given.error(f"{kind} lives in module '{module}', not {given.text!r}")
    return build(section, context)
