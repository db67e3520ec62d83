"""Stream definitions and descriptions: ``StreamDef``, ``StreamDefs``, ``StreamInformation``."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from cntkio._src.common.errors import ConfigError

MAX_SAMPLE_VALUES = 2**31 - 1  # values (dense) or dimension (sparse) of one sample


class Record(dict):  # type: ignore[type-arg]
    """A dict whose items are also attributes (``streams.features``), like ``cntk.io``'s Record."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name: str, value: Any) -> None:
        self[name] = value


def StreamDefs(**streams: StreamDef) -> Record:
    """Named stream definitions, in the order given (``StreamDefs(features=StreamDef(...))``)."""
    return Record(streams)


@dataclass
class StreamDef:
    """How to read one stream. For CTF ``field`` is the alias after ``|`` and ``shape`` the dimension."""

    field: str | None = None
    shape: int | tuple[int, ...] | None = None
    is_sparse: bool = False
    transforms: list[Any] | None = None
    context: tuple[int, int] | None = None
    scp: str | list[str] | None = None
    mlf: str | list[str] | None = None
    broadcast: bool | None = None
    defines_mb_size: bool = False
    max_sequence_length: int | None = None  # None: no limit (cntk.io's 65535 never reached CNTK's HTK reader)

    def __post_init__(self) -> None:
        if self.shape is None:
            return
        dims = self.shape if isinstance(self.shape, tuple) else (self.shape,)
        for d in dims:
            if not isinstance(d, (int, np.integer)) or isinstance(d, bool) or d <= 0:
                raise ConfigError(f"stream shape must hold positive integers, got {self.shape!r}")
        if math.prod(int(d) for d in dims) > MAX_SAMPLE_VALUES:
            raise ConfigError(f"stream shape {self.shape!r} has more than {MAX_SAMPLE_VALUES} values per sample")

    def dim(self) -> int:
        """The stream's dimension as one integer (CTF, CBF, HTK and MLF streams are 1-D)."""
        shape = self.shape
        if isinstance(shape, tuple):
            if len(shape) != 1:
                raise ConfigError(f"stream shape must be one integer, got {shape}")
            shape = shape[0]
        if not isinstance(shape, (int, np.integer)) or isinstance(shape, bool) or shape <= 0:
            raise ConfigError(f"stream shape must be a positive integer, got {self.shape!r}")
        return int(shape)


@dataclass(frozen=True, eq=False)
class StreamInformation:
    """Description of one output stream (hashable by identity, usable as a minibatch dict key).

    ``StreamInformation(name, stream_id, storage_format, dtype, shape, defines_mb_size=False)``, as ``cntk.io``'s:
    ``dtype`` may be a NumPy type (``np.float32``), ``shape`` an integer. ``shape`` is how the stream is stored;
    ``sample_shape`` is the shape as declared, which minibatches present (``MinibatchData.shape``, ``Value.shape``,
    ``asarray()``). They differ only for a sparse stream declared with leading axes of 1, as CNTK's tests declare
    them (``StreamInformation('y', 1, 'sparse', np.float32, (1, 3))``): it is stored as a ``(3,)`` stream (its data
    a CSR matrix of 3 columns, a row per sample) and presented as ``(1, 3)``. CNTK's attribute names are kept
    (``sample_shape``, ``m_name``, ``m_id``, ``m_storage_format``, ``m_element_type``, ``m_sample_layout`` (the
    declared shape reversed, CNTK's column-major ``NDShape``), ``m_defines_mb_size``, ``m_is_binary``).
    """

    name: str
    stream_id: int
    storage_format: str  # "dense" or "sparse"
    dtype: np.dtype[Any]
    shape: tuple[int, ...]
    defines_mb_size: bool = False
    alias: str = field(default="", compare=False)
    #: The declared shape (CNTK's ``sample_shape``); filled in from ``shape`` when not given (see the class doc).
    sample_shape: tuple[int, ...] = field(default=(), compare=False)

    @property
    def is_sparse(self) -> bool:
        return self.storage_format == "sparse"

    @property
    def m_name(self) -> str:
        return self.name

    @property
    def m_id(self) -> int:
        return self.stream_id

    @property
    def m_storage_format(self) -> str:
        return self.storage_format

    @property
    def m_element_type(self) -> np.dtype[Any]:
        return self.dtype

    @property
    def m_sample_layout(self) -> tuple[int, ...]:
        return tuple(reversed(self.sample_shape))

    @property
    def m_defines_mb_size(self) -> bool:
        return self.defines_mb_size

    @property
    def m_definesMbSize(self) -> bool:  # (the C++ spelling)
        return self.defines_mb_size

    @property
    def m_is_binary(self) -> bool:
        """CNTK's opaque binary streams (lattices) do not exist here: always False."""
        return False

    def __post_init__(self) -> None:
        """Accepts what ``cntk.io`` code passes: a NumPy type for ``dtype`` and an integer ``shape``; a sparse shape
        with leading axes of 1 is stored as its last axis (see the class doc)."""
        object.__setattr__(self, "dtype", np.dtype(self.dtype))
        shape = _int_tuple(self.shape)
        declared = _int_tuple(self.sample_shape) if self.sample_shape else shape
        if self.is_sparse and len(shape) > 1 and all(d == 1 for d in shape[:-1]):
            shape = shape[-1:]
        if declared != shape and not (self.is_sparse and _leading_ones(declared, shape)):
            declared = shape  # (a shape replaced after the declaration: the declaration no longer applies)
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "sample_shape", declared)

    def __repr__(self) -> str:
        declared = f", sample_shape={self.sample_shape}" if self.sample_shape != self.shape else ""
        return (
            f"StreamInformation({self.name!r}, {self.storage_format}, shape={self.shape}{declared}, dtype={self.dtype})"
        )


def _int_tuple(shape: Any) -> tuple[int, ...]:
    """An integer or a sequence of them as a tuple of ints (values are checked where a format takes the stream)."""
    return (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(d) for d in shape)


def _leading_ones(declared: tuple[int, ...], shape: tuple[int, ...]) -> bool:
    """``declared`` is ``shape`` with leading axes of 1 (how a sparse ``(dim,)`` stream may be declared)."""
    extra = len(declared) - len(shape)
    return extra > 0 and declared[extra:] == shape and all(d == 1 for d in declared[:extra])


@dataclass(frozen=True)
class StreamConfiguration:
    """Legacy stream description of ``cntk.io`` (CTF): name, dimension, sparsity, alias."""

    name: str
    dim: int
    is_sparse: bool = False
    stream_alias: str = ""
    defines_mb_size: bool = False

    def to_stream_def(self) -> StreamDef:
        return StreamDef(
            field=self.stream_alias or self.name,
            shape=self.dim,
            is_sparse=self.is_sparse,
            defines_mb_size=self.defines_mb_size,
        )


def parse_precision(precision: str) -> np.dtype[Any]:
    """The value type of ``precision``: ``'float'`` (float32) or ``'double'`` (float64), any case."""
    normalized = str(precision).lower()
    if normalized in ("float", "float32"):
        return np.dtype(np.float32)
    if normalized in ("double", "float64"):
        return np.dtype(np.float64)
    raise ConfigError(f"precision must be 'float' or 'double', got {precision!r}")


def iter_stream_defs(streams: Any) -> Iterator[tuple[str, StreamDef]]:
    """Yields (name, StreamDef) from a StreamDefs record, a mapping of names to StreamDef, or a list of
    legacy StreamConfiguration."""
    if isinstance(streams, (list, tuple)) and all(isinstance(s, StreamConfiguration) for s in streams):
        streams = {s.name: s.to_stream_def() for s in streams}
    if not hasattr(streams, "items"):
        raise ConfigError("streams must be StreamDefs(name=StreamDef(...), ...) or a dict of StreamDef")
    for name, definition in streams.items():
        if not isinstance(definition, StreamDef):
            raise ConfigError(f"stream '{name}' must be a StreamDef, got {type(definition).__name__}")
        yield str(name), definition


def check_stream_set(names: list[str], fields: list[str], field_kind: str, defines_mb_size: list[bool]) -> None:
    """What every format's stream declarations must meet together: at least one stream, names and fields (a CTF alias,
    a record field: ``field_kind``) each unique, at most one stream that ``defines_mb_size``."""
    if not names:
        raise ConfigError("at least one stream is required")
    for kind, values in (("name", names), (field_kind, fields)):
        duplicates = sorted({v for v in values if values.count(v) > 1})
        if duplicates:
            raise ConfigError(f"duplicate stream {kind}(s): {', '.join(duplicates)}")
    if sum(defines_mb_size) > 1:
        raise ConfigError("only one stream can have defines_mb_size=True")
