"""``cntkio inspect``: the fixes a new user asked for, every format, several files, preview and snippet.

The CLI runs in-process (``cntkio.cli.main``) unless a test says otherwise.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cntkio import CTFDeserializer, StreamDef, StreamDefs, write_cbf
from cntkio._src.cli.inspect_ctf import StreamSpec, inspect_file
from cntkio._src.cli.main import main

ATIS = Path("/work/shared/datasets/atis/atis.train.ctf")
CNTK_DATA = Path("/work/shared/conformance/cntk/Data")


def cli(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def cli_json(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, dict]:
    code, out, err = cli(capsys, "inspect", *args, "--json")
    assert err == ""
    return code, json.loads(out)


def write(tmp_path: Path, text: str | bytes, name: str = "data.ctf") -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


# --------------------------------------------------------------------------- a: --max-errors N stops at the first N
BROKEN = "0 |a 1 2 |b 1:1\n0 |a 3 .5\n1 |a 4 5 |b 2:1\n1 |a 6 7x\n2 |a 1 1\n"


def test_max_errors_reports_the_first_error_in_file_order_and_keeps_statistics(tmp_path, capsys):
    path = write(tmp_path, BROKEN)  # line 5 misses 'b': an index error, known before any chunk is parsed
    code, report = cli_json(capsys, path, "--max-errors", "1")
    assert code == 1
    assert [(e["line"], e["column"], e["reason"]) for e in report["errors"]] == [
        (2, 8, "malformed number: unexpected '.'")
    ]
    assert report["stopped_early"]
    a, b = report["streams"]
    assert (a["samples"], b["samples"]) == (2, 2)  # what was read is kept
    code, out, _ = cli(capsys, "inspect", path, "--max-errors", "1")
    assert "stopped early" in out
    assert "  1 x malformed number: unexpected '.' (input 'a')" in out
    assert f"    {path}:2:8 (sequence 0)" in out
    assert ":5:1:" not in out


def test_max_errors_stops_after_the_chunk_holding_the_nth_error(tmp_path):
    lines = [f"{i} |a {i} {i}" for i in range(100)]
    lines[40] = "40 |a 1 2x"
    lines[80] = "80 |a 1 2y"
    lines[95] = "95 |b 1"  # no 'a': a missing input, found by the index
    path = write(tmp_path, "\n".join(lines) + "\n")
    streams = [StreamSpec("a", 2, False, "a")]
    report = inspect_file(str(path), streams, max_errors=1, chunk_size_in_bytes=100, optional_inputs=False)
    assert [(e.line, e.reason) for e in report.errors] == [(41, "malformed number: unexpected 'x'")]
    assert report.stopped_early
    data = report.to_dict()
    assert 0 < data["read_bytes"] < data["bytes"]
    assert 40 <= report.streams[0].samples < 99
    full = inspect_file(str(path), streams, chunk_size_in_bytes=100)
    assert [e.line for e in full.errors] == [41, 41, 81, 81, 96]
    assert not full.stopped_early and full.streams[0].samples == 97


# ---------------------------------------------------- b: lengths and samples agree; dropped sequences are counted
def test_lengths_count_only_what_was_read_and_dropped_sequences_are_counted(tmp_path, capsys):
    path = write(tmp_path, "0 |a 1 2 |b 1:1\n0 |a 3 .5\n1 |a 4 5 |b 2:1\n2 |a 1 1\n")
    code, report = cli_json(capsys, path)
    assert code == 1
    a, b = report["streams"]
    lengths = report["sequence_lengths"]
    assert report["sequences"] == 2 and report["skipped_sequences"] == 1
    assert (lengths["min"], lengths["max"], lengths["mean"]) == (1, 1, 1.0)  # the bad line 2 counts in neither
    assert a["samples"] == 2 == lengths["mean"] * report["sequences"]
    assert a["samples_per_sequence"] == {"min": 1, "mean": 1.0, "max": 1}
    assert b["samples_per_sequence"] == {"min": 1, "mean": 1.0, "max": 1}
    _, out, _ = cli(capsys, "inspect", path)
    assert "skipped    1 sequence (1 with a missing input)" in out


def test_a_sequence_without_any_valid_sample_is_skipped(tmp_path, capsys):
    path = write(tmp_path, "0 |a 1\n1 |a x\n2 |a 3\n")
    code, report = cli_json(capsys, path, "--stream", "a:1:dense")
    assert code == 1
    assert (report["sequences"], report["skipped_sequences"]) == (2, 1)
    assert report["sequence_lengths"]["histogram"] == [{"low": 1, "high": 1, "count": 2}]


# ------------------------------------------------------------------------------ c: errors grouped by reason
def test_errors_are_grouped_by_reason(tmp_path, capsys):
    path = write(tmp_path, "".join(f"|a {i} x{i}\n" for i in range(300)) + "|a 1 2 3\n", "many.ctf")
    code, out, _ = cli(capsys, "inspect", path, "--stream", "a:2:dense")
    assert code == 1
    assert "errors     602 in 3 groups" in out
    assert "  300 x malformed number: unexpected 'x' (input 'a')" in out
    assert "    many.ctf:1:6" in out.replace(str(tmp_path) + os.sep, "")
    assert "    ... 297 more" in out
    assert "  301 x line has no valid sample\n" in out
    assert "  1 x dense sample has more than dim=2 values (input 'a')" in out
    assert len(out.splitlines()) < 40
    code, out, _ = cli(capsys, "inspect", path, "--stream", "a:2:dense", "--all-errors")
    assert code == 1
    assert sum(1 for line in out.splitlines() if line.startswith(f"  {path}:")) == 602
    assert f"  {path}:301:1: dense sample has more than dim=2 values (sequence 300, input 'a')" in out
    code, report = cli_json(capsys, path, "--stream", "a:2:dense")
    assert [(g["reason"], g["count"]) for g in report["error_groups"]] == [
        ("malformed number: unexpected 'x'", 300),
        ("line has no valid sample", 301),
        ("dense sample has more than dim=2 values", 1),
    ]
    assert report["error_count"] == len(report["errors"]) == 602
    assert (report["sequences"], report["skipped_sequences"]) == (0, 301)


# ------------------------------------------------------------------- d: an inferred sparse dim is a lower bound
def test_an_inferred_sparse_dimension_is_a_lower_bound(tmp_path, capsys):
    path = write(tmp_path, "|x 1 2 |y 3:1\n|x 3 4 |y 942:1\n")
    code, report = cli_json(capsys, path)
    assert code == 0
    x, y = report["streams"]
    assert (y["dim"], y["dim_lower_bound"], y["dim_source"]) == (943, True, "inferred: largest index + 1")
    assert (x["dim"], x["dim_lower_bound"], x["dim_source"]) == (2, False, "inferred: most values in a sample")
    _, out, _ = cli(capsys, "inspect", path)
    assert "dim >= 943 (inferred: largest index + 1)" in out
    code, report = cli_json(capsys, path, "--stream", "x:2:dense", "--stream", "y:1000:sparse")
    assert code == 0
    assert [(s["dim"], s["dim_lower_bound"], s["dim_source"]) for s in report["streams"]] == [
        (2, False, "given"),
        (1000, False, "given"),
    ]


# ---------------------------------------------------------------------------------- e: input that is not CTF
def test_random_bytes_are_not_taken_for_ctf(tmp_path, capsys):
    path = write(tmp_path, np.random.default_rng(0).bytes(5000), "noise.ctf")
    code, out, err = cli(capsys, "inspect", path)
    assert code == 2 and out == ""
    assert "not a CNTK data file" in err and "binary" in err


def test_markdown_is_not_taken_for_ctf(tmp_path, capsys):
    text = "# Title\n\nSome text | with a bar.\n\n| col | other |\n|-----|-------|\n| 1 | 2 |\n\n- item\n- item 2\n"
    path = write(tmp_path, text, "README.md")
    code, out, err = cli(capsys, "inspect", path)
    assert code == 2 and out == ""
    assert "not a CNTK data file" in err and "'|name'" in err
    assert "--format ctf" in err  # how to read it as CTF anyway
    code, out, _ = cli(capsys, "inspect", path, "--format", "ctf")
    assert code == 1 and "warning    this does not look like CTF" in out


def test_convert_refuses_a_file_that_is_not_ctf(tmp_path, capsys):
    source = write(tmp_path, "|a 1 2\n|a 3 4\n")
    cbf = tmp_path / "data.cbf"
    assert cli(capsys, "convert", source, cbf)[0] == 0
    code, _, err = cli(capsys, "convert", cbf, tmp_path / "again.cbf")
    assert code == 2
    assert "CBF" in err and "nib_ktnc" in err


# ----------------------------------------------------------------------------------- several files at once
def test_several_files_whose_streams_agree(tmp_path, capsys):
    a = write(tmp_path, "0 |x 1 2 |y 3:1\n1 |x 3 4 |y 7:1\n", "a.ctf")
    b = write(tmp_path, "0 |x 5 6 |y 9:1\n", "b.ctf")
    code, report = cli_json(capsys, a, b)
    assert code == 0
    assert report["streams_agree"] and report["disagreements"] == [] and report["valid"]
    assert [f["sequences"] for f in report["files"]] == [2, 1]
    code, out, _ = cli(capsys, "inspect", a, b)
    assert code == 0
    assert out.count("result     OK: no errors") == 2
    assert "files      2: their streams agree" in out
    assert f'reader = CTFDeserializer(["{a}", "{b}"], streams)' in out
    assert 'y=StreamDef(field="y", shape=10, is_sparse=True),  # shape >= 10' in out  # the larger lower bound


def test_several_files_whose_streams_disagree(tmp_path, capsys):
    a = write(tmp_path, "|x 1 2 |y 3:1\n", "a.ctf")
    b = write(tmp_path, "|x 1 2 3\n", "b.ctf")
    c = write(tmp_path, "|x 1 2 |y 0.5 1\n", "c.ctf")
    code, report = cli_json(capsys, a, b, c)
    assert code == 1
    assert not report["streams_agree"] and not report["valid"]
    assert report["disagreements"] == [
        f"stream 'x' has different dimensions ({a}: 2, {b}: 3, {c}: 2)",
        f"stream 'y' is missing from {b}",
        f"stream 'y' is sparse in some files and dense in others ({a}: sparse, {c}: dense)",
    ]
    _, out, _ = cli(capsys, "inspect", a, b, c)
    assert "files      3: their streams DISAGREE" in out


# ------------------------------------------------------------------------------------- preview and snippet
def test_preview_and_a_snippet_that_reads_the_file(tmp_path, capsys):
    path = write(tmp_path, "7 |x 1 2 |y 3:1 4:0.5\n7 |x 3 4\n8 |x 5 6 |y 9:1\n9 |x 0 0 |y 1:1\n")
    code, report = cli_json(capsys, path, "--preview", "2")
    assert code == 0
    assert report["preview"] == [
        {"key": 7, "x": "2 x [1 2] [3 4]", "y": "1 x {3:1 4:0.5}"},
        {"key": 8, "x": "1 x [5 6]", "y": "1 x {9:1}"},
    ]
    namespace: dict = {}
    exec(report["snippet"], namespace)
    reader = namespace["reader"]
    assert [(i.name, i.shape, i.is_sparse) for i in reader.stream_infos()] == [("x", (2,), False), ("y", (10,), True)]
    assert reader.sequence_index().num_sequences == 3
    _, out, _ = cli(capsys, "inspect", path, "--preview", "0")
    assert "preview    " not in out
    _, out, _ = cli(capsys, "inspect", path)
    assert "preview    the first 3 sequences\n  7        x  2 x [1 2] [3 4]\n           y  1 x {3:1 4:0.5}\n" in out


def test_snippet_of_stream_names_that_are_not_identifiers(tmp_path, capsys):
    path = write(tmp_path, "|the-x 1 2 |class 1:1\n")
    _, report = cli_json(capsys, path)
    assert 'StreamDefs(**{\n    "the-x": StreamDef(field="the-x", shape=2),\n    "class": ' in report["snippet"]
    namespace: dict = {}
    exec(report["snippet"], namespace)
    assert [i.name for i in namespace["reader"].stream_infos()] == ["the-x", "class"]


# --------------------------------------------------------------------------------------------- other formats
def test_cbf(tmp_path, capsys):
    ctf = write(tmp_path, "0 |x 1 2 |y 3:1\n0 |x 3 4\n1 |x 5 6 |y 9:2\n")
    cbf = tmp_path / "data.bin"  # found by its magic, whatever its name
    streams = StreamDefs(x=StreamDef(field="x", shape=2), y=StreamDef(field="y", shape=12, is_sparse=True))
    write_cbf(CTFDeserializer(str(ctf), streams), cbf)
    code, report = cli_json(capsys, cbf)
    assert code == 0
    assert report["format"] == "cbf" and report["detected"] == "it starts with the magic 'nib_ktnc'"
    x, y = report["streams"]
    assert (x["dim"], x["samples"], x["dim_lower_bound"], x["dim_source"]) == (2, 3, False, "from the file")
    assert (y["dim"], y["samples"], y["max_index"], y["values"]["max"]) == (12, 2, 9, 2.0)
    assert report["sequences"] == 2 and report["sequence_lengths"]["max"] == 2
    assert report["preview"][0] == {"key": 0, "x": "2 x [1 2] [3 4]", "y": "1 x {3:1}"}
    namespace: dict = {}
    exec(report["snippet"], namespace)
    assert namespace["reader"].sequence_index().num_sequences == 2


def test_a_truncated_cbf_file_is_invalid(tmp_path, capsys):
    ctf = write(tmp_path, "|x 1 2\n|x 3 4\n")
    cbf = tmp_path / "data.cbf"
    write_cbf(CTFDeserializer(str(ctf), StreamDefs(x=StreamDef(field="x", shape=2))), cbf)
    cbf.write_bytes(cbf.read_bytes()[:-5])
    code, report = cli_json(capsys, cbf)
    assert code == 1 and report["fatal"]["file"] == str(cbf)


def test_htk_features_listed_in_an_scp_file(tmp_path, capsys):
    from cntkio.htk import write_archive, write_scp

    rng = np.random.default_rng(1)
    utterances = {f"u{i}": rng.normal(size=(3 + i, 5)).astype(np.float32) for i in range(4)}
    entries = write_archive(tmp_path / "feats.ark", utterances)
    write_scp(tmp_path / "train.scp", entries)
    code, report = cli_json(capsys, tmp_path / "train.scp")
    assert code == 0
    assert report["format"] == "scp" and report["sequences"] == 4 and report["frames"] == 3 + 4 + 5 + 6
    (features,) = report["streams"]
    frames = np.concatenate(list(utterances.values()))
    assert (features["dim"], features["samples"]) == (5, len(frames))
    assert features["values"]["mean"] == pytest.approx(frames.mean(), abs=1e-6)
    assert report["preview"][0]["key"] == "u0"
    scp = tmp_path / "train.scp"
    scp.write_text(scp.read_text() + "gone.mfc=missing.ark[0,4]\n")
    code, report = cli_json(capsys, scp)
    assert code == 1 and report["sequences"] == 4
    assert [(e["line"], e["sequence"]) for e in report["errors"]] == [(5, "gone")]


def test_mlf_labels(tmp_path, capsys):
    from cntkio.htk import write_mlf, write_state_list

    mlf = tmp_path / "train.mlf"
    write_mlf(mlf, {"a": [(0, 2, "s1"), (2, 5, "s2")], "b": [(0, 3, "sil")]})
    states = tmp_path / "states.list"
    write_state_list(states, ["sil", "s1", "s2", "s3"])
    code, report = cli_json(capsys, mlf, "--labels", states)
    assert code == 0
    assert report["format"] == "mlf" and (report["sequences"], report["frames"]) == (2, 8)
    assert report["top_labels"] == [
        {"label": "sil", "frames": 3},
        {"label": "s2", "frames": 3},
        {"label": "s1", "frames": 2},
    ]
    assert report["streams"][0]["dim"] == 4 and report["sequence_lengths"]["max"] == 5
    assert report["preview"][0] == {"key": "a", "labels": "s1x2 s2x3"}
    code, report = cli_json(capsys, mlf)  # no state list: the names found, numbered in sorted order
    assert code == 0 and report["label_dim"] == 3
    assert "no state list" in report["notes"][0]


def png(value: int, width: int = 6, height: int = 4) -> bytes:
    cv2 = pytest.importorskip("cv2")
    ok, data = cv2.imencode(".png", np.full((height, width, 3), value, dtype=np.uint8))
    assert ok
    return data.tobytes()


def test_image_map_file(tmp_path, capsys):
    for i in range(3):
        (tmp_path / f"{i}.png").write_bytes(png(40 * i, width=6 + i))
    lines = [f"{tmp_path}/{i}.png\t{label}" for i, label in enumerate([2, 0, 2])] + [f"{tmp_path}/gone.png\t1"]
    path = write(tmp_path, "\n".join(lines) + "\n", "map.txt")
    code, report = cli_json(capsys, path)
    assert code == 1
    assert report["format"] == "image-map" and report["sequences"] == 4 and report["classes"] == 3
    assert report["top_labels"][0] == {"label": 2, "images": 2}
    assert report["image_sizes"] == {"6x4x3": 1, "7x4x3": 1, "8x4x3": 1}
    assert [(e["line"], e["reason"]) for e in report["errors"]] == [
        (4, "image file not found: '" + f"{tmp_path}/gone.png'")
    ]
    assert 'labels=StreamDef(field="label", shape=3)' in report["snippet"]


def test_base64_image_file(tmp_path, capsys):
    import base64

    rows = [f"{i}\t{base64.b64encode(png(10 * i)).decode()}" for i in range(3)] + ["1\tnot-base64!!"]
    path = write(tmp_path, "\n".join(rows) + "\n", "images.txt")
    code, report = cli_json(capsys, path, "--format", "base64-image")
    assert report["format"] == "base64-image" and report["image_sizes"] == {"6x4x3": 3}
    assert code == 1 and [(e["line"], e["reason"]) for e in report["errors"]] == [(4, "invalid base64")]


# ------------------------------------------------------------------------------------------------ real data
@pytest.mark.skipif(not ATIS.exists(), reason="ATIS dataset not present")
def test_atis(capsys):
    code, report = cli_json(capsys, ATIS)
    assert code == 0
    assert (report["mode"], report["sequences"], report["skipped_sequences"]) == ("numeric", 4978, 0)
    s0, s1, s2 = report["streams"]
    assert (s0["dim"], s0["dim_lower_bound"], s1["samples"]) == (943, True, 4978)
    assert s0["samples"] == s2["samples"] == round(report["sequence_lengths"]["mean"] * 4978)


@pytest.mark.skipif(not CNTK_DATA.exists(), reason="CNTK conformance data not present")
def test_cntk_image_maps(capsys, monkeypatch):
    pytest.importorskip("cv2")  # the image sizes come from OpenCV
    monkeypatch.chdir(CNTK_DATA)  # map files name images relative to the working directory, as in CNTK
    code, report = cli_json(capsys, "ImageReaderSimple_map.txt", "ImageReaderMissingImage_map.txt")
    assert code == 1
    simple, missing = report["files"]
    assert simple["valid"] and simple["image_sizes"] == {"4x8x3": 4}
    assert [e["line"] for e in missing["errors"]] == [1]


# -------------------------------------------------------------------------------------------- a subprocess
def test_python_m_cntkio_inspect(tmp_path):
    path = write(tmp_path, "|a 1 2 |b 4:1\n|a 3 4 |b 0:1\n")
    result = subprocess.run(
        [sys.executable, "-m", "cntkio", "inspect", str(path), "--json"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0 and result.stderr == ""
    report = json.loads(result.stdout)
    assert [(s["name"], s["dim"], s["dim_lower_bound"]) for s in report["streams"]] == [("a", 2, False), ("b", 5, True)]
