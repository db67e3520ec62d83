"""Every public name is in the API reference: after reading, each name in the ``__all__`` of the public modules must
have an object description (``cntkio.X``), or the build warns — an error under ``-W``, so a new public name without
documentation fails CI."""

from __future__ import annotations

import importlib
from typing import Any

from sphinx.application import Sphinx
from sphinx.environment import BuildEnvironment
from sphinx.util import logging

PUBLIC = ("cntkio", "cntkio.torch", "cntkio.jax", "cntkio.grain", "cntkio.ray", "cntkio.transforms", "cntkio.htk",
          "cntkio.equal_steps", "cntkio.hf", "cntkio.remote", "cntkio.brainscript")  # fmt: skip
logger = logging.getLogger(__name__)


def check(app: Sphinx, env: BuildEnvironment) -> None:
    documented = set(env.domains["py"].objects)
    for module in PUBLIC:
        for name in importlib.import_module(module).__all__:
            if f"{module}.{name}" not in documented:
                logger.warning(f"api_coverage: {module}.{name} is public (in __all__) but not in the API reference")


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("env-check-consistency", check)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
