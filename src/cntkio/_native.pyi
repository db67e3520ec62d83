"""Type stub of the native extension (src/native/module.cpp)."""

from typing import Any

import numpy as np

def ctf_index(
    data: np.ndarray,
    begin: int,
    first_line: int,
    mode: int,
    aliases: list[tuple[str, bool, int]],
    defining_stream: int,
    count_lines: bool,
    keep_empty_lines: bool,
    require_all_inputs: bool,
    release_mapped_pages: bool = False,
) -> dict[str, Any]: ...
def ctf_parse(
    data: np.ndarray,
    base: int,
    starts: np.ndarray,
    ends: np.ndarray,
    mode: int,
    aliases: list[tuple[str, bool, int]],
    double_precision: bool,
    sort_sparse: bool,
) -> tuple[list[tuple[np.ndarray, ...]], dict[str, np.ndarray], dict[str, int]]: ...
def ctf_chunk_starts(offsets: np.ndarray, ends: np.ndarray, limit: int) -> np.ndarray: ...
def compat_block_order(
    units_per_chunk: list[int], samples_per_chunk: list[int], window: int, sample_window: bool, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]: ...
