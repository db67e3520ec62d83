"""Bad speech input (issue: HTK + MLF, point 7): every case raises a clear error naming the file, the line and the
utterance, and with ``max_errors`` the bad utterance is skipped and counted; files truncated, replaced or deleted
while a source reads them give errors, never a crash (run in subprocesses)."""

from __future__ import annotations

import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from cntkio import FormatError, MaxErrorsExceeded, MinibatchSource, StreamDef, StreamDefs
from cntkio._src.formats.htk_features import HTKFeatureDeserializer
from cntkio._src.formats.htk_labels import HTKMLFDeserializer
from cntkio.htk import write_archive, write_features, write_mlf, write_state_list

DIM = 3
STATES = ["s1", "s2", "sil"]


def utterance(i: int, frames: int = 4) -> np.ndarray:
    return np.full((frames, DIM), float(i), dtype=np.float32)


def features(scp: Path, max_errors: int = 0) -> HTKFeatureDeserializer:
    return HTKFeatureDeserializer(StreamDefs(x=StreamDef(shape=DIM, scp=str(scp))), max_errors=max_errors)


def labels(tmp_path: Path, mlf: Path, max_errors: int = 0) -> HTKMLFDeserializer:
    states = tmp_path / "states.list"
    write_state_list(states, STATES)
    return HTKMLFDeserializer(
        str(states), StreamDefs(y=StreamDef(shape=len(STATES), mlf=str(mlf))), max_errors=max_errors
    )


# Each feature case: the SCP line 2 is the bad utterance "bad"; lines 1 and 3 are good.
def unranged_unreadable(tmp_path: Path) -> str:
    return f"bad={tmp_path}/nowhere.htk"


def past_the_end(tmp_path: Path) -> str:
    return f"bad.mfc={tmp_path}/good.ark[5,40]"


def start_after_end(tmp_path: Path) -> str:
    return f"bad.mfc={tmp_path}/good.ark[3,1]"


def missing_archive(tmp_path: Path) -> str:
    return f"bad.mfc={tmp_path}/missing.ark[0,3]"


def unknown_kind(tmp_path: Path) -> str:
    path = tmp_path / "kind30.htk"
    path.write_bytes(struct.pack(">iihh", 4, 100000, 4 * DIM, 30) + utterance(9).astype(">f4").tobytes())
    return f"bad.mfc={path}[0,3]"


FEATURE_CASES: dict[str, tuple[Callable[[Path], str], str]] = {
    "unranged entry whose file cannot be opened": (unranged_unreadable, "nowhere.htk"),
    "range past the end of the archive": (past_the_end, "past the end"),
    "start > end": (start_after_end, "start > end"),
    "missing archive": (missing_archive, "missing.ark"),
    "unknown parameter kind": (unknown_kind, "parameter kind 30"),
}


def feature_scp(tmp_path: Path, bad_line: str) -> Path:
    entries = write_archive(tmp_path / "good.ark", {"one": utterance(1), "two": utterance(2)})
    scp = tmp_path / "train.scp"
    lines = [f"one.mfc={entries[0].path}[0,3]", bad_line, f"two.mfc={entries[1].path}[4,7]"]
    scp.write_text("\n".join(lines) + "\n")
    return scp


@pytest.mark.parametrize("case", list(FEATURE_CASES))
def test_bad_features_name_the_scp_file_line_and_utterance(tmp_path: Path, case: str) -> None:
    make, message = FEATURE_CASES[case]
    scp = feature_scp(tmp_path, make(tmp_path))
    with pytest.raises(FormatError, match=message) as error:
        features(scp)
    assert (error.value.file, error.value.line, error.value.sequence_key) == (str(scp), 2, "bad")
    reader = features(scp, max_errors=1)  # skipped and counted
    assert reader.errors.count == 1 and reader.describe()["skipped_errors"] == 1
    source = MinibatchSource(reader, randomize=False, max_sweeps=1)
    minibatch = source.next_minibatch(100)
    assert [key for _, key in minibatch.sequence_keys] == ["one", "two"]
    np.testing.assert_array_equal(minibatch["x"].asarray()[:, 0, 0], [1.0, 2.0])


MLF_HEAD = '#!MLF!#\n"*/one.lab"\n0 2 s1\n2 4 s2\n.\n'
MLF_TAIL = '"*/two.lab"\n0 4 sil\n.\n'
MLF_CASES: dict[str, tuple[str, str, int]] = {
    # name: (the bad entry "bad" after the first, the message, the line named)
    "state absent from the state list": ('"*/bad.lab"\n0 2 s1\n2 4 nope\n.\n', "'nope' is not in the state list", 8),
    "ranges not contiguous": ('"*/bad.lab"\n0 2 s1\n3 4 s2\n.\n', "not contiguous", 8),
    "entry not terminated": ('"*/bad.lab"\n0 4 s1\n', "not terminated", 6),
    "end before start": ('"*/bad.lab"\n0 2 s1\n4 2 s2\n.\n', "before start", 8),
}


@pytest.mark.parametrize("case", list(MLF_CASES))
def test_bad_labels_name_the_mlf_file_line_and_utterance(tmp_path: Path, case: str) -> None:
    entry, message, line = MLF_CASES[case]
    mlf = tmp_path / "train.mlf"
    mlf.write_text(MLF_HEAD + entry + MLF_TAIL)
    with pytest.raises(FormatError, match=message) as error:
        labels(tmp_path, mlf)
    assert (error.value.file, error.value.line, error.value.sequence_key) == (str(mlf), line, "bad")
    reader = labels(tmp_path, mlf, max_errors=1)
    assert [e.key for e in reader.invalid] == ["bad"]
    assert reader.sequence_index().keys.take(np.arange(2)) == ["one", "two"]
    with pytest.raises(MaxErrorsExceeded):
        mlf.write_text(MLF_HEAD + entry + entry.replace("bad", "worse") + MLF_TAIL)
        labels(tmp_path, mlf, max_errors=1)


@pytest.mark.parametrize("cut", [len(MLF_HEAD) + 5, len(MLF_HEAD) + 14, len(MLF_HEAD) + 20])
def test_a_truncated_mlf_names_the_last_entry(tmp_path: Path, cut: int) -> None:
    mlf = tmp_path / "cut.mlf"
    mlf.write_text((MLF_HEAD + '"*/bad.lab"\n0 2 s1\n2 4 s2\n.\n')[:cut])
    with pytest.raises(FormatError, match=r"truncated|cut by the end") as error:
        labels(tmp_path, mlf)
    key = '"*/ba' if cut == len(MLF_HEAD) + 5 else "bad"  # a cut header names what is left of it
    assert (error.value.file, error.value.sequence_key) == (str(mlf), key) and error.value.line >= 6
    assert labels(tmp_path, mlf, max_errors=1).sequence_index().num_sequences == 1


def test_labels_of_missing_utterances_are_counted_not_silent(tmp_path: Path) -> None:
    entries = write_archive(tmp_path / "a.ark", {f"u{i}": utterance(i) for i in range(4)})
    scp = tmp_path / "a.scp"
    scp.write_text("".join(f"{e.key}.mfc={e.path}[{e.start},{e.end}]\n" for e in entries))
    mlf = tmp_path / "a.mlf"
    write_mlf(mlf, {f"u{i}": [(0, 4, "s1")] for i in (0, 2, 3)}, units="frames")
    source = MinibatchSource([features(scp), labels(tmp_path, mlf)], randomize=False, max_sweeps=1)
    report = source.join_report
    assert report is not None and report.deserializers[1].missing.count == 1
    assert report.deserializers[1].missing.keys == ("u1",)
    assert [key for _, key in source.next_minibatch(100).sequence_keys] == ["u0", "u2", "u3"]


# ------------------------------------------------------------------------------------------ fault injection
FAULT = """
import os, sys
import numpy as np
from cntkio import MinibatchSource, StreamDef, StreamDefs
from cntkio._src.formats.htk_features import HTKFeatureDeserializer
from cntkio.htk import write_archive, write_scp
root = sys.argv[1]
utterances = {{f"u{{i}}": np.full((50, 8), i, np.float32) for i in range(400)}}
write_scp(f"{{root}}/a.scp", write_archive(f"{{root}}/a.ark", utterances))
reader = HTKFeatureDeserializer(StreamDefs(x=StreamDef(shape=8, scp=f"{{root}}/a.scp")), chunk_frames=1000)
source = MinibatchSource(reader, max_sweeps=2, randomization_window_in_chunks=2)
for _ in range(3):
    source.next_minibatch(64)
{action}
try:
    while source.next_minibatch(64):
        pass
except Exception as error:
    print("ERROR", type(error).__name__, str(error)[:300])
else:
    print("DONE")
"""

ACTIONS = {
    "truncated": 'os.truncate(f"{root}/a.ark", os.path.getsize(f"{root}/a.ark") // 3)',
    "replaced": 'os.replace(f"{root}/a.scp", f"{root}/a.ark")',
    "deleted": 'os.remove(f"{root}/a.ark")',
    "rewritten": 'open(f"{root}/a.ark", "r+b").write(b"\\\\0" * 100)',
}


@pytest.mark.parametrize("action", list(ACTIONS))
def test_an_archive_changed_while_read_gives_an_error_not_a_crash(tmp_path: Path, action: str) -> None:
    script = FAULT.format(action=ACTIONS[action])
    result = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    out = result.stdout
    if action in ("truncated", "rewritten"):  # in place: detected (size or modification time changed)
        assert "ERROR FormatError" in out and "a.ark" in out and "changed since it was indexed" in out, out
    else:  # the open archive keeps being read as it was (or reopened, which is refused as changed): no crash
        assert "DONE" in out or ("ERROR FormatError" in out and "a.ark" in out), out


def test_write_features_round_trip_for_the_fixtures(tmp_path: Path) -> None:
    path = tmp_path / "one.htk"
    write_features(path, utterance(3))
    reader = features(feature_scp(tmp_path, f"bad={path}"))
    assert reader.describe()["utterances"] == 3
