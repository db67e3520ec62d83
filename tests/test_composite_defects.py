"""Defects a review of the composite reader found; each test failed before its fix.

* truncate + a ``defines_mb_size`` stream: one length mismatch anywhere stops counting on the defining stream;
* plug-in keys above 2^63 in some chunks only: the key column becomes float64 and joins other keys' data;
* hashed keys of a plug-in with several chunks lose their hashing and join nothing;
* stream ids repeat across the deserializers of a composite (CNTK's Bundler renumbers them);
* the native key join and lookup keep pointers into arrays they converted and freed (a crash).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np

from cntkio import (
    ChunkIndex,
    CTFDeserializer,
    DenseStream,
    Deserializer,
    MinibatchSource,
    StreamDef,
    StreamDefs,
    StreamInformation,
)
from cntkio._src.common.keys import HashedKeys


class Labels(Deserializer):
    """A plug-in: one float per sequence (stream ``name``), the keys as given, chunk boundaries as given."""

    def __init__(self, keys: list[Any], values: list[float], bounds: list[int], name: str = "label"):
        self.keys, self.values, self.bounds = keys, values, bounds
        self.info = StreamInformation(name, 0, "dense", np.dtype(np.float32), (1,))

    def stream_infos(self) -> list[StreamInformation]:
        return [self.info]

    def num_chunks(self) -> int:
        return len(self.bounds) - 1

    def chunk_keys(self, a: int, b: int) -> Any:
        return self.keys[a:b]

    def chunk_index(self, chunk_id: int) -> ChunkIndex:
        a, b = self.bounds[chunk_id], self.bounds[chunk_id + 1]
        return ChunkIndex(chunk_id, self.chunk_keys(a, b), np.ones(b - a, dtype=np.int64))

    def get_chunk(self, chunk_id: int) -> dict[str, DenseStream]:
        a, b = self.bounds[chunk_id], self.bounds[chunk_id + 1]
        values = np.array(self.values[a:b], dtype=np.float32).reshape(-1, 1)
        return {self.info.name: DenseStream(values, np.arange(b - a + 1, dtype=np.int64))}


def _ctf(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


# ------------------------------------------------------------------------------------------------ lengths
def test_truncate_still_counts_samples_on_the_defines_mb_size_stream(tmp_path: Path) -> None:
    """x and z carry 3 samples a sequence (z only 2 for key 1), y (one sample a sequence) defines the
    minibatch size. With ``pad`` the sweep is 6 samples (one per sequence, counted on y); ``truncate`` must
    only cut the streams of key 1, not switch every sequence's length to min(x, z) (join.py
    ``_combine_lengths`` returns the shortest lengths before looking at the defining deserializer)."""
    x = _ctf(tmp_path / "x.ctf", "".join(f"{i} |x {i}\n" * 3 for i in range(6)))
    z = _ctf(tmp_path / "z.ctf", "".join(f"{i} |z {i}\n" * (2 if i == 1 else 3) for i in range(6)))
    y = _ctf(tmp_path / "y.ctf", "".join(f"{i} |y 1\n" for i in range(6)))

    def open_source(policy: str) -> MinibatchSource:
        return MinibatchSource(
            [
                CTFDeserializer(x, StreamDefs(x=StreamDef(field="x", shape=1))),
                CTFDeserializer(z, StreamDefs(z=StreamDef(field="z", shape=1))),
                CTFDeserializer(y, StreamDefs(y=StreamDef(field="y", shape=1, defines_mb_size=True))),
            ],
            randomize=False,
            max_sweeps=1,
            length_mismatch=policy,
        )

    padded = open_source("pad")
    assert padded.sweep_size == 6
    truncated = open_source("truncate")
    assert truncated.sweep_size == 6  # 17 on the reviewed change: counted on min(x, z), not on y
    minibatch = truncated.next_minibatch(2)
    assert minibatch["y"].num_sequences == 2
    assert minibatch["z"].sequence_lengths.tolist() == [3, 2]
    assert minibatch["x"].sequence_lengths.tolist() == [3, 2]


# --------------------------------------------------------------------------------------------------- keys
def test_plugin_keys_above_2_63_in_one_chunk_do_not_blur_the_others(tmp_path: Path) -> None:
    """A plug-in whose first chunk lists keys below 2^63 and whose second chunk lists one above: the chunks'
    int64 and uint64 columns are concatenated into float64 (keys.py ``KeyColumn.concatenate``) and cast back
    to int64 for the join (``NumericKeys.native``), so 2^53 + 1 becomes 2^53: the primary's key 2^53, which
    the plug-in lacks, silently gets the label of key 2^53 + 1, and 2^63 + 5 is dropped."""
    p, big = 2**53, 2**63 + 5
    primary = _ctf(tmp_path / "p.ctf", f"{p} |x 1\n7 |x 2\n{big} |x 3\n")
    labels = Labels([p + 1, 7, big], [20.0, 70.0, 30.0], [0, 2, 3])
    source = MinibatchSource(
        [CTFDeserializer(primary, StreamDefs(x=StreamDef(field="x", shape=1))), labels], randomize=False, max_sweeps=1
    )
    report = source.join_report
    assert report is not None
    assert report.deserializers[1].missing.keys == (p,)
    minibatch = source.next_minibatch(10)
    assert [k for _, k in minibatch.sequence_keys] == [7, big]
    assert minibatch["label"].values[:, 0].tolist() == [70.0, 30.0]
    assert [k for _, k in minibatch["label"].keys] == [7, big]  # integers, not floats


def _cntk_hash(text: str) -> int:
    h = 5381
    for byte in text.encode():
        h = ((h * 33) ^ (byte - 256 if byte > 127 else byte)) % 2**64
    return h


class HashedLabels(Labels):
    """A plug-in that keeps its keys hashed (CNTK's hashSequenceKeys), as ``HashedKeys`` per chunk."""

    def chunk_keys(self, a: int, b: int) -> Any:
        return HashedKeys(np.array([_cntk_hash(k) for k in self.keys[a:b]], dtype=np.uint64))


class TextPrimary(Labels):
    pass


def test_hashed_keys_of_a_plugin_with_several_chunks_stay_hashed() -> None:
    """With one chunk the hashed keys join the primary's text keys; with two chunks
    ``KeyColumn.concatenate`` (keys.py) turns the HashedKeys into plain NumericKeys, which then compare as
    decimal texts of the hashes: nothing joins ("Could not reconcile data ...")."""
    names = [f"utt{i}" for i in range(6)]
    values = [float(i) for i in range(6)]
    for bounds in ([0, 6], [0, 3, 6]):
        primary = TextPrimary(names, values, [0, 6], name="p")
        source = MinibatchSource([primary, HashedLabels(names, values, bounds)], randomize=False, max_sweeps=1)
        assert source.join_report is not None and source.join_report.dropped == 0, bounds
        minibatch = source.next_minibatch(100)
        assert minibatch["label"].values[:, 0].tolist() == values


# ------------------------------------------------------------------------------------------------ streams
def test_stream_ids_are_unique_across_the_deserializers_of_a_composite(tmp_path: Path) -> None:
    """CNTK's Bundler renumbers the streams of all deserializers (``stream->m_id = m_streams.size()``);
    the composite keeps each deserializer's own numbering (corpus.py appends the infos as they are), so
    ``x`` and ``y`` both have ``m_id == 0``."""
    x = _ctf(tmp_path / "x.ctf", "0 |x 1\n1 |x 2\n")
    y = _ctf(tmp_path / "y.ctf", "1 |y 3\n0 |y 4\n")
    source = MinibatchSource(
        [
            CTFDeserializer(x, StreamDefs(x=StreamDef(field="x", shape=1))),
            CTFDeserializer(y, StreamDefs(y=StreamDef(field="y", shape=1))),
        ]
    )
    infos = source.stream_infos()
    assert [info.m_id for info in infos] == list(range(len(infos)))


# ------------------------------------------------------------------------------------------ native entries
def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120, check=False
    )


def test_native_key_join_of_int64_columns_does_not_crash() -> None:
    """``_native.join_keys`` takes integer columns as uint64 arrays; an int64 array (what kind 0, "signed",
    naturally is) is converted by nanobind into a temporary that ``to_key_column`` (keys_bindings.cpp) lets go
    before the join reads it: a use after free (a segfault for arrays the allocator unmaps)."""
    result = _run(
        """
        import numpy as np
        from cntkio import _native
        keys = np.arange(1_000_000, dtype=np.int64)
        try:
            match, duplicates, _ = _native.join_keys((0, keys, None), (0, keys[::-1].copy(), None), False, False)
        except (TypeError, ValueError):
            print("refused")
        else:
            assert duplicates == 0 and (match == np.arange(999_999, -1, -1)).all()
            print("joined")
        """
    )
    assert result.returncode == 0, f"crashed with {result.returncode}: {result.stderr[-500:]}"


def test_native_lookup_of_a_converted_match_array_does_not_crash() -> None:
    """``ChunkStore.set_lookup`` casts a match array that is neither int32 nor int64 with conversion into a
    local ndarray (store_bindings.cpp ``set_lookup``): the pointer it stores (and validates at once) belongs to a
    temporary freed at the end of the branch, while only the original array is kept alive."""
    result = _run(
        """
        import numpy as np
        from cntkio import _native
        store = _native.ChunkStore([[(False, 1, "f", 4)], [(False, 1, "f", 4)]], [1, 1])
        try:
            store.set_lookup(1, np.zeros(1_000_000, dtype=np.uint32), np.array([0, 5], dtype=np.int64))
        except (TypeError, ValueError):
            print("refused")
        else:
            print("set")
        """
    )
    assert result.returncode == 0, f"crashed with {result.returncode}: {result.stderr[-500:]}"
