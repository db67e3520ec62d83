"""``cntkio validate``: every error of every file (and of the files of a config's readers), text or JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cntkio._src.cli.main import main

BAD = "0 |a 1 2 |b 1:1\n0 |a 3 .5\n1 |a 4 5 |b 2:1\n1 |a 6 7x\n2 |a 1 1\n"


def cli(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    code = main(["validate", *map(str, args)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def write(tmp_path: Path, text: str, name: str = "data.ctf") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_valid_file(tmp_path, capsys):
    path = write(tmp_path, "0 |a 1 2\n0 |a 3 4\n1 |a 5 6\n")
    code, out, err = cli(capsys, path)
    assert (code, err) == (0, "")
    assert out == f"{path}: CTF (CNTK text format): valid (2 sequences)\nresult     OK: no errors\n"


def test_every_error_as_json(tmp_path, capsys):
    path = write(tmp_path, BAD)
    code, out, _ = cli(capsys, path, "--json")
    assert code == 1
    report = json.loads(out)
    assert not report["valid"] and report["error_count"] == 5
    assert report["files"] == [
        {"file": str(path), "format": "ctf", "section": None, "valid": False, "sequences": 2, "error_count": 5,
         "warnings": ["input 'b' is missing from 1 of 3 sequences, which are dropped (their other errors are listed "
                      "too); if it is optional, pass --optional-inputs"]}
    ]  # fmt: skip
    assert [(e["line"], e["column"], e["stream"]) for e in report["errors"]] == [
        (2, 8, "a"), (2, 1, None), (4, 9, "a"), (4, 1, None), (5, 1, "b"),
    ]  # fmt: skip
    assert report["errors"][0] == {
        "file": str(path), "line": 2, "column": 8, "offset": 23, "sequence": 0, "stream": "a",
        "reason": "malformed number: unexpected '.'", "fatal": False,
    }  # fmt: skip


def test_errors_grouped_in_text(tmp_path, capsys):
    path = write(tmp_path, "".join(f"|a {i} x\n" for i in range(50)))
    code, out, _ = cli(capsys, path)
    assert code == 1
    assert f"{path}: CTF (CNTK text format): INVALID, 100 errors\n" in out
    assert "errors     100 in 2 groups (--all-errors lists every one)\n  50 x malformed number: unexpected 'x'" in out
    assert "    ... 47 more" in out
    assert out.endswith("result     INVALID: 100 errors in 1 of 1 files\n")
    code, out, _ = cli(capsys, path, "--all-errors")
    assert sum(line.startswith(f"  {path}:") for line in out.splitlines()) == 100


def test_several_files(tmp_path, capsys):
    good = write(tmp_path, "|a 1\n", "good.ctf")
    bad = write(tmp_path, BAD, "bad.ctf")
    code, out, _ = cli(capsys, good, bad, "--json")
    report = json.loads(out)
    assert code == 1 and [f["valid"] for f in report["files"]] == [True, False]
    assert {e["file"] for e in report["errors"]} == {str(bad)}


def test_a_fatal_error_is_in_the_list(tmp_path, capsys):
    path = write(tmp_path, "")
    code, out, _ = cli(capsys, path, "--json")
    assert code == 1
    (error,) = json.loads(out)["errors"]
    assert error["fatal"] and error["reason"] == "input file is empty"


def test_undecodable_images_are_errors(tmp_path, capsys):
    cv2 = pytest.importorskip("cv2")
    (tmp_path / "fine.png").write_bytes(cv2.imencode(".png", np.zeros((2, 2, 3), np.uint8))[1].tobytes())
    (tmp_path / "broken.png").write_bytes(b"not an image")
    path = write(tmp_path, f"{tmp_path}/fine.png\t0\n{tmp_path}/broken.png\t1\n", "map.txt")
    code, out, _ = cli(capsys, path, "--json")
    assert code == 1
    assert [(e["line"], e["reason"]) for e in json.loads(out)["errors"]] == [
        (2, f"cannot decode '{tmp_path}/broken.png' (not a supported image?)")
    ]


def test_an_image_that_is_not_a_regular_file_is_named_and_never_opened(tmp_path, capsys):
    """A FIFO named by a map line is an error naming it (before: 'not found', and reading it could block)."""
    pytest.importorskip("cv2")
    os.mkfifo(tmp_path / "pipe.png")
    path = write(tmp_path, f"{tmp_path}/pipe.png\t0\n", "map.txt")
    code, out, _ = cli(capsys, path, "--json")
    assert code == 1
    assert [(e["line"], e["reason"]) for e in json.loads(out)["errors"]] == [
        (1, f"not a regular file: '{tmp_path}/pipe.png'")
    ]


@pytest.mark.parametrize(
    ("content", "message"),
    [(b"\x00\x01\x02binary\xff\xfe" * 50, "binary data"), (b"# Notes\n\nplain text\nmore text\n", "'|name'")],
)
def test_not_data_exits_2(tmp_path, capsys, content, message):
    path = tmp_path / "file.ctf"
    path.write_bytes(content)
    code, out, err = cli(capsys, path)
    assert (code, out) == (2, "")
    assert "not a CNTK data file" in err and message in err


def test_missing_file_exits_2(tmp_path, capsys):
    code, _, err = cli(capsys, tmp_path / "nope.ctf")
    assert code == 2 and "No such file or directory" in err


CONFIG = """
Train = [
    reader = [
        readerType = "CNTKTextFormatReader"
        file = "{data}"
        maxErrors = 100
        input = [
            a = [ dim = 2 ; format = "dense" ]
            b = [ dim = 5 ; format = "sparse" ]
        ]
    ]
]
Test = [
    reader = [
        readerType = "CNTKTextFormatReader"
        file = "{good}"
        input = [ a = [ dim = 1 ; format = "dense" ] ]
    ]
]
"""


def test_a_config_is_validated_through_its_readers(tmp_path, capsys):
    pytest.importorskip("cntkio.brainscript")
    bad = write(tmp_path, "0 |a 1 2 |b 1:1\n0 |a 3 .5\n1 |a 4 5 |b 9:1\n", "bad.ctf")
    good = write(tmp_path, "|a 1\n", "good.ctf")
    config = write(tmp_path, CONFIG.format(data=bad, good=good), "run.cntk")
    code, out, _ = cli(capsys, config, "--json")
    assert code == 1
    report = json.loads(out)
    assert [(f["file"], f["section"], f["valid"]) for f in report["files"]] == [
        (str(bad), "Train.reader", False),
        (str(good), "Test.reader", True),
    ]
    assert [(e["line"], e["reason"]) for e in report["errors"]] == [
        (2, "malformed number: unexpected '.'"),
        (2, "line has no valid sample"),
        (3, "sparse index out of range (dim=5, valid 0..4)"),
    ]
    code, out, _ = cli(capsys, config, "--section", "Test.reader")
    assert code == 0 and f"{good} [Test.reader]: CTFDeserializer: valid" in out


def test_python_m_cntkio_validate(tmp_path):
    path = write(tmp_path, BAD)
    result = subprocess.run(
        [sys.executable, "-m", "cntkio", "validate", str(path), "--json"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 1 and result.stderr == ""
    assert json.loads(result.stdout)["error_count"] == 5
