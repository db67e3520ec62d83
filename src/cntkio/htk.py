"""HTK files: read headers and features, write features, archives, SCP lists, MLFs and state lists.

The public face of ``cntkio._src.formats.htk_files``."""

from cntkio._src.formats.htk_files import (
    BASE_KIND_MASK,
    GUID_BYTES,
    GUID_KIND,
    HEADER_BYTES,
    HTK_KINDS,
    HTK_QUALIFIERS,
    MLF_UNITS,
    HTKHeader,
    ScpEntry,
    compression_vectors,
    parm_kind,
    read_features,
    read_header,
    read_header_at,
    write_archive,
    write_features,
    write_mlf,
    write_scp,
    write_state_list,
)

__all__ = [
    "BASE_KIND_MASK",
    "GUID_BYTES",
    "GUID_KIND",
    "HEADER_BYTES",
    "HTK_KINDS",
    "HTK_QUALIFIERS",
    "MLF_UNITS",
    "HTKHeader",
    "ScpEntry",
    "compression_vectors",
    "parm_kind",
    "read_features",
    "read_header",
    "read_header_at",
    "write_archive",
    "write_features",
    "write_mlf",
    "write_scp",
    "write_state_list",
]
