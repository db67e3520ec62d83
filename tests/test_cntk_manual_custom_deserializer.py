"""CNTK's manual ``Manual/Manual_How_to_write_a_custom_deserializer.ipynb`` (CNTK 2.7, MIT licence), ported: its code
cells with ``import cntk``/``cntk.io`` replaced by cntkio (``import cntkio as cntk`` keeps ``cntk.io.X`` literal), its
recorded outputs as assertions.

Changes, each needed outside CNTK: the build-system lines (``cntk.tests.test_utils``, ``set_fixed_random_seed``) are
dropped; the CSV file of section 2 has 2,000 rows instead of 200,000 (300 MB) and the deserializer 64 KB chunks
instead of 32 MB, so that the test reads many chunks in a second (64 KB is the least the manual's code supports: it
steps back 64 KB to find a chunk's first line); ``df.as_matrix()`` (removed in pandas 1.0) is ``df.to_numpy()``, and
without pandas the chunk is parsed with the ``csv`` module. The randomized order the manual recorded is CNTK's
randomizer's: ``cntkio.io.MinibatchSource(..., compat=True)`` reproduces it exactly; the manual's own call (cntkio's
default randomizer) is checked to give a permutation.
"""

# The manual's code as CNTK wrote it: %-formatting, int(math.ceil(...)), an unused loop variable.
# ruff: noqa: UP031, RUF046, B007

from __future__ import annotations

import csv
import io
import math
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy import sparse as sp

import cntkio as cntk
import cntkio.io  # (cntk.io below)
from cntkio.io import MinibatchSource, UserDeserializer

try:
    import pandas as pd
except ImportError:  # (CI has NumPy and SciPy only)
    pd = None


# --- cell 3 --------------------------------------------------------------------------------------------------------
# This class will take a simple dictionary of {name => (data)} in the constructor
# and will expose a single chunk.
class FromData(UserDeserializer):
    def __init__(self, data_streams: Any) -> None:
        super().__init__()
        if not data_streams:
            raise (ValueError("at least one stream must be specified, in the form name=data"))

        self._data = data_streams  # [name] -> numpy.array or scipy.sparse.csr_matrix or list of those
        self._streams = []  # meta information about exposed stream
        num_sequences = -1  # total number of sequences (can be of length 1 in sample mode)
        # must be the same across all streams

        # Infer the meta information about streams
        for name, value in data_streams.items():
            is_sequence = isinstance(value, list)  # is list - single elements are considered sequences

            # Infer sparsity
            element = value[0] if is_sequence else value
            if isinstance(element, np.ndarray):
                is_sparse = False
            elif isinstance(element, sp.csr_matrix):
                is_sparse = True
            else:
                raise TypeError("data must be a numpy.array or scipy.sparse.csr_matrix, or a list of those")

            # Infer sample shape
            sample_shape = value[0].shape[1:] if is_sequence else value.shape[1:]

            # Check that the number of sequences across all streams is the same
            stream_num_sequences = len(value) if is_sequence else value.shape[0]
            if num_sequences == -1:
                if stream_num_sequences == 0:
                    raise (ValueError("data is empty"))
                num_sequences = stream_num_sequences
            elif stream_num_sequences != num_sequences:
                raise ValueError("all data items must have the same first dimension")

            self._streams.append(dict(name=name, shape=sample_shape, is_sparse=is_sparse))

    # Return meta information about streams
    def stream_infos(self) -> Any:
        return [
            cntk.io.StreamInformation(
                stream["name"], index, ["dense", "sparse"][stream["is_sparse"]], np.float32, stream["shape"]
            )
            for index, stream in enumerate(self._streams)
        ]

    # We have a single chunk only
    def num_chunks(self) -> int:
        return 1

    # actually return out chunk data as a dictionary name => data
    # where the data is a list of sequences or a csr_matrix/ndarray of samples
    def get_chunk(self, chunk_id: int) -> Any:
        if chunk_id != 0:
            raise ValueError("Unexpected chunk id")
        return self._data


# --- cell 5 --------------------------------------------------------------------------------------------------------
def test_cell_5_dense_and_sparse_samples(capsys: pytest.CaptureFixture[str]) -> None:
    # Dense and sparse samples non randomized
    print("Non randomized")
    N = 5
    X = np.arange(3 * N).reshape(N, 3).astype(np.float32)  # 5 rows of 3 values
    Y = sp.csr_matrix(np.array([[1, 0, 0], [0, 2, 0], [0, 0, 3], [4, 0, 0], [0, 5, 0]], dtype=np.float32))

    mbs = MinibatchSource([FromData(dict(x=X, y=Y))], randomize=False)
    mb = mbs.next_minibatch(3)
    result = mb[mbs.streams["y"]].data.asarray()
    assert (result == np.array([[[1, 0, 0]], [[0, 2, 0]], [[0, 0, 3]]], dtype=np.float32)).all()
    print("Sparse")
    print(result)

    result = mb[mbs.streams["x"]].data.asarray()
    assert (result == np.array([[[0.0, 1.0, 2.0]], [[3.0, 4.0, 5.0]], [[6.0, 7.0, 8.0]]], dtype=np.float32)).all()
    print("Dense")
    print(result)

    print("Randomized")
    mbs1 = MinibatchSource([FromData(dict(x=X, y=Y))], randomize=True)
    mb1 = mbs1.next_minibatch(3)
    print("Sparse")
    print(mb1[mbs1.streams["y"]].data.asarray())
    print("Dense")
    print(mb1[mbs1.streams["x"]].data.asarray())

    # The recorded output (NumPy's print of the same arrays; the randomized part is CNTK's randomizer's order).
    printed = capsys.readouterr().out
    assert printed.startswith("Non randomized\nSparse\n")
    np.testing.assert_equal(result, np.array([[[0, 1, 2]], [[3, 4, 5]], [[6, 7, 8]]], dtype=np.float32))
    sparse_random = mb1[mbs1.streams["y"]].data.asarray()
    dense_random = mb1[mbs1.streams["x"]].data.asarray()
    assert isinstance(sparse_random, np.ndarray) and sparse_random.shape == dense_random.shape == (3, 1, 3)
    items = (dense_random[:, 0, 0] / 3).astype(int)  # (cntkio's default randomizer: some three items, once each)
    assert len(set(items.tolist())) == 3 and (sparse_random[:, 0] == Y.toarray()[items]).all()

    recorded = MinibatchSource([FromData(dict(x=X, y=Y))], randomize=True, compat=True).next_minibatch(3)
    assert recorded[mbs1.streams["y"].name].data.asarray().tolist() == [[[0, 5, 0]], [[1, 0, 0]], [[4, 0, 0]]]
    assert recorded["x"].data.asarray().tolist() == [[[12, 13, 14]], [[0, 1, 2]], [[9, 10, 11]]]


# --- cell 7 (2,000 rows instead of 200,000) ------------------------------------------------------------------------
ROWS = 2000


@pytest.fixture
def big_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    filename = str(tmp_path / "big_file.tmp")

    with open(filename, "w") as data:
        w = csv.writer(data, quoting=csv.QUOTE_ALL)
        for i in range(ROWS):
            w.writerow([float(i) for j in range(151)])
            if i % 200 == 0:
                print("%d records generated" % i)
    print("Input file is generated")
    printed = capsys.readouterr().out.splitlines()
    assert printed == [f"{i} records generated" for i in range(0, ROWS, 200)] + ["Input file is generated"]
    return filename


# --- cell 9 (64 KB chunks by default; pandas' to_numpy for as_matrix, or the csv module) --------------------------
class CSVDeserializer(UserDeserializer):
    def __init__(self, filename: str, streams: Any, chunksize: int = 64 * 1024) -> None:
        super().__init__()
        self._chunksize = chunksize
        self._filename = filename

        # Create the information about streams
        # based on the user provided data
        self._streams = [
            cntk.io.StreamInformation(s["name"], i, "dense", np.float32, s["shape"]) for i, s in enumerate(streams)
        ]

        # Define the number of chunks based on the file size
        self._num_chunks = int(math.ceil(os.stat(filename).st_size / chunksize))

        # Based on the information provided by the user decide what column span
        # belongs to which stream
        self._offsets = [0]
        for i, s in enumerate(self._streams):
            self._offsets.append(s.sample_shape[0] + self._offsets[-1])

    def stream_infos(self) -> Any:
        return self._streams

    def num_chunks(self) -> int:
        return self._num_chunks

    # Ok, let's actually get the work done
    def get_chunk(self, chunk_id: int) -> Any:
        fin = open(self._filename, "rb")  # noqa: SIM115 (as the manual)

        # Some constants
        endline = "\n" if sys.version_info < (3,) else ord("\n")
        _64KB = 64 * 1024

        # We would like to cut our chunk exactly on the line boundary.
        # So let's make sure if the chunk starts in the middle
        # of a row we move left to the beginning of this row
        offset = chunk_id * self._chunksize
        if offset != 0:  # Need to find the beginning of the current row
            while offset > 0:
                offset -= _64KB  # move left 64 KB
                fin.seek(offset)
                buf = fin.read(_64KB)  # read the data
                index = buf.rindex(endline)  # find the last \n and adapt the chunk offset
                if index != -1:  # Found, breaking
                    offset += index
                    break
            if offset == 0:
                raise ValueError("A single row does not fit into the chunk, consider increasing the chunk size")

        # Now read the chunk data with adapted offset
        fin.seek(offset)
        size = (chunk_id + 1) * self._chunksize - offset
        data = fin.read(size)
        fin.close()  # (not in the manual: a test must not leave files open)
        last_endline = data.rindex(endline)  # Make sure we drop the last partial line
        # It will be consumed by the next chunk
        if last_endline == -1:
            raise ValueError("A single row does not fit into the chunk, consider increasing the chunk size")
        data = data[: last_endline + 1]

        # Parse the csv using pandas
        if pd is not None:
            df = pd.read_csv(io.BytesIO(data), engine="c", dtype=np.float32, header=None)
            mat = df.to_numpy()  # (the manual: df.as_matrix(), removed in pandas 1.0)
        else:  # (no pandas: the csv module, skipping blank lines as read_csv does)
            rows = [row for row in csv.reader(io.StringIO(data.decode())) if row]
            mat = np.array(rows, dtype=np.float32)

        # Create a dictionary {name => data},
        # where data spans the number of columns specified by the user
        result = {}
        for i, stream in enumerate(self._streams):
            result[stream.m_name] = np.ascontiguousarray(mat[:, self._offsets[i] : self._offsets[i + 1]])
        return result


# --- cell 11 -------------------------------------------------------------------------------------------------------
def test_cell_11_reads_the_big_file_through_the_csv_deserializer(
    big_file: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import time

    filename = big_file
    d = CSVDeserializer(filename=filename, streams=[dict(name="x", shape=(150,)), dict(name="y", shape=(1,))])
    mbs = MinibatchSource([d], randomize=False, max_sweeps=1)

    total_num_samples = 0
    start = time.time()
    seen = []  # (not in the manual: every row once, in file order, x and y agreeing)
    while True:
        mb = mbs.next_minibatch(128)
        if not mb:
            break
        total_num_samples += mb[mbs.streams.x].number_of_samples
        x, y = mb[mbs.streams.x].asarray(), mb[mbs.streams.y].asarray()
        assert (x == y).all()
        seen += y[:, 0, 0].astype(int).tolist()
        if total_num_samples % 1280 == 0:
            sys.stdout.write(".")
    end = time.time()
    print()
    print(
        "Total number of samples %d, speed %f samples per second"
        % (total_num_samples, total_num_samples / max(end - start, 1e-9))
    )

    assert d.num_chunks() > 20  # (many chunks, each cut at a line)
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == "." * (ROWS // 1280)
    assert printed[1].startswith(f"Total number of samples {ROWS}, speed ")
    assert seen == list(range(ROWS))
