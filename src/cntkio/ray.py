"""Ray Data: datasources over CTF and CBF files (one read task per chunk) and a CBF datasink.

The public face of ``cntkio._src.integrations.ray``."""

from cntkio._src.integrations.ray import (
    CBFDatasink,
    CBFDatasource,
    CTFDatasource,
)

__all__ = [
    "CBFDatasink",
    "CBFDatasource",
    "CTFDatasource",
]
