"""The public names of the file deserializers (``cntkio.CTFDeserializer`` ... and the same in ``cntkio.io``): each
is a :class:`Face` of its class, which takes, beside the class's arguments, the spellings that build something else,
and calls the explicit entry point for them:

* several files (a list, or a glob pattern) for ``CTFDeserializer``, ``CBFDeserializer`` and
  ``Base64ImageDeserializer``: ``X.sharded(files, ...)``, a :class:`~cntkio._src.formats.shards.ShardedDeserializer`;
* several streams for ``HTKFeatureDeserializer`` (as CNTK took them): ``HTKFeatureDeserializer.per_stream(streams,
  ...)``, a :class:`~cntkio.DeserializerGroup` of one deserializer per stream;
* CNTK 2.0's streams mapped after construction, ``CTFDeserializer(path)`` and ``ImageDeserializer(map_file)``
  without streams: :class:`~cntkio._src.compat.legacy.CTFStreamMapping` and ``ImageStreamMapping`` (deprecated at
  ``map_input``/``map_features``); ``ImageDeserializer.crop``/``scale``/``mean``/``color``: CNTK 2.0's transform
  helpers (deprecated);
* ``HTKMLFDeserializer(..., phoneBoundaries=...)``: CNTK 2.x's spelling of ``phone_boundaries`` (deprecated).

Every other call constructs the class. A face is not a class (the classes' constructors build their own type only),
but ``isinstance``, ``issubclass``, subclassing (``class Mine(cntkio.CTFDeserializer)``), class attributes and
``monkeypatch.setattr`` all reach the class; type checkers see the class itself (``cntkio/__init__.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cntkio._src.common.streams import iter_stream_defs
from cntkio._src.compat import legacy
from cntkio._src.formats.cbf import CBFDeserializer as _CBF
from cntkio._src.formats.ctf import CTFDeserializer as _CTF
from cntkio._src.formats.htk_features import HTKFeatureDeserializer as _HTKFeatures
from cntkio._src.formats.htk_labels import HTKMLFDeserializer as _HTKMLF
from cntkio._src.formats.image import Base64ImageDeserializer as _Base64Images
from cntkio._src.formats.image import ImageDeserializer as _Images
from cntkio._src.formats.shards import expand_paths

__all__ = [
    "Base64ImageDeserializer",
    "CBFDeserializer",
    "CTFDeserializer",
    "Face",
    "HTKFeatureDeserializer",
    "HTKMLFDeserializer",
    "ImageDeserializer",
]

_OWN = frozenset({"__wrapped__", "_translate", "__doc__", "__name__", "__qualname__", "__module__"})


class Face:
    """A public name standing for ``cls``: a call goes through ``translate(cls, *args, **kwargs)`` (see the
    module); ``isinstance``, ``issubclass``, subclassing and attributes (``extras`` first) are the class's."""

    __wrapped__: type
    __name__: str
    _translate: Callable[..., Any]

    def __init__(self, cls: type, translate: Callable[..., Any], note: str, **extras: Any):
        set_own = object.__setattr__
        set_own(self, "__wrapped__", cls)
        set_own(self, "_translate", translate)
        set_own(self, "__name__", cls.__name__)
        set_own(self, "__qualname__", cls.__qualname__)
        set_own(self, "__module__", "cntkio")
        set_own(self, "__doc__", f"{cls.__doc__ or ''}\n    {note}\n")
        for name, value in extras.items():
            set_own(self, name, value)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._translate(self.__wrapped__, *args, **kwargs)

    def __instancecheck__(self, instance: Any) -> bool:
        return isinstance(instance, self.__wrapped__)

    def __subclasscheck__(self, subclass: type) -> bool:
        return issubclass(subclass, self.__wrapped__)

    def __mro_entries__(self, bases: tuple[Any, ...]) -> tuple[type]:
        return (self.__wrapped__,)

    def __getattr__(self, name: str) -> Any:  # (only for names the face itself lacks)
        if name == "__wrapped__":  # (a copy being built: no class yet)
            raise AttributeError(name)
        return getattr(self.__wrapped__, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _OWN:
            raise AttributeError(f"{self.__name__}: {name} is the face's own")
        setattr(self.__wrapped__, name, value)

    def __delattr__(self, name: str) -> None:
        if name in _OWN:
            raise AttributeError(f"{self.__name__}: {name} is the face's own")
        delattr(self.__wrapped__, name)

    def __reduce__(self) -> str:
        return self.__name__  # pickled by name, as a class: cntkio.<name>

    def __repr__(self) -> str:
        return f"<cntkio.{self.__name__}: {self.__wrapped__!r}, also taking the spellings of compat/faces.py>"


def _files(cls: Any, filename: Any = None, *args: Any, **kwargs: Any) -> Any:
    """One file: the class; several (a list, or a glob pattern that is not a file): ``cls.sharded``
    (:meth:`~cntkio._src.formats.shards.Sharded.sharded`)."""
    if filename is not None and expand_paths(filename) is not None:
        return cls.sharded(filename, *args, **kwargs)
    return cls(filename, *args, **kwargs)


def _ctf(cls: type[_CTF], filename: Any = None, streams: Any = None, *args: Any, **kwargs: Any) -> Any:
    if streams is None and filename is not None and not args:  # CNTK 2.0: the streams come from map_input
        return legacy.CTFStreamMapping(_open_ctf, filename, kwargs)
    return _files(cls, filename, streams, *args, **kwargs)


def _open_ctf(filename: Any, streams: Any, **options: Any) -> Any:
    """What a :class:`~cntkio._src.compat.legacy.CTFStreamMapping` builds: one file or several."""
    return _files(_CTF, filename, streams, **options)


def _images(cls: type[_Images], map_file: Any = None, streams: Any = None, **options: Any) -> Any:
    if streams is None and map_file is not None:  # CNTK 2.0: the streams come from map_features/map_labels
        return legacy.ImageStreamMapping(cls, map_file, options)
    return cls(map_file, streams, **options)


def _htk_features(cls: type[_HTKFeatures], streams: Any, **kwargs: Any) -> Any:
    if len(list(iter_stream_defs(streams))) > 1:  # one deserializer per stream, like CNTK
        return cls.per_stream(streams, **kwargs)
    return cls(streams, **kwargs)


def _htk_mlf(cls: type[_HTKMLF], *args: Any, phoneBoundaries: bool | None = None, **kwargs: Any) -> Any:
    if phoneBoundaries is not None:  # CNTK 2.x's spelling; it wins over phone_boundaries, as it did
        legacy.deprecated("HTKMLFDeserializer(phoneBoundaries=...)", "phone_boundaries=...", stacklevel=4)
        if len(args) > 2:
            args = (*args[:2], phoneBoundaries, *args[3:])
        else:
            kwargs["phone_boundaries"] = phoneBoundaries
    return cls(*args, **kwargs)


_SEVERAL_FILES = "Several files (a list, or a glob pattern) are read as one corpus: {}.sharded(files, ...)."

CTFDeserializer = Face(
    _CTF,
    _ctf,
    _SEVERAL_FILES.format("CTFDeserializer")
    + " Without streams (CNTK 2.0): a CTFStreamMapping, whose map_input(name, dim, format, alias) adds them.",
)
CBFDeserializer = Face(_CBF, _files, _SEVERAL_FILES.format("CBFDeserializer"))
Base64ImageDeserializer = Face(_Base64Images, _files, _SEVERAL_FILES.format("Base64ImageDeserializer"))
ImageDeserializer = Face(
    _Images,
    _images,
    "Without streams (CNTK 2.0): an ImageStreamMapping (map_features, map_labels, ignore_labels); "
    "ImageDeserializer.crop/scale/mean/color are CNTK 2.0's transform helpers (deprecated: cntkio.transforms).",
    crop=legacy.crop,
    scale=legacy.scale,
    mean=legacy.mean,
    color=legacy.color,
)
HTKFeatureDeserializer = Face(
    _HTKFeatures,
    _htk_features,
    "Several streams (as CNTK took them): one deserializer per stream, HTKFeatureDeserializer.per_stream(streams).",
)
HTKMLFDeserializer = Face(
    _HTKMLF, _htk_mlf, "phoneBoundaries= (CNTK 2.x's spelling of phone_boundaries=) is deprecated but works."
)
