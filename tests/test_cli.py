"""``cntkio inspect``: the command line run in subprocesses, and the analysis behind it."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cntkio._src.cli.inspect_ctf import StreamSpec, inspect_file, length_summary
from cntkio._src.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "data"


def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cntkio", *map(str, args)], capture_output=True, text=True, check=False
    )


def run_json(*args: str | Path) -> tuple[int, dict]:
    result = run("inspect", *args, "--json")
    assert result.stderr == ""
    return result.returncode, json.loads(result.stdout)


def write(tmp_path: Path, text: str, name: str = "data.ctf") -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode())
    return path


def random_file(tmp_path: Path, seed: int = 0) -> tuple[Path, dict]:
    """Sequences with a dense 'x' (dim 4) on every line and a sparse 'y' (dim 50) on some lines."""
    rng = np.random.default_rng(seed)
    lines, dense, nnz, values, indices, lengths = [], [], [], [], [], []
    for seq in range(40):
        length = int(rng.integers(1, 9))
        lengths.append(length)
        for step in range(length):
            x = np.round(rng.normal(size=4), 3)
            dense.append(x)
            line = f"{seq} |x {' '.join(f'{v:.3f}' for v in x)}"
            if step == 0 or rng.random() < 0.3:
                idx = np.sort(rng.choice(50, size=int(rng.integers(0, 4)), replace=False))
                val = np.round(rng.uniform(0.5, 2.0, size=len(idx)), 2)
                line += " |y " + " ".join(f"{i}:{v:.2f}" for i, v in zip(idx, val))
                nnz.append(len(idx))
                values.extend(val)
                indices.extend(idx)
            lines.append(line)
    path = write(tmp_path, "\n".join(lines) + "\n")
    expected = {
        "dense": np.array(dense),
        "nnz": np.array(nnz),
        "sparse_values": np.array(values),
        "max_index": max(indices),
        "lengths": np.array(lengths),
    }
    return path, expected


# ------------------------------------------------------------------------------------- valid files
def test_valid_file_text_report(tmp_path):
    path = write(tmp_path, "0 |a 1 2 3 |b 4:1\n0 |a 4 5 6\n1 |a 7 8 9 |b 0:2.5\n")
    result = run("inspect", path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stderr == ""
    out = result.stdout
    assert "numeric sequence ids" in out
    assert "sequences  2 in 1 chunk" in out
    assert "inferred from a full scan" in out
    assert "length     min 1, mean 1.5, median 1.5, max 2" in out
    assert "result     OK: no errors" in out
    table = out.split("streams    ")[1].split("length")[0].splitlines()[2:4]
    rows = {line.split()[0]: line.split() for line in table}
    assert rows["a"][1:4] == ["dense", "3", "3"]
    assert rows["b"][1:4] == ["sparse", ">=5", "2"]  # an inferred sparse dimension is a lower bound


def test_json_report_matches_numpy(tmp_path):
    path, expected = random_file(tmp_path)
    code, report = run_json(path)
    assert code == 0
    assert report["valid"] and report["error_count"] == 0 and report["errors"] == []
    assert report["mode"] == "numeric" and report["sequences"] == 40
    assert report["streams_inferred"]
    x, y = report["streams"]
    assert (x["name"], x["format"], x["dim"]) == ("x", "dense", 4)
    assert (y["name"], y["format"], y["dim"]) == ("y", "sparse", expected["max_index"] + 1)
    dense = expected["dense"]
    assert x["samples"] == len(dense)
    assert x["values"]["min"] == pytest.approx(dense.min(), abs=1e-6)
    assert x["values"]["max"] == pytest.approx(dense.max(), abs=1e-6)
    assert x["values"]["mean"] == pytest.approx(dense.mean(), abs=1e-6)
    assert x["nonzero_fraction"] == pytest.approx(np.count_nonzero(dense) / dense.size)
    assert y["samples"] == len(expected["nnz"])
    assert y["nnz_per_sample"] == {
        "min": int(expected["nnz"].min()),
        "mean": pytest.approx(expected["nnz"].mean()),
        "max": int(expected["nnz"].max()),
    }
    assert y["max_index"] == expected["max_index"]
    assert y["values"]["mean"] == pytest.approx(expected["sparse_values"].mean(), abs=1e-6)
    lengths = expected["lengths"]
    summary = report["sequence_lengths"]
    assert (summary["min"], summary["max"]) == (lengths.min(), lengths.max())
    assert summary["mean"] == pytest.approx(lengths.mean())
    assert summary["median"] == np.median(lengths)
    assert sum(b["count"] for b in summary["histogram"]) == len(lengths)


def test_statistics_do_not_depend_on_chunking(tmp_path):
    path, _ = random_file(tmp_path, seed=3)
    whole = inspect_file(str(path)).to_dict()
    chunked = inspect_file(str(path), chunk_size_in_bytes=200).to_dict()
    assert chunked["chunks"] > 5 and whole["chunks"] == 1
    for report in (whole, chunked):
        del report["chunks"]
        for stream in report["streams"]:
            stream["values"]["mean"] = pytest.approx(stream["values"]["mean"], abs=1e-9)
    assert chunked == whole


def test_explicit_streams_with_alias_and_precision(tmp_path):
    path = write(tmp_path, "|features 1 2 |labels 3:1\n|features 0.1 |labels\n")
    code, report = run_json(
        path, "--stream", "feats:3:dense:features", "--stream", "y:10:SPARSE:labels", "--precision", "double"
    )
    assert code == 0
    assert report["mode"] == "line" and report["sequences"] == 2
    assert not report["streams_inferred"]
    feats, y = report["streams"]
    assert (feats["name"], feats["alias"], feats["dim"], feats["format"]) == ("feats", "features", 3, "dense")
    assert feats["values"]["min"] == 0.0  # zero-padded to dim 3
    assert feats["values"]["mean"] == pytest.approx(3.1 / 6)  # exact in double precision
    assert (y["name"], y["alias"], y["dim"], y["max_index"]) == ("y", "labels", 10, 3)
    assert y["nnz_per_sample"] == {"min": 0, "mean": 0.5, "max": 1}


def test_skip_sequence_ids_makes_every_line_a_sequence(tmp_path):
    path = write(tmp_path, "5 |a 1\n5 |a 2\n6 |a 3\n")
    assert run_json(path)[1]["sequences"] == 2
    code, report = run_json(path, "--skip-sequence-ids")
    assert code == 0
    assert (report["mode"], report["sequences"]) == ("line", 3)


def test_repeated_ids_are_a_warning_not_an_error(tmp_path):
    path = write(tmp_path, "1 |a 1\n2 |a 2\n1 |a 3\n")
    result = run("inspect", path)
    assert result.returncode == 0
    assert "1 sequence has an id used earlier in the file" in result.stdout
    assert run_json(path)[1]["repeated_ids"] == 1


def test_optional_inputs(tmp_path):
    path = write(tmp_path, "0 |a 1 |b 0:1\n1 |a 2\n")
    code, report = run_json(path)
    assert code == 1
    assert [(e["line"], e["stream"]) for e in report["errors"]] == [(2, "b")]
    code, report = run_json(path, "--optional-inputs")
    assert code == 0
    assert report["streams"][1]["empty_sequences"] == 1


# ------------------------------------------------------------------------------------------- errors
BROKEN = "0 |a 1 2 |b 1:1\n0 |a 3 .5\n1 |a 4 5 |b 9:1\n1 |a 6 7x\n2 |a 1 1\n"


def test_errors_are_listed_with_file_line_column(tmp_path):
    path = write(tmp_path, BROKEN)
    result = run("inspect", path, "--stream", "a:2:dense", "--stream", "b:5:sparse", "--all-errors")
    assert result.returncode == 1
    assert result.stderr == ""
    out = result.stdout
    assert f"{path}:2:8: malformed number: unexpected '.' (sequence 0, input 'a')" in out
    assert f"{path}:3:13: sparse index out of range (dim=5, valid 0..4) (sequence 1, input 'b')" in out
    assert f"{path}:4:9: malformed number: unexpected 'x' (sequence 1, input 'a')" in out
    assert f"{path}:5:1: input is missing from the sequence (sequence 2, input 'b')" in out
    assert "result     INVALID" in out


def test_errors_in_json(tmp_path):
    path = write(tmp_path, BROKEN)
    code, report = run_json(path, "--stream", "a:2:dense", "--stream", "b:5:sparse")
    assert code == 1
    assert not report["valid"]
    assert report["error_count"] == len(report["errors"])
    locations = [(e["line"], e["column"], e["stream"]) for e in report["errors"]]
    assert [line for line, _, _ in locations] == sorted(line for line, _, _ in locations)
    assert (2, 8, "a") in locations and (3, 13, "b") in locations and (5, 1, "b") in locations
    first = next(e for e in report["errors"] if e["line"] == 3)
    assert first == {
        "file": str(path), "line": 3, "column": 13, "offset": 38, "sequence": 1, "stream": "b",
        "reason": "sparse index out of range (dim=5, valid 0..4)",
    }  # fmt: skip


def test_every_error_is_listed_by_default(tmp_path):
    path = write(tmp_path, "".join(f"|a {i} x{i}\n" for i in range(300)), "many.ctf")
    code, report = run_json(path, "--stream", "a:2:dense")
    assert code == 1
    assert report["error_count"] == 600  # a bad number and an empty row on each line
    assert not report["stopped_early"]
    assert sorted({e["line"] for e in report["errors"]}) == list(range(1, 301))


def test_max_errors_stops_early(tmp_path):
    path = write(tmp_path, "".join(f"|a {i} x{i}\n" for i in range(300)), "many.ctf")
    code, report = run_json(path, "--stream", "a:2:dense", "--max-errors", "5")
    assert code == 1
    assert report["error_count"] == 5 and report["stopped_early"]
    result = run("inspect", path, "--stream", "a:2:dense", "--max-errors", "5")
    assert "errors     5 in 2 groups" in result.stdout
    assert "the scan stopped early (--max-errors)" in result.stdout


def test_example_files(tmp_path):
    assert run("inspect", EXAMPLES / "sequences.ctf").returncode == 0
    code, report = run_json(EXAMPLES / "broken.ctf")
    assert code == 1
    assert {e["line"] for e in report["errors"]} == {2, 4, 7, 8}


def test_example_files_are_what_make_data_writes():
    spec = importlib.util.spec_from_file_location("make_data", ROOT / "examples" / "make_data.py")
    assert spec is not None and spec.loader is not None
    make_data = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_data)
    assert (EXAMPLES / "sequences.ctf").read_text() == make_data.sequences_text()
    assert (EXAMPLES / "broken.ctf").read_text() == make_data.BROKEN
    assert sum(p.stat().st_size for p in EXAMPLES.iterdir()) < 20_000


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "input file is empty"),
        ("\xff\xfe|a 1\n", "UTF-16"),
    ],
)
def test_fatal_problems_exit_1(tmp_path, text, reason):
    path = tmp_path / "bad.ctf"
    path.write_bytes(text.encode("latin-1"))
    result = run("inspect", path)
    assert result.returncode == 1
    assert "fatal" in result.stdout and reason in result.stdout
    code, report = run_json(path)
    assert code == 1 and reason in report["fatal"]["reason"]


# ----------------------------------------------------------------------------- usage and I/O errors
def assert_usage_error(result: subprocess.CompletedProcess[str], message: str) -> None:
    assert result.returncode == 2
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    assert message in result.stderr.strip().splitlines()[-1]


def test_missing_file_exits_2(tmp_path):
    result = run("inspect", tmp_path / "nope.ctf")
    assert_usage_error(result, "cannot read")
    assert result.stderr.count("\n") == 1
    assert "No such file or directory" in result.stderr


def test_directory_exits_2(tmp_path):
    assert_usage_error(run("inspect", tmp_path), "is a directory")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("a:3", "expected NAME:DIM:dense|sparse[:ALIAS]"),
        ("a:0:dense", "DIM must be a positive integer"),
        ("a:x:dense", "DIM must be a positive integer"),
        ("a:3:csr", "format must be 'dense' or 'sparse'"),
        (":3:dense", "empty stream name"),
    ],
)
def test_bad_stream_spec_exits_2(tmp_path, capsys, spec, message):
    path = write(tmp_path, "|a 1\n")
    with pytest.raises(SystemExit) as exit_info:  # in-process: argparse exits
        main(["inspect", str(path), "--stream", spec])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err.strip().splitlines()[-1]


def test_config_errors_exit_2(tmp_path):
    path = write(tmp_path, "|a 1\n")
    assert_usage_error(run("inspect", path, "--stream", "a:1:dense", "--stream", "a:2:dense"), "duplicate stream")
    bad_alias = run("inspect", path, "--stream", "a:1:dense", "--stream", "b:1:dense:a")
    assert_usage_error(bad_alias, "duplicate stream alias")
    assert_usage_error(run("inspect", path, "--max-errors", "0"), "positive integer")
    assert_usage_error(run("inspect", path, "--precision", "half"), "invalid choice")


def test_no_command_is_a_usage_error():
    assert run().returncode == 2
    assert run("inspect").returncode == 2


def test_help():
    result = run("inspect", "--help")
    assert result.returncode == 0
    assert "--stream NAME:DIM:dense|sparse[:ALIAS]" in result.stdout


@pytest.mark.skipif(shutil.which("cntkio") is None, reason="console script not installed")
def test_console_script(tmp_path):
    path = write(tmp_path, "|a 1\n")
    result = subprocess.run(["cntkio", "inspect", str(path), "--json"], capture_output=True, text=True, check=False)
    assert result.returncode == 0
    assert json.loads(result.stdout)["streams"][0]["name"] == "a"


# ----------------------------------------------------------------------------------------- helpers
def test_length_summary_histogram():
    summary = length_summary(np.array([1, 1, 2, 30, 5]), bins=3)
    assert (summary["min"], summary["median"], summary["max"]) == (1, 2.0, 30)
    assert summary["histogram"] == [
        {"low": 1, "high": 10, "count": 4},
        {"low": 11, "high": 20, "count": 0},
        {"low": 21, "high": 30, "count": 1},
    ]
    assert length_summary(np.array([3, 3]))["histogram"] == [{"low": 3, "high": 3, "count": 2}]
    assert length_summary(np.array([], dtype=np.int64))["max"] is None


def test_inspect_file_api(tmp_path):
    path = write(tmp_path, "|a 1 2\n|a 3\n")
    report = inspect_file(str(path), [StreamSpec("A", 2, False, "a")])
    assert report.ok and report.streams[0].samples == 2 and report.summary["sequences"] == 2


def test_progress_only_on_a_terminal_or_when_asked(tmp_path, capsys, monkeypatch):
    pytest.importorskip("tqdm")
    path = write(tmp_path, "|a 1\n" * 100)
    assert main(["inspect", str(path)]) == 0
    assert capsys.readouterr().err == ""  # not a terminal
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert main(["inspect", str(path)]) == 0
    assert capsys.readouterr().err == ""  # a terminal, but the work is short: a bar would only flicker
    assert main(["inspect", str(path), "--progress"]) == 0
    err = capsys.readouterr().err
    assert "data.ctf: scanning" in err and "data.ctf: parsing" in err
    monkeypatch.setattr("cntkio._src.common.progress.AUTO_DELAY_SECONDS", 0.0)
    assert main(["inspect", str(path), "--no-progress"]) == 0
    assert capsys.readouterr().err == ""
    assert main(["inspect", str(path)]) == 0
    assert "data.ctf: parsing" in capsys.readouterr().err


def test_progress_without_tqdm_is_a_usage_error(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("cntkio._src.common.progress.find_spec", lambda name: None)
    path = write(tmp_path, "|a 1\n")
    assert main(["inspect", str(path), "--progress"]) == 2
    assert "pip install 'cntkio[progress]'" in capsys.readouterr().err
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert main(["inspect", str(path)]) == 0  # by default, no bar and no complaint
    assert capsys.readouterr().err == ""
