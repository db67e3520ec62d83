"""Defects found by the review of the speech work (HTK features, SCP, MLF, state lists), each with the test that
failed before its fix and says what the correct behaviour is. Crash-prone and process-wide cases (open-file
limits, a missing ``resource`` module) run in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cntkio import ConfigError, FormatError, MinibatchSource, StreamDef, StreamDefs
from cntkio._src.formats.htk_features import FILES_PER_READ, HTKFeatureDeserializer
from cntkio._src.formats.htk_labels import HTKMLFDeserializer
from cntkio._src.formats.mlf import read_state_list
from cntkio._src.formats.scp import parse_scp
from cntkio.htk import write_archive, write_mlf, write_scp

DIM = 2


def utterance(i: int, frames: int = 3, dim: int = DIM) -> np.ndarray:
    """Values that encode (utterance, frame, dim)."""
    return (i * 1000 + np.arange(frames)[:, None] * 10 + np.arange(dim)[None, :]).astype(np.float32)


def run_script(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=600)


# ------------------------------------------------------------------------------------------ open files
ONE_FILE_PER_UTTERANCE_DEFAULT_CHUNKS = """
import os, resource, sys
resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
import numpy as np
from cntkio import MinibatchSource, StreamDef, StreamDefs
from cntkio._src.formats.htk_features import FILES_PER_READ, HTKFeatureDeserializer
from cntkio.htk import write_features
root = sys.argv[1]
count = 200
with open(f"{root}/all.scp", "w") as scp:
    for i in range(count):
        write_features(f"{root}/u{i}.htk", np.full((3, 2), i, dtype=np.float32))
        scp.write(f"u{i}.mfc={root}/u{i}.htk[0,2]\\n")
reader = HTKFeatureDeserializer(StreamDefs(x=StreamDef(shape=2, scp=f"{root}/all.scp")))  # default chunk_frames
print("chunks", reader.num_chunks(), "kept open at most", reader._files.limit)
source = MinibatchSource(reader, max_sweeps=1, randomize=False, num_parse_threads=1)
frames = 0
try:
    while True:
        minibatch = source.next_minibatch(128)
        if not minibatch:
            break
        x = minibatch["x"]
        for row, (_, key) in enumerate(minibatch.sequence_keys):
            assert (x.asarray()[row, : x.sequence_lengths[row]] == int(key[1:])).all(), key
        frames += x.num_samples
except Exception as error:
    print("ERROR", type(error).__name__, error)
else:
    print("FRAMES", frames)
"""


def test_a_chunk_of_many_one_utterance_files_stays_within_the_open_file_limit(tmp_path: Path) -> None:
    """README ("at most 256 stay open, so a corpus of one file per utterance needs no raised ulimit -n") and the
    `_OpenFiles` docstring promise a bounded number of open HTK files. Correct behaviour: a one-file-per-utterance
    corpus read with the default ``chunk_frames`` (90000, spec §1.2) works under a low open-file limit, files
    being opened (and closed) as the chunk is read.

    Defect: ``get_chunk`` acquires (pins) *every* file of a chunk before reading any of them, and pinned files
    are never closed, so the number of open files is the number of files in a chunk (times the parse threads),
    not the pool's limit: here 200 files in one chunk under a limit of 64 descriptors fail with EMFILE, reported
    as a misleading "cannot open HTK file ...: Too many open files (it could be read when it was indexed)".
    With the usual soft limit of 1024, 100-frame utterances (900 files a chunk) and two parse threads fail the
    same way."""
    result = run_script(ONE_FILE_PER_UTTERANCE_DEFAULT_CHUNKS, str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "FRAMES 600" in result.stdout, result.stdout


MISSING_RESOURCE_MODULE = """
import sys
sys.modules["resource"] = None  # as on platforms without it: `import resource` raises ImportError
import numpy as np
from cntkio import StreamDef, StreamDefs
from cntkio._src.formats.htk_features import FILES_PER_READ, HTKFeatureDeserializer
from cntkio.htk import write_archive, write_scp
root = sys.argv[1]
write_scp(f"{root}/a.scp", write_archive(f"{root}/a.ark", {"u0": np.zeros((3, 2), np.float32)}))
reader = HTKFeatureDeserializer(StreamDefs(x=StreamDef(shape=2, scp=f"{root}/a.scp")))
print("LIMIT", reader._files.limit)
"""


def test_the_open_file_limit_falls_back_when_the_resource_module_is_missing(tmp_path: Path) -> None:
    """``_open_file_limit`` catches ImportError to fall back to a soft limit of 1024 (a pool of 256 files).
    Correct behaviour: without the ``resource`` module the deserializer is built with that limit.

    Defect: after the fallback it evaluates ``getattr(resource, "RLIM_INFINITY", -1)`` on the never-bound local
    ``resource`` (htk_features.py, ``_open_file_limit``), so every HTKFeatureDeserializer construction raises
    ``UnboundLocalError`` there."""
    result = run_script(MISSING_RESOURCE_MODULE, str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "LIMIT 256" in result.stdout, result.stdout


# ------------------------------------------------------------------------------------------ SCP
def test_an_scp_read_from_a_pipe_is_not_silently_empty(tmp_path: Path) -> None:
    """An SCP given as a pipe (``scp=/dev/fd/N`` from a shell's process substitution, a FIFO) was read like any
    text file by the Python parser this change replaced (and by CNTK's ``getline``). Correct behaviour: its
    entries are read, or it is refused with an error saying it is not a regular file.

    Defect: ``parse_scp`` hands the native parser ``os.fstat(fd).st_size`` as the number of bytes to parse,
    which is 0 for a pipe, so the pipe's entries are silently dropped (scp.py, ``parse_scp``): alone it gives an
    empty index; listed beside a regular SCP file, the deserializer silently reads only that file's
    utterances."""
    entries = write_archive(tmp_path / "a.ark", {f"u{i}": utterance(i) for i in range(4)})
    write_scp(tmp_path / "first.scp", entries[:2])
    write_scp(tmp_path / "second.scp", entries[2:])
    text = (tmp_path / "second.scp").read_bytes()

    def pipe() -> tuple[str, int]:
        r, w = os.pipe()
        os.write(w, text)
        os.close(w)
        return f"/dev/fd/{r}", r

    path, fd = pipe()
    try:
        try:
            index = parse_scp(path)
        except (FormatError, ConfigError, OSError) as error:
            assert "no utterance" not in str(error)  # refused for what it is: acceptable
        else:
            assert len(index) == 2, "the pipe's SCP entries were silently dropped"
    finally:
        os.close(fd)

    path, fd = pipe()
    try:
        try:
            reader = HTKFeatureDeserializer(StreamDefs(x=StreamDef(shape=DIM, scp=[str(tmp_path / "first.scp"), path])))
        except (FormatError, ConfigError, OSError) as error:
            assert "no utterance" not in str(error)
        else:
            assert reader.sequence_index().num_sequences == 4, "utterances of the piped SCP were silently lost"
    finally:
        os.close(fd)


def test_an_error_about_an_scp_entry_gives_that_entry_s_byte_offset(tmp_path: Path) -> None:
    """Errors are ``FormatError`` s whose location says ``(byte offset N)``; the native SCP parser's own errors
    give the real offset. Correct behaviour: an error about an SCP entry the deserializer rejects (here
    ``start > end`` on line 3; the same for a range past the end or an archive that cannot be read) gives the
    byte offset of that entry's line in the SCP file.

    Defect: ``ScpIndex.location`` builds ``Location(file, 0, line, 1, ...)`` (scp.py), so the message says
    "a.scp:3:1 (byte offset 0, ...)" for an entry that starts far from byte 0 (the parser does not keep the
    offset of each entry)."""
    entries = write_archive(tmp_path / "a.ark", {f"u{i}": utterance(i) for i in range(3)})
    lines = [f"{e.key}.mfc={e.path}[{e.start},{e.end}]\n" for e in entries[:2]]
    bad = f"u2.mfc={entries[2].path}[8,6]\n"
    scp = tmp_path / "a.scp"
    scp.write_text("".join(lines) + bad)
    with pytest.raises(FormatError, match="start > end") as error:
        HTKFeatureDeserializer(StreamDefs(x=StreamDef(shape=DIM, scp=str(scp))))
    assert error.value.line == 3 and error.value.sequence_key == "u2"
    assert error.value.offset == len("".join(lines).encode()), str(error.value)


# ------------------------------------------------------------------------------------------ state list
def test_a_state_list_with_a_utf8_byte_order_mark(tmp_path: Path) -> None:
    """A UTF-8 byte order mark (what Windows editors write) is skipped at the start of SCP files, MLF files and
    MLF file lists. Correct behaviour: the state list (spec §2.2) skips it too, so its first state is ``sil``
    and MLF lines using ``sil`` map to id 0.

    Defect: ``read_state_list`` (mlf.py) keeps the mark in the first name (``'\\ufeffsil'``), so every label
    line using the first state is "not in the state list" and the whole MLF is refused (or, with max_errors,
    every utterance using it is dropped)."""
    states = tmp_path / "states.list"
    states.write_bytes(b"\xef\xbb\xbfsil\r\ns1\r\ns2\r\n")
    assert read_state_list(states) == ["sil", "s1", "s2"]
    mlf = tmp_path / "a.mlf"
    write_mlf(mlf, {"u0": [(0, 2, "sil"), (2, 3, "s1")]}, units="frames")
    labels = HTKMLFDeserializer(str(states), StreamDefs(l=StreamDef(shape=3, mlf=str(mlf))))
    assert labels.sequence_index().num_sequences == 1
    chunk = labels.get_chunk(0)["l"]
    assert chunk.indices.tolist() == [0, 0, 1]


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-v"]))


def test_phone_boundaries_are_refused_in_frame_mode(tmp_path: Path) -> None:
    """Spec §2.3: phone boundaries together with frame mode are an error (the 2.0 marks mean nothing there)."""
    (tmp_path / "states.list").write_text("s1\ns2\n")
    write_mlf(tmp_path / "a.mlf", {"u": [(0, 2, "s1"), (2, 3, "s2")]}, units="frames")
    labels = HTKMLFDeserializer(
        str(tmp_path / "states.list"), StreamDefs(y=StreamDef(shape=2, mlf=str(tmp_path / "a.mlf"))), True
    )
    with pytest.raises(ConfigError, match="frame mode"):
        MinibatchSource(labels, frame_mode=True)
    assert MinibatchSource(labels, truncation_length=2).next_minibatch(4)["y"].values.tolist()[:3] == [2.0, 1.0, 2.0]


@pytest.mark.parametrize("precision", ["float", "double"])
def test_many_files_read_in_groups_keep_the_context_window(tmp_path: Path, precision: str) -> None:
    """A chunk reading more files than one native read holds open is read in groups; the context window and the
    precision must come out as from one read (compared with an archive of the same utterances)."""
    utterances = {f"u{i:03d}": utterance(i, frames=1 + i % 4) for i in range(3 * FILES_PER_READ + 5)}
    lines = []
    for key, frames in utterances.items():
        write_archive(tmp_path / f"{key}.htk", {key: frames})
        lines.append(f"{key}.mfc={tmp_path}/{key}.htk[0,{len(frames) - 1}]")
    (tmp_path / "many.scp").write_text("\n".join(lines) + "\n")
    write_scp(tmp_path / "one.scp", write_archive(tmp_path / "one.ark", utterances))

    def chunk(scp: str) -> np.ndarray:
        definition = StreamDefs(x=StreamDef(shape=DIM, scp=str(tmp_path / scp), context=(2, 1)))
        reader = HTKFeatureDeserializer(definition, precision=precision)
        assert reader.num_chunks() == 1
        return reader.get_chunk(0)["x"].values

    grouped, single = chunk("many.scp"), chunk("one.scp")
    assert grouped.dtype == single.dtype == np.dtype(np.float64 if precision == "double" else np.float32)
    np.testing.assert_array_equal(grouped, single)
