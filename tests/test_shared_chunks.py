"""The loader workers' chunk exchange: a chunk one worker parsed reaches another exactly (any streams, dense and
sparse, empty ones included), and a chunk whose parse counted errors is parsed by every worker."""

from __future__ import annotations

import itertools
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from cntkio import DenseStream, SparseStream
from cntkio._src.formats.protocol import ParsedChunk
from cntkio._src.integrations import shm
from cntkio._src.integrations.shared_chunks import ChunkExchange

pytestmark = pytest.mark.skipif(not shm.available(), reason="needs /dev/shm")

_jobs = itertools.count()


@st.composite
def chunks(draw: st.DrawFn) -> dict[str, DenseStream | SparseStream]:
    lengths = draw(st.lists(st.integers(0, 4), min_size=0, max_size=6))
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    samples = int(offsets[-1])
    chunk: dict[str, DenseStream | SparseStream] = {}
    for number in range(draw(st.integers(1, 3))):
        dtype = draw(st.sampled_from([np.float32, np.float64]))
        if draw(st.booleans()):
            width = draw(st.integers(1, 3))
            values = draw(hnp.arrays(dtype, (samples, width), elements=st.floats(-1e3, 1e3, width=32)))
            chunk[f"d{number}"] = DenseStream(values, offsets)
        else:
            per_sample = draw(st.lists(st.integers(0, 3), min_size=samples, max_size=samples))
            indptr = np.concatenate([[0], np.cumsum(per_sample)]).astype(np.int64)
            nnz = int(indptr[-1])
            indices = np.concatenate([np.arange(n, dtype=np.int32) for n in per_sample] or [np.zeros(0, np.int32)])
            values = draw(hnp.arrays(dtype, nnz, elements=st.floats(-1e3, 1e3, width=32)))
            chunk[f"s{number}"] = SparseStream(values, indices.astype(np.int32), indptr, offsets, 7)
    return chunk


def never() -> ParsedChunk:
    raise AssertionError("parsed again: the published chunk was not used")


@settings(max_examples=40, deadline=None)
@given(chunk=chunks())
def test_a_published_chunk_reaches_the_other_worker_exactly(chunk: dict[str, DenseStream | SparseStream]) -> None:
    token = f"exchange{next(_jobs)}"
    job = shm.job_name(os.getpid(), token)
    try:
        first, second = ChunkExchange(job, 0, 0, 2, "c"), ChunkExchange(job, 0, 1, 2, "c")
        # the publisher reads it back from the published file too (one copy in memory): both get the chunk exactly
        for received in (first.load((0, 3, 0), lambda: ParsedChunk(chunk)), second.load((0, 3, 0), never)):
            assert received is not None and received.keys() == chunk.keys()
            for name, stream in chunk.items():
                got = received[name]
                assert type(got) is type(stream)
                for field in ("values", "seq_offsets", "indices", "indptr"):
                    if hasattr(stream, field):
                        expected = getattr(stream, field)
                        np.testing.assert_array_equal(getattr(got, field), expected)
                        assert getattr(got, field).dtype == expected.dtype
                if isinstance(stream, SparseStream):
                    assert isinstance(got, SparseStream) and got.dim == stream.dim
        first.close()
        second.close()
    finally:
        shm.remove_job(os.getpid(), token)


def test_a_chunk_with_counted_errors_is_parsed_by_each_worker() -> None:
    token = "exchange-errors"
    job = shm.job_name(os.getpid(), token)
    try:
        first, second = ChunkExchange(job, 0, 0, 2, "c"), ChunkExchange(job, 0, 1, 2, "c")
        bad = ParsedChunk({"x": DenseStream(np.zeros((2, 1), np.float32), np.array([0, 1, 2]))},
                          invalid=np.array([0, 1], np.uint8))  # fmt: skip
        parsed = []
        for exchange in (first, second):
            exchange.load((0, 0, 0), lambda: parsed.append(1) or bad)  # type: ignore[func-returns-value]
        assert len(parsed) == 2
    finally:
        shm.remove_job(os.getpid(), token)
