"""Type stub of the native extension (src/native/module.cpp)."""

from collections.abc import Sequence
from typing import Any

import numpy as np

class ShortRead(EOFError): ...

class CtfErrors:
    """Counted errors of a CTF index or parse, a read-only column per field."""

    offset: np.ndarray
    kind: np.ndarray
    stream: np.ndarray
    sequence: np.ndarray
    line: np.ndarray
    column: np.ndarray
    byte: np.ndarray
    record: np.ndarray
    end: np.ndarray
    key_blob: np.ndarray
    key_offsets: np.ndarray
    def __len__(self) -> int: ...

def ctf_index(
    fd: int,
    size: int,
    force_line_mode: bool,
    aliases: list[tuple[str, bool, int]],
    defining_stream: int,
    count_lines: bool,
    keep_empty_lines: bool,
    require_all_inputs: bool,
    chunk_size: int,
    threads: int = 1,
    parallel_min_bytes: int = ...,
) -> dict[str, Any]: ...
def ctf_parse(
    fd: int,
    start: int,
    end: int,
    first_line: int,
    starts: np.ndarray,
    ends: np.ndarray,
    mode: int,
    aliases: list[tuple[str, bool, int]],
    double_precision: bool,
    sort_sparse: bool,
    threads: int = ...,
    lengths: np.ndarray | None = ...,
) -> tuple[list[tuple[np.ndarray, ...]], CtfErrors, dict[str, int]]: ...
def compat_block_order(
    units_per_chunk: list[int], samples_per_chunk: list[int], window: int, sample_window: bool, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]: ...

KeyColumnSpec = tuple[int, np.ndarray, np.ndarray | None]

def join_keys(
    primary: KeyColumnSpec, secondary: KeyColumnSpec, by_text: bool, keep_last: bool
) -> tuple[np.ndarray, int, np.ndarray]: ...
def key_duplicates(column: KeyColumnSpec, by_text: bool) -> tuple[int, np.ndarray]: ...
def cntk_key_hash(column: KeyColumnSpec) -> np.ndarray: ...

class CbfError(ValueError): ...

class CbfFile:
    def __init__(self, fd: int, size: int) -> None: ...
    def streams(self) -> list[tuple[str, bool, bool, int]]: ...
    def chunks(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]: ...
    def lengths(self) -> np.ndarray: ...
    def decode(self, chunk: int) -> list[tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]]: ...

def cbf_encode(
    columns: list[tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]], first: int, last: int
) -> list[np.ndarray]: ...
def stable_argsort(keys: np.ndarray) -> np.ndarray: ...
def release_free_memory() -> None: ...
def default_unit_keys(
    seed: int, sweep: int, chunks: np.ndarray, counts: np.ndarray, starts: np.ndarray, window: float
) -> np.ndarray: ...
def reusable_buffer(bytes: int) -> np.ndarray: ...

class ChunkStore:
    def __init__(self, layouts: Sequence[Sequence[tuple[bool, int, str, int]]], slot_counts: Sequence[int]) -> None: ...
    def load(
        self,
        deserializer: int,
        index: int,
        columns: list[tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]],
        sequences: int,
        bad: np.ndarray | None,
        row0: int,
        rows: np.ndarray | None,
        first_unit: int,
        first_sequence: int,
        frame_starts: np.ndarray | None,
    ) -> None: ...
    def clear(self, deserializer: int, index: int) -> None: ...
    def set_lookup(self, deserializer: int, match: np.ndarray, chunk_starts: np.ndarray) -> None: ...
    def set_broadcast(self, deserializer: int) -> None: ...
    def set_versions(self, deserializer: int, versions: int) -> None: ...
    def set_caps(self, caps: np.ndarray | None) -> None: ...
    def gather(
        self,
        chunk: np.ndarray,
        unit: np.ndarray,
        offset: np.ndarray | None,
        count: np.ndarray | None,
        kind: int,
        version: np.ndarray | None = None,
    ) -> tuple[Any, Any, Any, Any]: ...

# record framing (src/native/records_bindings.cpp)
def records_walk(fd: int, begin: int, end: int, framing: int, block: int = ...) -> tuple[np.ndarray, str, int]: ...
def records_bad_crcs(buffer: bytes, starts: np.ndarray) -> np.ndarray: ...
def crc32c(data: bytes | bytearray | memoryview | np.ndarray, crc: int = 0, portable: bool = False) -> int: ...

# MLF parser (src/native/mlf_bindings.cpp)
def mlf_parse(fd: int, size: int, states: list[str] | None, dim: int, block: int = ...) -> dict[str, Any]: ...

# SCP parser (src/native/scp_bindings.cpp)
class ScpParser:
    def __init__(self, prefix: bytes | None, block: int = ...) -> None: ...
    def add(self, fd: int, size: int, directory: bytes) -> tuple[str, int, int, int, bytes | None] | None: ...
    def finish(self) -> dict[str, Any]: ...

# HTK frames (src/native/htk_bindings.cpp)
def htk_expand(frames: np.ndarray, seq_offsets: np.ndarray, left: int, right: int, as_double: bool) -> np.ndarray: ...
def htk_read(
    fds: np.ndarray,
    swap: np.ndarray,
    data_offsets: np.ndarray,
    scale: np.ndarray,
    bias: np.ndarray,
    compressed: bool,
    dim: int,
    run_files: np.ndarray,
    run_first: np.ndarray,
    run_frames: np.ndarray,
    seq_offsets: np.ndarray,
    left: int,
    right: int,
    as_double: bool,
) -> tuple[np.ndarray | None, tuple[int, int] | None]: ...

# image map and base64 image files (src/native/image_index_bindings.cpp)
def image_map_scan(fd: int, size: int, directory: bytes, label_dim: int, block: int = ...) -> dict[str, Any]: ...
def base64_index_scan(fd: int, size: int, label_dim: int, block: int = ...) -> dict[str, Any]: ...
def base64_decode(data: bytes) -> bytes | None: ...
def read_file(path: bytes) -> bytes: ...
def base64_decode_file(fd: int, offset: int, length: int) -> bytes | None: ...
def base64_decode_batch(
    fd: int, offsets: np.ndarray, lengths: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]: ...

# the per-pixel tail of the image pipeline (src/native/image_pixels_bindings.cpp)
def image_pixels(
    source: np.ndarray, flip: bool, ops: list[tuple[Any, ...]], out: np.ndarray, chw: bool, reverse_channels: bool
) -> None: ...
