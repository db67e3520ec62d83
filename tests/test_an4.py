"""AN4 end to end: the corpus's real SCP, MLF and state list, with the missing feature archive generated.

``External/AN4/glob_0000.scp`` lists 948 utterances as ``An4/71/71/cen5-fjam-b.mfc=000000000.chunk[0,367]``: every
line points into one archive, ``000000000.chunk`` (a relative path, not shipped). The test writes that archive with
:func:`cntkio.htk.write_features` (one HTK file of ``max_end + 1`` frames) and finds it with ``prefix_path``. Frame
``f`` of the archive holds ``[f, checksum(f), label(f)]``: its absolute index, a value that depends on the index
alone, and the state the MLF gives that frame (read here from the MLF text, independently of the native parser).
A row of any minibatch then names the archive frame it came from, so a misaligned range, a frame read twice or a
label joined to the wrong utterance or frame shows.
"""

from __future__ import annotations

import itertools
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cntkio import MinibatchSource, StreamDef, StreamDefs
from cntkio._src.formats.htk_features import HTKFeatureDeserializer
from cntkio._src.formats.htk_labels import HTKMLFDeserializer
from cntkio._src.formats.mlf import read_state_list
from cntkio._src.formats.scp import parse_scp
from cntkio.htk import read_header, write_features
from conformance.corpus import corpus_dir
from order_helpers import keys_of, read, snapshot

AN4 = corpus_dir() / "External" / "AN4"
FILES = ("glob_0000.scp", "glob_0000.mlf", "state.list")
pytestmark = pytest.mark.skipif(
    not all((AN4 / name).is_file() for name in FILES), reason=f"AN4 files ({', '.join(FILES)}) absent under {AN4}"
)

UTTERANCES = 948
DIM = 3
ARCHIVE = "000000000.chunk"
FRAME_WINDOW: dict[str, Any] = {
    "frame_mode": True,
    "randomization_window_in_chunks": 0,
    "randomization_window_in_samples": 50_000,
}


def checksum(frames: np.ndarray) -> np.ndarray:
    """A value of the absolute frame index alone (exact in float32)."""
    return (frames.astype(np.int64) * 7919) % 10007


def mlf_labels(path: Path, states: list[str]) -> dict[str, np.ndarray]:
    """Per key, the state id of every frame: a plain Python reading of the MLF (spec §2.1), not the native parser."""
    ids = {name: i for i, name in enumerate(states)}
    labels: dict[str, np.ndarray] = {}
    key: str | None = None
    frames: list[int] = []
    lines = path.read_text().splitlines()
    assert lines[0] == "#!MLF!#"
    for line in lines[1:]:
        if not line.strip():
            continue
        if line.startswith('"'):
            name = line.strip()[1:-1]
            name = name[2:] if name.startswith("*/") else name
            key, frames = name[: name.rfind(".")], []
        elif line == ".":
            assert key is not None and key not in labels
            labels[key] = np.array(frames, dtype=np.int64)
            key = None
        else:
            start_text, end_text, state = line.split(" ")[:3]
            start, end = float(start_text), float(end_text)
            if end - start >= 99999:  # 100 ns units, rounded to frames
                start, end = int(start / 100000 + 0.5), int(end / 100000 + 0.5)
            assert int(start) == len(frames), f"{key}: labels not contiguous at {line!r}"
            frames += [ids[state]] * (int(end) - int(start))
    return labels


@dataclass
class Corpus:
    """The AN4 files, the generated archive under ``directory``, and what every frame must hold."""

    directory: Path  # holds the archive: the prefix_path of the SCP's relative physical paths
    states: list[str]
    keys: list[str]  # SCP order
    starts: dict[str, int]  # first archive frame of each utterance
    lengths: dict[str, int]  # frames of each utterance (SCP range)
    label_of_frame: np.ndarray  # the MLF's state of every archive frame

    @property
    def total(self) -> int:
        return sum(self.lengths.values())

    def features(self, *, scp: Path | None = None, **options: Any) -> HTKFeatureDeserializer:
        streams = StreamDefs(features=StreamDef(shape=DIM, scp=str(scp or AN4 / "glob_0000.scp")))
        return HTKFeatureDeserializer(streams, prefix_path=str(self.directory), chunk_frames=20_000, **options)

    def labels(self) -> HTKMLFDeserializer:
        streams = StreamDefs(labels=StreamDef(shape=len(self.states), mlf=str(AN4 / "glob_0000.mlf")))
        return HTKMLFDeserializer(str(AN4 / "state.list"), streams, chunk_size_in_bytes=16 * 20_000)

    def source(self, *, scp: Path | None = None, **options: Any) -> MinibatchSource:
        return MinibatchSource([self.features(scp=scp), self.labels()], **options)

    def check_frames(self, minibatch: Any) -> np.ndarray:
        """Checks every frame of a minibatch (features and labels, flat in the same order); returns the archive
        frame index of each."""
        values = minibatch["features"].values
        labels = minibatch["labels"].csr
        frames = values[:, 0].astype(np.int64)
        assert np.array_equal(values[:, 0], frames) and ((frames >= 0) & (frames < len(self.label_of_frame))).all()
        assert np.array_equal(values[:, 1], checksum(frames)), "a frame's values are not those of one archive frame"
        assert np.array_equal(values[:, 2], self.label_of_frame[frames]), "features of another frame"
        assert labels.shape == (len(frames), len(self.states)) and (np.diff(labels.indptr) == 1).all()
        assert np.array_equal(labels.indices, self.label_of_frame[frames]), "a label joined to the wrong frame"
        assert (labels.data == 1.0).all()
        return frames


@pytest.fixture(scope="module")
def an4(tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    scp = parse_scp(AN4 / "glob_0000.scp")
    assert len(scp) == UTTERANCES and scp.duplicates is None
    assert scp.paths == [ARCHIVE], "every AN4 SCP line names the same relative archive"
    keys = [scp.keys[i] for i in range(len(scp))]
    starts = dict(zip(keys, scp.starts.tolist()))
    lengths = dict(zip(keys, (scp.ends - scp.starts + 1).tolist()))
    states = read_state_list(AN4 / "state.list")
    labels = mlf_labels(AN4 / "glob_0000.mlf", states)
    assert sorted(labels) == sorted(keys)
    mismatched = {k: (lengths[k], len(labels[k])) for k in keys if lengths[k] != len(labels[k])}
    assert not mismatched, f"AN4 feature and label lengths differ: {mismatched}"

    frames = int(scp.ends.max()) + 1
    label_of_frame = np.full(frames, -1, dtype=np.int64)
    for key in keys:
        label_of_frame[starts[key] : starts[key] + lengths[key]] = labels[key]
    directory = tmp_path_factory.mktemp("an4")
    archive = np.empty((frames, DIM), dtype=np.float32)
    archive[:, 0] = np.arange(frames)
    archive[:, 1] = checksum(np.arange(frames))
    archive[:, 2] = label_of_frame
    write_features(directory / ARCHIVE, archive, kind="USER")
    assert read_header(directory / ARCHIVE).frames == frames
    return Corpus(directory, states, keys, starts, lengths, label_of_frame)


def test_the_ranges_tile_one_archive_and_lengths_match_the_labels(an4: Corpus) -> None:
    """AN4's ranges are contiguous from frame 0 (252734 frames), and every utterance has as many feature frames
    as label frames, so the join is clean: nothing dropped, no length mismatch."""
    order = sorted(an4.keys, key=an4.starts.__getitem__)
    assert order == an4.keys and an4.starts[an4.keys[0]] == 0
    assert all(an4.starts[b] == an4.starts[a] + an4.lengths[a] for a, b in itertools.pairwise(order))
    assert an4.total == len(an4.label_of_frame) == 252_734 and (an4.label_of_frame >= 0).all()
    with an4.source(max_sweeps=1) as source:
        report = source.join_report
        assert report is not None and report.clean and report.sequences == UTTERANCES and report.dropped == 0
        assert not any(d.length_mismatches or d.missing or d.duplicates for d in report.deserializers)


def test_sequence_mode_reads_every_utterance_once_with_its_labels(an4: Corpus) -> None:
    with an4.source(max_sweeps=1, randomization_window_in_chunks=4, randomization_seed=1) as source:
        keys = []
        for minibatch in read(source, 3000):
            frames = an4.check_frames(minibatch)
            offsets = minibatch["features"].sequence_offsets
            assert np.array_equal(offsets, minibatch["labels"].sequence_offsets)
            for key, a, b in zip(keys_of(minibatch), offsets[:-1].tolist(), offsets[1:].tolist()):
                first = an4.starts[key]
                assert np.array_equal(frames[a:b], np.arange(first, first + an4.lengths[key])), key
                keys.append(key)
    assert sorted(keys) == sorted(an4.keys) and keys != an4.keys


def test_frame_mode_gives_every_frame_once_per_sweep_with_its_label(an4: Corpus) -> None:
    with an4.source(max_sweeps=2, randomization_seed=3, **FRAME_WINDOW) as source:
        seen = []
        for minibatch in read(source, [4093, 8192, 1000]):
            frames = an4.check_frames(minibatch)
            expected = [an4.starts[key] + t for key, t in keys_of(minibatch)]
            assert frames.tolist() == expected, "a frame key names another archive frame"
            seen.append(frames)
    stream = np.concatenate(seen)
    assert len(stream) == 2 * an4.total
    sweeps = stream[: an4.total], stream[an4.total :]
    for sweep in sweeps:
        assert np.array_equal(np.sort(sweep), np.arange(an4.total))
    assert not np.array_equal(sweeps[0], sweeps[1]) and not np.array_equal(sweeps[0], np.arange(an4.total))
    # a window of 50000 samples (3 chunks of ~20000 frames, ~225 utterances): the first 10000 frames come from
    # the utterances of one window (118 with this seed), not from the whole corpus (~800 with one window of all)
    utterances = np.searchsorted(sorted(an4.starts.values()), sweeps[0][:10_000], side="right")
    assert 30 < len(np.unique(utterances)) < 300


def test_truncated_bptt_rows_continue_utterances_and_read_every_frame_once(an4: Corpus) -> None:
    truncation = 20
    starts = np.zeros(an4.total + 1, dtype=bool)
    starts[list(an4.starts.values())] = True  # starts[f]: archive frame f begins an utterance
    ends = np.roll(starts, -1)[: an4.total]  # ends[f]: frame f ends one
    ends[-1] = True
    with an4.source(max_sweeps=1, truncation_length=truncation, randomization_seed=5) as source:
        last: dict[int, int] = {}  # row -> archive frame of its last sample so far
        seen = []
        for minibatch in read(source, 64 * truncation):
            frames = an4.check_frames(minibatch)
            seen.append(frames)
            padded = minibatch["features"].asarray()[:, :, 0].astype(np.int64)
            mask = minibatch["features"].mask
            assert np.array_equal(mask, minibatch["labels"].mask)
            for row in range(mask.shape[0]):
                valid = int((mask[row] > 0).sum())
                assert (mask[row, :valid] > 0).all() and not mask[row, valid:].any(), "a row with a gap"
                for step in range(valid):
                    frame = int(padded[row, step])
                    assert bool(starts[frame]) == (mask[row, step] == 2), "sequence starts misflagged"
                    previous = last.get(row)
                    if mask[row, step] == 2:
                        assert previous is None or ends[previous], "a row left an utterance unfinished"
                    else:
                        assert previous is not None and frame == previous + 1, "a row does not continue"
                    last[row] = frame
    stream = np.concatenate(seen)
    assert np.array_equal(np.sort(stream), np.arange(an4.total))
    assert all(ends[frame] for frame in last.values()), "an utterance was left unfinished at the end of the sweep"


def test_frame_mode_checkpoint_restores_exactly_mid_sweep(an4: Corpus) -> None:
    options: dict[str, Any] = {"max_sweeps": 1, "randomization_seed": 7, **FRAME_WINDOW}
    with an4.source(**options) as source:
        before = [an4.check_frames(mb) for mb in read(source, 4000, limit=23)]  # 92000 frames: mid window 2
        state = source.get_checkpoint_state()
        rest = read(source, 4000)
        after = [an4.check_frames(mb) for mb in rest]
        expected = [snapshot(mb) for mb in rest]
    assert np.array_equal(np.sort(np.concatenate(before + after)), np.arange(an4.total))
    features, labels = pickle.loads(pickle.dumps(an4.features())), pickle.loads(pickle.dumps(an4.labels()))
    with MinibatchSource([features, labels], **options) as resumed:
        resumed.restore_from_checkpoint(state)
        assert [snapshot(mb) for mb in read(resumed, 4000)] == expected


@pytest.mark.parametrize(
    "mode", [FRAME_WINDOW, {"truncation_length": 20}, {}], ids=["frame-mode", "truncated-bptt", "sequences"]
)
def test_two_partitions_cover_every_frame_once(an4: Corpus, mode: dict[str, Any]) -> None:
    parts = []
    for index in range(2):
        with an4.source(max_sweeps=1, randomization_seed=11, **mode) as source:
            part = read(source, 2 * 640, num_data_partitions=2, partition_index=index)
            parts.append(np.concatenate([an4.check_frames(mb) for mb in part]))
    assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(an4.total))
    assert all(len(p) > an4.total // 4 for p in parts), [len(p) for p in parts]


def test_a_length_mismatch_is_reported_refused_when_padded_and_truncated_on_request(
    an4: Corpus, tmp_path: Path
) -> None:
    """AN4 has no mismatch; an SCP copy whose third range is one frame short makes one, on real labels."""
    lines = (AN4 / "glob_0000.scp").read_text().splitlines()
    key = an4.keys[2]
    first, length = an4.starts[key], an4.lengths[key]
    assert lines[2].endswith(f"[{first},{first + length - 1}]")
    lines[2] = lines[2].replace(f",{first + length - 1}]", f",{first + length - 2}]")
    scp = tmp_path / "short.scp"
    scp.write_text("\n".join(lines) + "\n")
    with an4.source(scp=scp, max_sweeps=1) as padded:
        report = padded.join_report
        assert report is not None and report.dropped == 0
        assert report.deserializers[1].length_mismatches.count == 1
        assert report.deserializers[1].length_mismatches.keys == (key,)
    with pytest.raises(Exception, match="length_mismatch='truncate'"):
        an4.source(scp=scp, max_sweeps=1, frame_mode=True)
    with an4.source(scp=scp, max_sweeps=1, length_mismatch="truncate", **FRAME_WINDOW) as truncated:
        report = truncated.join_report
        assert report is not None and report.length_mismatch.value == "truncate"
        assert report.deserializers[1].length_mismatches.keys == (key,)
        frames = np.concatenate([an4.check_frames(mb) for mb in read(truncated, 8192)])
    dropped = first + length - 1  # the label frame with no feature frame
    assert np.array_equal(np.sort(frames), np.delete(np.arange(an4.total), dropped))
