"""The version is written once (``__version__`` in src/cntkio/__init__.py); the installed metadata reads it there."""

from __future__ import annotations

import importlib.metadata

import cntkio


def test_version_matches_the_installed_metadata() -> None:
    assert cntkio.__version__ == importlib.metadata.version("cntkio")
