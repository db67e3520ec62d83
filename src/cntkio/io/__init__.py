"""``cntk.io`` under its CNTK name: code written for any CNTK generation (2.0 beta to 2.7) runs after changing
``import cntk.io`` to ``import cntkio.io`` (``cntk.io.transforms`` is :mod:`cntkio.io.transforms`).

Today's names are cntkio's own; CNTK 2.0's (``text_format_minibatch_source``, ``ReaderConfig``,
``MinibatchSourceConfig``, ``CTFDeserializer(path).map_input(...)``, ``epoch_size=`` ...) work with a
``DeprecationWarning`` naming today's spelling. ``LatticeDeserializer`` is not implemented: calling it says so.

Example::

    import cntkio.io as C
    source = C.MinibatchSource(C.CTFDeserializer("train.ctf", C.StreamDefs(
        features=C.StreamDef(field="x", shape=3), labels=C.StreamDef(field="y", shape=2, is_sparse=True))),
        randomize=False, max_sweeps=1)
    mb = source.next_minibatch(64)
    mb[source.streams.features].data.shape     # (sequences, steps, 3), as CNTK's Value
"""

from cntkio import (  # (the faces of the classes, which also take CNTK's spellings: compat/faces.py)
    Base64ImageDeserializer,
    CBFDeserializer,
    CTFDeserializer,
    HTKFeatureDeserializer,
    HTKMLFDeserializer,
    ImageDeserializer,
)
from cntkio._src.api.source import TraceLevel
from cntkio._src.api.user_sources import MinibatchSourceFromData, UserMinibatchSource
from cntkio._src.assemble.minibatch import MinibatchData, Value
from cntkio._src.common.sentinels import DEFAULT_RANDOMIZATION_WINDOW_IN_CHUNKS, FULL_DATA_SWEEP, INFINITELY_REPEAT
from cntkio._src.common.streams import Record, StreamConfiguration, StreamDef, StreamDefs, StreamInformation
from cntkio._src.compat.legacy import MAX_UI64, LatticeDeserializer
from cntkio._src.compat.legacy_sources import (
    DEFAULT_RANDOMIZATION_WINDOW,
    INFINITE_SAMPLES,
    CNTKTextFormatMinibatchSource,
    MinibatchSourceConfig,
    ReaderConfig,
    minibatch_source,
    text_format_minibatch_source,
)
from cntkio._src.compat.minibatch_source import MinibatchSource
from cntkio._src.formats.ctf_writer import sequence_to_cntk_text_format
from cntkio._src.formats.protocol import Deserializer
from cntkio._src.formats.user import UserDeserializer
from cntkio.io import transforms

__all__ = [
    "DEFAULT_RANDOMIZATION_WINDOW",
    "DEFAULT_RANDOMIZATION_WINDOW_IN_CHUNKS",
    "FULL_DATA_SWEEP",
    "INFINITELY_REPEAT",
    "INFINITE_SAMPLES",
    "MAX_UI64",
    "Base64ImageDeserializer",
    "CBFDeserializer",
    "CNTKTextFormatMinibatchSource",
    "CTFDeserializer",
    "Deserializer",
    "HTKFeatureDeserializer",
    "HTKMLFDeserializer",
    "ImageDeserializer",
    "LatticeDeserializer",
    "MinibatchData",
    "MinibatchSource",
    "MinibatchSourceConfig",
    "MinibatchSourceFromData",
    "ReaderConfig",
    "Record",
    "StreamConfiguration",
    "StreamDef",
    "StreamDefs",
    "StreamInformation",
    "TraceLevel",
    "UserDeserializer",
    "UserMinibatchSource",
    "Value",
    "minibatch_source",
    "sequence_to_cntk_text_format",
    "text_format_minibatch_source",
    "transforms",
]
