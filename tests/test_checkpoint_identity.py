"""Checkpoints travel with the data: a state restores on a copy of the corpus elsewhere (new directory, new
modification times, renamed files) and continues bit-exactly; it is refused, naming what differs (which file by its
position and name, which option), when the data or the configuration that shapes the order really changed."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cntkio import (
    CBFDeserializer,
    ChunkIndex,
    CNTKIOError,
    ConfigError,
    CTFDeserializer,
    DenseStream,
    Deserializer,
    MinibatchSource,
    RecordDeserializer,
    StreamDef,
    StreamDefs,
    StreamInformation,
    write_cbf,
)
from cntkio._src.formats.htk_features import HTKFeatureDeserializer
from cntkio._src.formats.identity import LISTED_FILES, RANGE_BYTES, SAMPLED_RANGES, same
from cntkio.htk import write_archive, write_scp
from order_helpers import (
    STREAMS,
    Data,
    assert_exactly_once,
    keys_of,
    make_data,
    read,
    snapshot,
    unit_stream,
    write_ctf,
)

CHUNK = 300
SIZES = [7, 11, 5]
MODES: dict[str, dict[str, Any]] = {
    "sequence": {"randomization_window_in_chunks": 3, "randomization_seed": 5},
    "frame": {
        "frame_mode": True,
        "randomization_window_in_chunks": 0,
        "randomization_window_in_samples": 40,
        "randomization_seed": 2,
    },
    "bptt": {"truncation_length": 3, "randomization_window_in_chunks": 2, "randomization_seed": 1},
    "bucketing": {"bucket_by_length": 12, "randomization_window_in_chunks": 3, "randomization_seed": 4},
    "in order": {"randomize": False},
}


def copy_elsewhere(paths: list[Path], directory: Path, prefix: str = "moved") -> list[Path]:
    """The files copied to another directory under other names, with other modification times (and other
    inodes and change times: a copy onto another node's disk)."""
    directory.mkdir(parents=True, exist_ok=True)
    copies = []
    for number, path in enumerate(paths):
        copy = directory / f"{prefix}-{number}{path.suffix}"
        shutil.copyfile(path, copy)
        os.utime(copy, ns=(10**18 + number, 10**18 + number))
        copies.append(copy)
    return copies


def run(
    make: Any, options: dict[str, Any], stop: int | None = None, state: Any = None, after: int = 0
) -> tuple[list[Any], Any]:
    """Snapshots of the minibatches a source (``make()``) reads over two sweeps (sizes :data:`SIZES` in turn, from
    the ``after``-th on), restored from ``state`` first; with ``stop``, only that many, and the state after them."""
    with MinibatchSource(make(), max_sweeps=2, **options) as source:
        if state is not None:
            source.restore_from_checkpoint(json.loads(json.dumps(state)))
        sizes = SIZES[after % len(SIZES) :] + SIZES[: after % len(SIZES)]
        minibatches = [snapshot(m) for m in read(source, sizes, limit=stop)]
        return minibatches, source.get_checkpoint_state()


def assert_continues(make_original: Any, make_copy: Any, options: dict[str, Any], stop: int = 4) -> None:
    """A state taken on the original restores on the copy, and what follows equals an uninterrupted run."""
    reference, _ = run(make_original, options)
    head, state = run(make_original, options, stop=stop)
    tail, _ = run(make_copy, options, state=state, after=len(head))
    assert head + tail == reference


def refusal(make: Any, state: Any, **options: Any) -> str:
    with MinibatchSource(make(), max_sweeps=2, **options) as source, pytest.raises(ConfigError) as error:
        source.restore_from_checkpoint(json.loads(json.dumps(state)))
    return str(error.value)


def state_after(make: Any, reads: int = 3, **options: Any) -> dict[str, Any]:
    with MinibatchSource(make(), max_sweeps=2, **options) as source:
        read(source, SIZES, limit=reads)
        return source.get_checkpoint_state()


@pytest.fixture
def data(tmp_path: Path) -> Data:
    directory = tmp_path / "original"
    directory.mkdir()
    return make_data(directory, 60, max_length=5, seed=3)


# ------------------------------------------------------------------------------------------- copies restore
@pytest.mark.parametrize("mode", list(MODES))
def test_a_copy_elsewhere_renamed_restores_and_continues_bit_exactly(data: Data, tmp_path: Path, mode: str) -> None:
    [copy] = copy_elsewhere([data.path], tmp_path / "node2" / "local-disk")
    assert copy.name != data.path.name and os.stat(copy).st_mtime_ns != os.stat(data.path).st_mtime_ns
    assert_continues(
        lambda: CTFDeserializer(data.path, STREAMS, chunk_size_in_bytes=CHUNK),
        lambda: CTFDeserializer(copy, STREAMS, chunk_size_in_bytes=CHUNK),
        MODES[mode],
    )


def test_a_copy_restores_whether_or_not_its_index_was_cached(data: Data, tmp_path: Path) -> None:
    """A node with a warm index cache and one that indexes the copy afresh agree on the identity."""
    [copy] = copy_elsewhere([data.path], tmp_path / "node2")
    cached = {"chunk_size_in_bytes": CHUNK, "cache_index": True}
    CTFDeserializer(data.path, STREAMS, **cached).close()  # writes the cache
    assert_continues(
        lambda: CTFDeserializer(data.path, STREAMS, **cached),
        lambda: CTFDeserializer(copy, STREAMS, chunk_size_in_bytes=CHUNK),
        MODES["sequence"],
    )
    fresh = CTFDeserializer(data.path, STREAMS, chunk_size_in_bytes=CHUNK)
    warm = CTFDeserializer(data.path, STREAMS, **cached)
    assert fresh.identity() == warm.identity()


def shards(directory: Path, count: int = 3) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    lengths = np.random.default_rng(7).integers(1, 6, size=25 * count).tolist()
    whole = make_data(directory, len(lengths), seed=7)
    lines = whole.path.read_text().splitlines(keepends=True)
    starts = np.concatenate([[0], np.cumsum([sum(lengths[25 * i : 25 * i + 25]) for i in range(count)])])
    paths = []
    for number in range(count):
        path = directory / f"part-{number:03}.ctf"
        path.write_text("".join(lines[starts[number] : starts[number + 1]]))
        paths.append(path)
    whole.path.unlink()
    return paths


def test_a_sharded_corpus_copied_and_renamed_restores(tmp_path: Path) -> None:
    original = shards(tmp_path / "original")
    copies = copy_elsewhere(original, tmp_path / "node2", prefix="shard")
    assert_continues(
        lambda: CTFDeserializer([str(p) for p in original], STREAMS, chunk_size_in_bytes=CHUNK),
        lambda: CTFDeserializer([str(p) for p in copies], STREAMS, chunk_size_in_bytes=CHUNK),
        MODES["sequence"],
    )


def y_file(data: Data, path: Path) -> Path:
    order = np.random.default_rng(1).permutation(len(data.keys)).tolist()
    lines = [f"{data.keys[i]} |y {i % 7}:{t + 1}" for i in order for t in range(data.lengths[i])]
    path.write_text("\n".join(lines) + "\n")
    return path


def composite(x_path: Path, y_path: Path) -> list[Deserializer]:
    return [
        CTFDeserializer(x_path, StreamDefs(x=StreamDef(field="x", shape=2)), chunk_size_in_bytes=CHUNK),
        CTFDeserializer(y_path, StreamDefs(y=StreamDef(field="y", shape=7, is_sparse=True)), chunk_size_in_bytes=150),
    ]


def test_a_composite_source_copied_and_renamed_restores(data: Data, tmp_path: Path) -> None:
    labels = y_file(data, data.path.parent / "labels.ctf")
    x_copy, y_copy = copy_elsewhere([data.path, labels], tmp_path / "node2")
    for mode in ("sequence", "bptt"):
        assert_continues(lambda: composite(data.path, labels), lambda: composite(x_copy, y_copy), MODES[mode])


def test_a_cbf_copy_restores(data: Data, tmp_path: Path) -> None:
    cbf = write_cbf(CTFDeserializer(data.path, STREAMS, chunk_size_in_bytes=CHUNK), tmp_path / "data.cbf")
    [copy] = copy_elsewhere([cbf], tmp_path / "node2")
    assert_continues(lambda: CBFDeserializer(cbf), lambda: CBFDeserializer(copy), MODES["frame"])


def test_merged_states_restore_on_a_copy_with_another_partition_count(data: Data, tmp_path: Path) -> None:
    [copy] = copy_elsewhere([data.path], tmp_path / "node2")
    options = {"randomization_window_in_chunks": 2, "randomization_seed": 9, "max_sweeps": 1}
    seen: list[Any] = []
    states = []
    for index in range(2):
        with MinibatchSource(CTFDeserializer(data.path, STREAMS, chunk_size_in_bytes=CHUNK), **options) as source:
            for minibatch in read(source, 6, limit=2, num_data_partitions=2, partition_index=index):
                seen += keys_of(minibatch)
            states.append(json.loads(json.dumps(source.get_checkpoint_state())))
    merged = MinibatchSource.merge_checkpoints(states)
    for index in range(3):
        with MinibatchSource(CTFDeserializer(copy, STREAMS, chunk_size_in_bytes=CHUNK), **options) as source:
            source.restore_from_checkpoint(merged)
            seen += unit_stream(source, 6, num_data_partitions=3, partition_index=index)
    assert_exactly_once(seen, data.keys)


def test_merge_refuses_states_of_other_configurations_naming_the_option(data: Data) -> None:
    def make() -> CTFDeserializer:
        return CTFDeserializer(data.path, STREAMS, chunk_size_in_bytes=CHUNK)

    states = []
    for index, seed in enumerate((1, 2)):
        with MinibatchSource(make(), randomization_seed=seed, randomization_window_in_chunks=2) as source:
            read(source, 6, limit=1, num_data_partitions=2, partition_index=index)
            states.append(source.get_checkpoint_state())
    with pytest.raises(ConfigError, match=r"randomization_seed: 2 in state 1, 1 in state 0"):
        MinibatchSource.merge_checkpoints(states)


# ------------------------------------------------------------------------------------------- changes refused
def rewrite(path: Path, old: bytes, new: bytes, near: float = 0.5) -> None:
    """Replaces the occurrence of ``old`` nearest to ``near`` (a fraction of the file) by ``new`` of the same
    size, and puts the modification time back."""
    assert len(old) == len(new)
    content = path.read_bytes()
    info = os.stat(path)
    places = [i for i in range(len(content)) if content.startswith(old, i)]
    at = min(places, key=lambda i: abs(i - near * len(content)))
    path.write_bytes(content[:at] + new + content[at + len(old) :])
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))
    assert os.path.getsize(path) == len(content)


def test_one_value_changed_in_the_middle_keeping_the_size_is_refused_naming_the_file(data: Data) -> None:
    def make() -> CTFDeserializer:
        return CTFDeserializer(data.path, STREAMS, chunk_size_in_bytes=CHUNK)

    state = state_after(make, **MODES["sequence"])
    rewrite(data.path, b"|y 2:1", b"|y 2:9")
    message = refusal(make, state, **MODES["sequence"])
    assert f"deserializer 0 (CTFDeserializer): file 0 ('{data.path.name}' at checkpoint time" in message
    assert "other data" in message


def big_file(path: Path, sequences: int) -> Path:
    """A CTF file larger than the bytes the identity samples (so that it samples, not reads it whole)."""
    lines = [f"{i} |x {i % 10}.25 {i % 7}.5 |y {i % 7}:1" for i in range(sequences)]
    path.write_text("\n".join(lines) + "\n")
    assert path.stat().st_size > 3 * SAMPLED_RANGES * RANGE_BYTES
    return path


def test_a_big_file_changed_at_its_middle_or_in_a_sequences_layout_is_refused(tmp_path: Path) -> None:
    """A file larger than the sampled bytes: an edit at the middle is sampled; an edit that moves bytes from one
    sequence to the next (the file's size unchanged) anywhere changes the sequences' layout."""
    path = big_file(tmp_path / "big.ctf", 40_000)
    options = {"randomization_window_in_chunks": 4}

    def make() -> CTFDeserializer:
        return CTFDeserializer(path, STREAMS, chunk_size_in_bytes=1 << 16)

    state = state_after(make, **options)
    content = path.read_bytes()
    middle = len(content) // 2
    digit = next(i for i in range(middle, len(content)) if content[i : i + 1].isdigit() and content[i - 1 : i] == b" ")
    path.write_bytes(content[:digit] + (b"9" if content[digit : digit + 1] != b"9" else b"8") + content[digit + 1 :])
    assert "file 0 ('big.ctf' at checkpoint time" in refusal(make, state, **options)
    path.write_bytes(content)
    state = state_after(make, **options)
    # two neighbouring sequences outside the sampled ranges: "k |x 1.25" -> "k |x 1.2" and "k+1 |x 2.25" ->
    # "k+1 |x 2.255": the file's size and every sampled byte unchanged, the sequences' byte counts changed
    sampled = np.linspace(0, len(content) - RANGE_BYTES, SAMPLED_RANGES).astype(np.int64)
    first = next(
        k
        for k in range(1001, 40_000, 10)
        if np.all(
            (sampled + RANGE_BYTES <= content.index(b"\n%d |" % k)) | (sampled > content.index(b"\n%d |" % (k + 2)))
        )
    )
    edited = content.replace(b"\n%d |x 1.25 " % first, b"\n%d |x 1.2 " % first, 1)
    edited = edited.replace(b"\n%d |x 2.25 " % (first + 1), b"\n%d |x 2.255 " % (first + 1), 1)
    assert len(edited) == len(content) and edited != content
    path.write_bytes(edited)
    assert "file 0 ('big.ctf' at checkpoint time" in refusal(make, state, **options)


def test_other_data_is_refused(data: Data, tmp_path: Path) -> None:
    other = make_data(tmp_path, 60, max_length=5, seed=4)
    state = state_after(lambda: CTFDeserializer(data.path, STREAMS, chunk_size_in_bytes=CHUNK))
    message = refusal(lambda: CTFDeserializer(other.path, STREAMS, chunk_size_in_bytes=CHUNK), state)
    assert "deserializer 0 (CTFDeserializer): file 0" in message


def test_a_changed_shard_is_named_by_its_position_and_name(tmp_path: Path) -> None:
    original = shards(tmp_path / "original")

    def make() -> CTFDeserializer:
        return CTFDeserializer([str(p) for p in original], STREAMS, chunk_size_in_bytes=CHUNK)

    state = state_after(make)
    rewrite(original[1], b"|x 3", b"|x 8", near=0.3)
    message = refusal(make, state)
    assert "file 1 ('part-001.ctf' at checkpoint time, 'part-001.ctf' now) differs" in message
    assert "file 0" not in message and "file 2" not in message


def test_shards_in_another_order_are_refused(tmp_path: Path) -> None:
    original = shards(tmp_path / "original")
    state = state_after(lambda: CTFDeserializer([str(p) for p in original], STREAMS, chunk_size_in_bytes=CHUNK))
    message = refusal(
        lambda: CTFDeserializer([str(p) for p in original[::-1]], STREAMS, chunk_size_in_bytes=CHUNK), state
    )
    assert "file 0 ('part-000.ctf' at checkpoint time, 'part-002.ctf' now) differs" in message


def test_a_changed_secondary_of_a_composite_is_named(data: Data) -> None:
    labels = y_file(data, data.path.parent / "labels.ctf")
    state = state_after(lambda: composite(data.path, labels))
    rewrite(labels, b":1\n", b":3\n")
    message = refusal(lambda: composite(data.path, labels), state)
    assert "deserializer 1 (CTFDeserializer): file 0 ('labels.ctf' at checkpoint time" in message
    assert "deserializer 0" not in message


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"randomization_seed": 6}, "randomization_seed: 5 at checkpoint time, 6 now"),
        ({"randomization_window_in_chunks": 4}, "the randomization window: 3 at checkpoint time, 4 now"),
        ({"randomization_window_in_chunks": 0, "randomization_window_in_samples": 3}, "window's unit"),
        ({"frame_mode": True}, "frame_mode: false at checkpoint time, true now"),
        ({"truncation_length": 4}, "truncation_length: not set at checkpoint time, 4 now"),
        ({"bucket_by_length": 20}, "bucket_by_length: not set at checkpoint time, 20 now"),
        ({"randomize": False}, "randomize: true at checkpoint time, false now"),
        ({"compat": True}, "compat"),
        ({"data_slice": "[:30]"}, "data_slice"),
    ],
    ids=lambda v: str(v)[:30],
)
def test_another_order_shaping_option_is_refused_naming_it(data: Data, change: dict[str, Any], named: str) -> None:
    def make() -> CTFDeserializer:
        return CTFDeserializer(data.path, STREAMS, chunk_size_in_bytes=CHUNK)

    state = state_after(make, **MODES["sequence"])
    message = refusal(make, state, **{**MODES["sequence"], **change})
    assert named in message
    assert "file" not in message  # the data is the same


def test_another_chunk_size_is_refused_naming_the_deserializer_option(data: Data) -> None:
    state = state_after(lambda: CTFDeserializer(data.path, STREAMS, chunk_size_in_bytes=CHUNK))
    message = refusal(lambda: CTFDeserializer(data.path, STREAMS, chunk_size_in_bytes=2 * CHUNK), state)
    assert message.endswith(
        f"deserializer 0 (CTFDeserializer): option chunk_size_in_bytes: {CHUNK} at checkpoint time, {2 * CHUNK} now"
    )  # and nothing else: the file is the same


def test_a_state_of_an_earlier_cntkio_says_how_to_continue(data: Data) -> None:
    def make() -> CTFDeserializer:
        return CTFDeserializer(data.path, STREAMS, chunk_size_in_bytes=CHUNK)

    state = {**state_after(make), "fingerprint": "0123456789abcdef"}
    assert "minibatchSourcePosition' alone" in refusal(make, state)


@pytest.mark.parametrize(
    "fingerprint",
    [None, [], {"order": 3}, {"deserializers": "x"}, {"deserializers": [{"kind": "CTFDeserializer", "files": 1}]}],
)
def test_a_malformed_fingerprint_is_a_clear_refusal(data: Data, fingerprint: Any) -> None:
    def make() -> CTFDeserializer:
        return CTFDeserializer(data.path, STREAMS, chunk_size_in_bytes=CHUNK)

    state = {**state_after(make), "fingerprint": fingerprint}
    assert "other data or another configuration" in refusal(make, state)


# ------------------------------------------------------------------------------------------- plug-ins, size
class Counted(Deserializer):
    """A plug-in without files: sequence k of chunk c has ``(k + shift) % 3 + 1`` samples."""

    def __init__(self, shift: int = 0):
        self.shift = shift
        self.info = StreamInformation("x", 0, "dense", np.dtype(np.float32), (1,))

    def stream_infos(self) -> list[StreamInformation]:
        return [self.info]

    def num_chunks(self) -> int:
        return 4

    def chunk_index(self, chunk_id: int) -> ChunkIndex:
        keys = np.arange(10 * chunk_id, 10 * chunk_id + 10)
        return ChunkIndex(chunk_id, keys, (keys + self.shift) % 3 + 1)

    def get_chunk(self, chunk_id: int) -> dict[str, DenseStream]:
        index = self.chunk_index(chunk_id)
        values = np.repeat(np.asarray(index.keys, dtype=np.float32), index.lengths)[:, None]
        return {"x": DenseStream(values, np.concatenate([[0], np.cumsum(index.lengths)]))}


def test_a_plugin_is_identified_by_its_index() -> None:
    assert_continues(Counted, Counted, MODES["sequence"])
    state = state_after(Counted, **MODES["sequence"])
    message = refusal(lambda: Counted(shift=1), state, **MODES["sequence"])
    assert "test_checkpoint_identity.Counted): its index" in message


def test_the_state_stays_small_with_many_shards(tmp_path: Path) -> None:
    """More files than are listed one by one: groups of files, and a changed file names its group."""
    count = LISTED_FILES + 44
    directory = tmp_path / "many"
    directory.mkdir()
    paths = []
    for number in range(count):
        path = directory / f"s{number:04}.ctf"
        path.write_text(f"{number} |x {number} 0 |y 1:1\n")
        paths.append(path)

    def make() -> CTFDeserializer:
        return CTFDeserializer([str(p) for p in paths], STREAMS)

    state = state_after(make, reads=1)
    assert len(state["fingerprint"]["deserializers"][0]["files"]) == LISTED_FILES
    assert len(json.dumps(state)) < 128 * LISTED_FILES + 2000
    paths[100].write_text("100 |x 100 9 |y 1:1\n")
    message = refusal(make, state)
    found = re.search(r"files (\d+) to (\d+) \('s(\d+)\.ctf \.\.\. s(\d+)\.ctf' at checkpoint time\) differs", message)
    assert found is not None, message
    first, last, first_name, last_name = map(int, found.groups())
    assert first <= 100 <= last and (first, last) == (first_name, last_name) and last - first < 3


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lengths=st.lists(st.integers(1, 5), min_size=2, max_size=40),
    stop=st.integers(0, 6),
    mode=st.sampled_from(list(MODES)),
    chunk=st.integers(40, 400),
)
def test_property_a_copy_continues_exactly(
    tmp_path_factory: Any, lengths: list[int], stop: int, mode: str, chunk: int
) -> None:
    base = tmp_path_factory.mktemp("property")
    data = write_ctf(base / "a.ctf", lengths)
    [copy] = copy_elsewhere([data.path], base / "elsewhere")
    assert_continues(
        lambda: CTFDeserializer(data.path, STREAMS, chunk_size_in_bytes=chunk),
        lambda: CTFDeserializer(copy, STREAMS, chunk_size_in_bytes=chunk),
        MODES[mode],
        stop=stop,
    )


def htk_corpus(directory: Path, lengths: list[int]) -> Path:
    """Utterances of the given lengths in two archives and an SCP naming them by absolute paths."""
    directory.mkdir(parents=True)
    utterances = {f"utt{i:03}": np.full((n, 3), i, dtype=np.float32) for i, n in enumerate(lengths)}
    names = list(utterances)
    entries = [
        e for a in range(2) for e in write_archive(directory / f"part{a}.ark", {k: utterances[k] for k in names[a::2]})
    ]
    write_scp(directory / "all.scp", entries)
    return directory / "all.scp"


def htk(scp: Path) -> HTKFeatureDeserializer:
    return HTKFeatureDeserializer(StreamDefs(feats=StreamDef(shape=3, scp=str(scp))), chunk_frames=20)


def test_an_htk_corpus_whose_scp_names_other_paths_restores(tmp_path: Path) -> None:
    """An SCP file of a copy names the copy's paths: its bytes differ, the corpus does not."""
    lengths = np.random.default_rng(2).integers(1, 9, size=30).tolist()
    original, copy = htk_corpus(tmp_path / "a", lengths), htk_corpus(tmp_path / "node2" / "b", lengths)
    assert original.read_bytes() != copy.read_bytes()
    assert_continues(lambda: htk(original), lambda: htk(copy), MODES["frame"])
    other = htk_corpus(tmp_path / "other", [*lengths[:-1], lengths[-1] + 1])
    message = refusal(lambda: htk(other), state_after(lambda: htk(original)))
    assert "deserializer 0 (HTKFeatureDeserializer): its index" in message


@pytest.mark.parametrize("cache_index", [False, True])
def test_a_file_rewritten_in_place_is_never_vouched_for(data: Data, tmp_path: Path, cache_index: bool) -> None:
    """The identity is made when the source opens, of the data as indexed (a warm open: of the digests its cache
    keeps): a file rewritten since it was indexed (same size, mtime put back) is an error naming it at the source's
    open; one rewritten later leaves the state describing the data the source read (it restores on an unchanged
    copy) and refused, naming the file, on the rewritten one."""
    [copy] = copy_elsewhere([data.path], tmp_path / "node2")
    options = {"chunk_size_in_bytes": CHUNK, "cache_index": cache_index}
    CTFDeserializer(data.path, STREAMS, **options).close()  # the cache (if any) is warm
    indexed = CTFDeserializer(data.path, STREAMS, **options)
    with MinibatchSource(CTFDeserializer(data.path, STREAMS, **options), max_sweeps=2, **MODES["sequence"]) as source:
        read(source, SIZES, limit=1)
        before = source.get_checkpoint_state()
        rewrite(data.path, b"|y 2:1", b"|y 2:9")
        state = source.get_checkpoint_state()
    assert state["fingerprint"] == before["fingerprint"]
    with pytest.raises(CNTKIOError, match=re.escape(data.path.name)):
        MinibatchSource(indexed, max_sweeps=2)  # indexed before the rewrite
    indexed.close()
    assert "file 0" in refusal(lambda: CTFDeserializer(data.path, STREAMS, **options), state, **MODES["sequence"])
    with MinibatchSource(CTFDeserializer(copy, STREAMS, **options), max_sweeps=2, **MODES["sequence"]) as source:
        source.restore_from_checkpoint(json.loads(json.dumps(state)))


@pytest.mark.parametrize("count", [3, LISTED_FILES + 5])
def test_a_shard_more_or_less_is_refused_counting_the_files(tmp_path: Path, count: int) -> None:
    directory = tmp_path / "many"
    directory.mkdir()
    paths = []
    for number in range(count + 1):
        path = directory / f"s{number:04}.ctf"
        path.write_text(f"{number} |x {number} 0 |y 1:1\n")
        paths.append(path)
    state = state_after(lambda: CTFDeserializer([str(p) for p in paths[:count]], STREAMS), reads=1)
    message = refusal(lambda: CTFDeserializer([str(p) for p in paths], STREAMS), state)
    assert f"files: {count} at checkpoint time, {count + 1} now" in message


def numbers(record: bytes) -> dict[str, Any]:
    values = np.array(record.split(), dtype=np.float32)
    return {"x": values.reshape(-1, 1)}


def records(paths: list[Path]) -> RecordDeserializer:
    return RecordDeserializer(
        [str(p) for p in paths],
        numbers,
        StreamDefs(x=StreamDef(shape=1)),
        sequence_length=lambda r: len(r.split()),
        chunk_size_in_bytes=64,
    )


def test_record_files_copied_and_renamed_restore_and_a_changed_one_is_named(tmp_path: Path) -> None:
    directory = tmp_path / "original"
    directory.mkdir()
    paths = []
    for number in range(3):
        path = directory / f"r{number}.txt"
        path.write_text(
            "".join(" ".join(str(number * 100 + i + t) for t in range(i % 4 + 1)) + "\n" for i in range(30))
        )
        paths.append(path)
    copies = copy_elsewhere(paths, tmp_path / "node2")
    assert_continues(lambda: records(paths), lambda: records(copies), MODES["sequence"])
    state = state_after(lambda: records(paths))
    rewrite(copies[2], b"205 206", b"205 207")
    message = refusal(lambda: records(copies), state)
    assert "deserializer 0 (RecordDeserializer): file 2 ('r2.txt' at checkpoint time, 'moved-2.txt' now)" in message


# ------------------------------------------------------------------------------- digests kept in the index cache
def ctf_with_keys(path: Path, keys: str) -> Path:
    """A CTF file of 40 sequences whose ids are numbers, texts or absent (every line a sequence)."""
    lines = []
    for i in range(40):
        key = {"numbers": f"{i * 3} ", "texts": f"utt-{i:03} ", "lines": ""}[keys]
        lines += [f"{key}|x {i} {t} |y {i % 7}:1" for t in range(1 + i % 3 if keys != "lines" else 1)]
    path.write_text("\n".join(lines) + "\n")
    return path


def identity(paths: Any, **options: Any) -> dict[str, Any]:
    """The identity of a CTF deserializer of ``paths`` (:data:`STREAMS`), closed after."""
    deserializer = CTFDeserializer(paths, STREAMS, **options)
    try:
        return dict(deserializer.identity())
    finally:
        deserializer.close()


def not_digesting(monkeypatch: pytest.MonkeyPatch) -> None:
    """From now on, digesting index arrays or sampling a file fails the test (a sharded corpus still digests its
    shards' digests)."""

    def refuse(*args: Any) -> Any:
        raise AssertionError("the index was digested or the file sampled")

    monkeypatch.setattr("cntkio._src.formats.identity.array_digest", refuse)
    monkeypatch.setattr("cntkio._src.formats.identity._read", refuse)


@pytest.mark.parametrize("keys", ["numbers", "texts", "lines"])
def test_the_index_digests_are_made_when_the_index_is_cached_and_reused_by_a_warm_open(
    tmp_path: Path, keys: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The digests of the index and of the file's sampled bytes are made when the index is built and cached, and a
    warm open reads them from the cache instead of digesting the index and sampling the file again; the identity is
    the same from a warm cache, from the index built with the cache, without the cache, and from a copy elsewhere
    (which rebuilds its cache: another inode)."""
    path = ctf_with_keys(tmp_path / "data.ctf", keys)
    cached = {"chunk_size_in_bytes": 100, "cache_index": True}
    skip = {"skip_sequence_ids": True} if keys == "lines" else {}
    without = identity(path, chunk_size_in_bytes=100, **skip)
    assert identity(path, **cached, **skip) == without  # the index built, the cache written
    [copy] = copy_elsewhere([path], tmp_path / "node2")
    with monkeypatch.context() as patched:
        not_digesting(patched)
        assert identity(path, **cached, **skip) == without
    assert same(identity(copy, **cached, **skip), without)  # its own cache, built (names are not compared)
    assert_continues(
        lambda: CTFDeserializer(path, STREAMS, **cached, **skip),
        lambda: CTFDeserializer(copy, STREAMS, **cached, **skip),
        MODES["sequence"],
    )


def test_the_cached_digests_are_never_those_of_an_older_file(tmp_path: Path) -> None:
    """The digests live in the cache of the index they describe: a file rewritten in place (same size, mtime put
    back) makes the whole cache stale, and the identity is that of the new content."""
    path = ctf_with_keys(tmp_path / "data.ctf", "numbers")
    cached = {"chunk_size_in_bytes": 100, "cache_index": True}
    old = identity(path, **cached)
    rewrite(path, b"|x 7 0", b"|x 7 9")
    new = identity(path, **cached)
    assert new != old
    assert new == identity(path, chunk_size_in_bytes=100)
    rewrite(path, b"\n21 |x", b" 21 |x")  # sequence 21 joins sequence 20's line: other keys, lengths, layout
    again = identity(path, **cached)
    assert again["index"] != new["index"]
    assert again == identity(path, chunk_size_in_bytes=100)


def test_a_sharded_corpus_reuses_its_shards_cached_digests(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A sharded corpus's index digest is made of its shards' (kept in their caches): a warm open of the corpus
    digests no index and samples no file, and its identity is that of the corpus without caches and of a copy
    elsewhere."""
    original = shards(tmp_path / "original")
    copies = copy_elsewhere(original, tmp_path / "node2", prefix="shard")
    cached = {"chunk_size_in_bytes": CHUNK, "cache_index": True}
    without = identity([str(p) for p in original], chunk_size_in_bytes=CHUNK)
    assert identity([str(p) for p in original], **cached) == without
    with monkeypatch.context() as patched:
        not_digesting(patched)
        assert identity([str(p) for p in original], **cached) == without
    assert same(identity([str(p) for p in copies], **cached), without)
