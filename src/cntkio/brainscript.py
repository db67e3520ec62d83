"""BrainScript reader configs: a CNTK ``.cntk`` file's reader section becomes a ``MinibatchSource``.

The public face of ``cntkio._src.config.brainscript``."""

from cntkio._src.config.brainscript import (
    IGNORED_KEYS,
    ReaderPlan,
    Section,
    Value,
    load_config,
    load_reader,
    reader_plan,
    reader_sections,
)

__all__ = [
    "IGNORED_KEYS",
    "ReaderPlan",
    "Section",
    "Value",
    "load_config",
    "load_reader",
    "reader_plan",
    "reader_sections",
]
