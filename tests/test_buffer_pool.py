"""The pool of reusable chunk buffers (``cntkio._native.reusable_buffer``, src/native/buffer_pool.hpp): blocks are
writable, never overlap while alive, and are reused after NumPy frees them, also beyond the pool's cap (whose
pages go back to the system)."""

from __future__ import annotations

import numpy as np

from cntkio import _native

SIZES = [0, 1, 100, 65_536, 65_537, 602_112, 3 << 20, 9 << 20]


def fill(blocks: list[np.ndarray]) -> None:
    for number, block in enumerate(blocks):
        block[:] = number % 251


def check(blocks: list[np.ndarray]) -> None:
    for number, block in enumerate(blocks):
        assert block.size == 0 or (block == number % 251).all(), f"block {number} was overwritten by another"


def test_live_blocks_are_distinct_and_writable():
    blocks = [_native.reusable_buffer(size) for size in SIZES * 3]
    assert [b.size for b in blocks] == SIZES * 3
    fill(blocks)
    check(blocks)


def test_freed_blocks_are_reused_and_stay_distinct():
    first = [_native.reusable_buffer(602_112) for _ in range(20)]
    addresses = {b.ctypes.data for b in first}
    del first
    again = [_native.reusable_buffer(602_112) for _ in range(40)]
    assert addresses <= {b.ctypes.data for b in again}, "freed blocks of the same size are taken again"
    fill(again)
    check(again)


def test_blocks_beyond_the_pool_cap_are_released_and_still_usable():
    blocks = [_native.reusable_buffer(1 << 20) for _ in range(300)]  # 300 MiB: more than the pool keeps (256)
    fill(blocks)
    del blocks
    large = [_native.reusable_buffer(9 << 20) for _ in range(30)]  # unmapped when freed beyond the cap
    fill(large)
    del large
    blocks = [_native.reusable_buffer(1 << 20) for _ in range(300)]
    fill(blocks)
    check(blocks)
    assert len({b.ctypes.data for b in blocks}) == 300
