"""Sphinx configuration of cntkio's documentation (MyST Markdown pages, furo theme, autodoc of the public names).

Built in CI with warnings as errors: ``sphinx-build -W --keep-going -b html docs docs/_build/html``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import cntkio

sys.path.insert(0, str(Path(__file__).resolve().parent / "_ext"))

project = "cntkio"
author = "the cntkio authors"
copyright = "2026, the cntkio authors"
release = cntkio.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinxarg.ext",
    "bench_tables",
    "faces",
    "api_coverage",
]
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build"]

# The API reference documents the public names as users import them; signatures follow `__wrapped__` (the public
# deserializer names are faces of their classes, cntkio/_src/compat/faces.py).
autodoc_default_options = {"members": True, "member-order": "bysource", "undoc-members": False}
autodoc_typehints = "description"
autodoc_class_signature = "separated"
autodoc_inherit_docstrings = True

html_theme = "furo"
html_title = f"cntkio {release}"
html_static_path: list[str] = []
