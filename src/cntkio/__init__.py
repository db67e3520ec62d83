"""cntkio: CNTK's data readers (CTF and friends) as a fast, modern Python library.

Drop-in for ``cntk.io``: ``from cntkio import MinibatchSource, CTFDeserializer, StreamDef, StreamDefs``.
"""

from typing import TYPE_CHECKING

from cntkio import transforms  # cntkio.transforms, as cntk.io.transforms
from cntkio._src.api.source import MinibatchSource, TraceLevel
from cntkio._src.api.user_sources import MinibatchSourceFromData, UserMinibatchSource
from cntkio._src.assemble.minibatch import MinibatchData, Value
from cntkio._src.common.errors import CNTKIOError, ConfigError, FormatError, Location, MaxErrorsExceeded
from cntkio._src.common.sentinels import DEFAULT_RANDOMIZATION_WINDOW_IN_CHUNKS, FULL_DATA_SWEEP, INFINITELY_REPEAT
from cntkio._src.common.streams import Record, StreamConfiguration, StreamDef, StreamDefs, StreamInformation
from cntkio._src.corpus.join import DeserializerJoin, JoinReport, KeyProblems, LengthMismatch
from cntkio._src.formats.cbf_writer import write_cbf
from cntkio._src.formats.ctf_writer import sequence_to_cntk_text_format
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
    "DEFAULT_RANDOMIZATION_WINDOW_IN_CHUNKS",
    "FULL_DATA_SWEEP",
    "INFINITELY_REPEAT",
    "Base64ImageDeserializer",
    "CBFDeserializer",
    "CNTKIOError",
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
    "KeyProblems",
    "LengthMismatch",
    "Location",
    "MaxErrorsExceeded",
    "MinibatchData",
    "MinibatchSource",
    "MinibatchSourceFromData",
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
    "sequence_to_cntk_text_format",
    "transforms",
    "write_cbf",
]
