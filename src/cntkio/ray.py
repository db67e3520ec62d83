"""Ray Data: datasources over any cntkio data — CTF, CBF, HTK features with MLF labels, images, or any deserializers
made by a factory — (one read task per chunk) and a CBF datasink.

The public face of ``cntkio._src.integrations.ray``."""

from cntkio._src.integrations.ray import (
    CBFDatasink,
    CBFDatasource,
    CTFDatasource,
    DeserializerDatasource,
    HTKMLFDatasource,
    ImageDatasource,
)

__all__ = [
    "CBFDatasink",
    "CBFDatasource",
    "CTFDatasource",
    "DeserializerDatasource",
    "HTKMLFDatasource",
    "ImageDatasource",
]
