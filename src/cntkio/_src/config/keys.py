"""Every key a reader section may hold: the ones cntkio reads, per kind of section, and — in one place — the ones
it deliberately ignores, with the reason. Any other key is an error with the file, the line and a "did you mean".
"""

from __future__ import annotations

import difflib
import logging

from cntkio._src.common.errors import ConfigError
from cntkio._src.config.syntax import Section

log = logging.getLogger("cntkio.brainscript")

# Keys cntkio accepts and ignores (lower case -> why). Logged when met.
IGNORED_KEYS: dict[str, str] = {
    "verbosity": "CNTK's log verbosity; cntkio logs through the 'cntkio' logger",
    "useNumericSequenceKeys": "cntkio keeps a key numeric when it is a number and joins numeric and text keys by "
    "their decimal text",
    "hashSequenceKeys": "cntkio does not hash keys (no collisions)",
    "localTimeline": "cntkio's partitions always follow one global timeline",
    "checkData": "had no effect in CNTK",
    "multiThreadedDeserialization": "chunks are always parsed on a thread pool",
    "numCPUThreads": "cntkio sizes its thread pool from the available cores (MinibatchSource(num_parse_threads=))",
    "miniBatchMode": "partial minibatches are always delivered at the end of an epoch",
    "readMethod": "cntkio always reads with block randomization (or in order when randomize is off)",
    "useMersenneTwisterRand": "cntkio's own randomization (MinibatchSource(compat=True) for CNTK's order)",
    "nbrUttsInEachRecurrentIter": "parallel sequences are packed by the minibatch size",
    "numChunksToCache": "documented but ignored by CNTK too; the randomization window decides",
    "sampleLayout": "not needed: the dimension gives the layout",
    "module": "the deserializer type decides the module",
}
IGNORED = {key.lower(): reason for key, reason in IGNORED_KEYS.items()}

_READER_OPTIONS = {
    "randomize", "randomizationWindow", "sampleBasedRandomizationWindow", "randomizationSeed", "frameMode",
    "truncated", "truncationLength", "maxErrors", "traceLevel", "precision", "prefetch", "action", "epochSize",
    "chunkSizeInBytes", "cacheIndex", "keepDataInMemory", "skipSequenceIds",
}  # fmt: skip
COMPOSITE_READER = _READER_OPTIONS | {"readerType", "deserializers"}
# every deserializer section: ``composable=false`` (a user deserializer) is checked before the section is built
_DESERIALIZER = {"type", "composable", "precision", "maxErrors", "traceLevel", "frameMode"}
CTF = _DESERIALIZER | {"file", "input", "skipSequenceIds", "chunkSizeInBytes", "keepDataInMemory", "cacheIndex"}
CTF_STREAM = {"dim", "format", "alias", "definesMBSize"}
CBF = _DESERIALIZER | {"file", "input", "keepDataInMemory", "cacheIndex", "chunkSizeInBytes"}
CBF_STREAM = {"alias", "dim", "format", "definesMBSize"}
IMAGE = _DESERIALIZER | {"file", "input", "grayscale", "multiViewCrop", "cacheIndex"}
IMAGE_STREAM = {"transforms"}
LABEL_STREAM = {"labelDim", "dim"}
TRANSFORMS = {
    "Crop": {"cropType", "cropSize", "sideRatio", "areaRatio", "aspectRatio", "jitterType", "hflip"},
    "Scale": {"width", "height", "channels", "interpolations", "scaleMode", "padValue"},
    "Mean": {"meanFile"},
    "Color": {"brightnessRadius", "contrastRadius", "saturationRadius"},
    "Intensity": {"intensityFile", "intensityStdDev"},
    "Transpose": set(),
    "Cast": set(),
}
TRANSFORM_COMMON = {"type", "seed"}
LEGACY_IMAGE_FEATURES = {"width", "height", "channels", "interpolations", "scaleMode", "padValue", "meanFile", "seed",
                         *TRANSFORMS["Crop"], *TRANSFORMS["Color"], *TRANSFORMS["Intensity"]}  # fmt: skip
LEGACY_IMAGE_READER = COMPOSITE_READER | {"file", "grayscale", "multiViewCrop"}
HTK_FEATURES = _DESERIALIZER | {"input", "expandToUtterance", "prefixPathInSCP", "chunkSizeInFrames"}
HTK_FEATURE_STREAM = {"dim", "scpFile", "contextWindow", "expandToUtterance", "definesMBSize", "type",
                      "prefixPathInSCP", "maxSequenceLength"}  # fmt: skip
MLF = _DESERIALIZER | {"input", "chunkSizeInBytes", "phoneBoundaries", "labelMappingFile"}
MLF_STREAM = {"mlfFile", "mlfFileList", "labelMappingFile", "labelDim", "dim", "labelType", "type",
              "phoneBoundaries", "definesMBSize"}  # fmt: skip
LEGACY_HTK_READER = COMPOSITE_READER | {"prefixPathInSCP"}


def check_keys(section: Section, allowed: set[str], what: str, *, streams: bool = False) -> list[str]:
    """Raises on a key of ``section`` that is neither in ``allowed`` nor ignored (logging the ignored ones).
    With ``streams`` a key holding a section is a stream (returned, in order) rather than an unknown key."""
    known = {key.lower(): key for key in allowed}
    stream_keys: list[str] = []
    for value in section.values():
        lower = value.key.lower()
        if lower in known:
            continue
        if lower in IGNORED:
            log.info("%s: %s: ignored (%s)", value.where, value.key, IGNORED[lower])
            continue
        if streams and value.is_section:
            stream_keys.append(value.key)
            continue
        candidates = {**known, **{k.lower(): k for k in IGNORED_KEYS}}
        close = difflib.get_close_matches(lower, list(candidates), n=1, cutoff=0.6)
        hint = f"; did you mean '{candidates[close[0]]}'?" if close else ""
        raise ConfigError(f"{value.where}: unknown key '{value.key}' in {what}{hint}")
    return stream_keys
