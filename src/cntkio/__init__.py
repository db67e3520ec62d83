"""cntkio: CNTK's data readers (CTF and friends) as a fast, modern Python library.

Drop-in for ``cntk.io``: ``from cntkio import MinibatchSource, CTFDeserializer, StreamDef, StreamDefs``. Every name
``cntk.io`` had imports from here; CNTK 2.0's (``text_format_minibatch_source``, ``ReaderConfig``,
``MinibatchSourceConfig``, ``minibatch_source``, ``CNTKTextFormatMinibatchSource``) warn with today's spelling when
used, and ``LatticeDeserializer`` says it is not implemented. CNTK 2.0's keywords of ``MinibatchSource``
(``epoch_size=`` ...) are taken by :class:`cntkio.io.MinibatchSource` (``import cntkio.io as C``).
"""

from typing import TYPE_CHECKING

from cntkio import transforms  # cntkio.transforms, as cntk.io.transforms
from cntkio._src.api.source import MinibatchSource, TraceLevel
from cntkio._src.api.user_sources import MinibatchSourceFromData, UserMinibatchSource
from cntkio._src.assemble.minibatch import MinibatchData, Value
from cntkio._src.common.errors import CNTKIOError, ConfigError, FormatError, Location, MaxErrorsExceeded
from cntkio._src.common.sentinels import DEFAULT_RANDOMIZATION_WINDOW_IN_CHUNKS, FULL_DATA_SWEEP, INFINITELY_REPEAT
from cntkio._src.common.streams import Record, StreamConfiguration, StreamDef, StreamDefs, StreamInformation
from cntkio._src.compat.legacy import MAX_UI64, LatticeDeserializer
from cntkio._src.compat.legacy_sources import (  # cntk.io's CNTK 2.0 names (deprecated: they warn when used)
    DEFAULT_RANDOMIZATION_WINDOW,
    INFINITE_SAMPLES,
    CNTKTextFormatMinibatchSource,
    MinibatchSourceConfig,
    ReaderConfig,
    minibatch_source,
    text_format_minibatch_source,
)
from cntkio._src.corpus.join import DeserializerJoin, JoinReport, KeyProblems, LengthMismatch
from cntkio._src.formats.cbf_writer import write_cbf
from cntkio._src.formats.ctf_writer import sequence_to_cntk_text_format
from cntkio._src.formats.kaldi import KaldiDeserializer
from cntkio._src.formats.protocol import ChunkIndex, DenseStream, Deserializer, DeserializerGroup, SparseStream
from cntkio._src.formats.records import RecordDeserializer
from cntkio._src.formats.stream_data import UserDataError
from cntkio._src.formats.user import UserDeserializer
from cntkio._src.reading.stats import ReaderStats

if TYPE_CHECKING:  # to type checkers the public names are the classes, whose arguments the faces take
    from cntkio._src.formats.cbf import CBFDeserializer
    from cntkio._src.formats.ctf import CTFDeserializer
    from cntkio._src.formats.htk_features import HTKFeatureDeserializer
    from cntkio._src.formats.htk_labels import HTKMLFDeserializer
    from cntkio._src.formats.image import Base64ImageDeserializer, ImageDeserializer
else:  # the classes' faces: they also take several files, several HTK streams and CNTK's spellings (compat/faces.py)
    from cntkio._src.compat.faces import (
        Base64ImageDeserializer,
        CBFDeserializer,
        CTFDeserializer,
        HTKFeatureDeserializer,
        HTKMLFDeserializer,
        ImageDeserializer,
    )

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_RANDOMIZATION_WINDOW",
    "DEFAULT_RANDOMIZATION_WINDOW_IN_CHUNKS",
    "FULL_DATA_SWEEP",
    "INFINITELY_REPEAT",
    "INFINITE_SAMPLES",
    "MAX_UI64",
    "Base64ImageDeserializer",
    "CBFDeserializer",
    "CNTKIOError",
    "CNTKTextFormatMinibatchSource",
    "CTFDeserializer",
    "ChunkIndex",
    "ConfigError",
    "DenseStream",
    "Deserializer",
    "DeserializerGroup",
    "DeserializerJoin",
    "FormatError",
    "HTKFeatureDeserializer",
    "HTKMLFDeserializer",
    "ImageDeserializer",
    "JoinReport",
    "KaldiDeserializer",
    "KeyProblems",
    "LatticeDeserializer",
    "LengthMismatch",
    "Location",
    "MaxErrorsExceeded",
    "MinibatchData",
    "MinibatchSource",
    "MinibatchSourceConfig",
    "MinibatchSourceFromData",
    "ReaderConfig",
    "ReaderStats",
    "Record",
    "RecordDeserializer",
    "SparseStream",
    "StreamConfiguration",
    "StreamDef",
    "StreamDefs",
    "StreamInformation",
    "TraceLevel",
    "UserDataError",
    "UserDeserializer",
    "UserMinibatchSource",
    "Value",
    "minibatch_source",
    "sequence_to_cntk_text_format",
    "text_format_minibatch_source",
    "transforms",
    "write_cbf",
]
