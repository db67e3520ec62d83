"""``cntkio read CONFIG``: a BrainScript reader section read end to end, epoch by epoch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from cntkio._src.cli.main import main

CONFIG = """
DataDir = $ConfigDir$
Train = [
    SGD = [ epochSize = 5 ; maxEpochs = 3 ; minibatchSize = 2 ]
    reader = [
        readerType = "CNTKTextFormatReader" ; file = "$DataDir$/data.ctf" ; randomize = false ; maxErrors = 5
        input = [ x = [ dim = 2 ; format = "dense" ] ]
    ]
]
"""


def write(tmp_path: Path, data: str) -> Path:
    (tmp_path / "data.ctf").write_text(data)
    config = tmp_path / "train.cntk"
    config.write_text(CONFIG)
    return config


def run(capsys: Any, *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_epochs_follow_the_sgd_section(tmp_path: Path, capsys: Any) -> None:
    config = write(tmp_path, "".join(f"{i} |x {i} {i}\n" for i in range(4)))
    status, out, _ = run(capsys, "read", str(config), "--section", "Train.reader", "--json")
    report = json.loads(out)
    assert status == 0
    assert report["epoch_size"] == 5 and report["minibatch_size"] == 2
    assert [e["samples"]["x"] for e in report["epochs"]] == [5, 5, 5]  # 15 samples of the endless 4-sample timeline
    assert [e["minibatches"] for e in report["epochs"]] == [3, 3, 3]
    status, out, _ = run(capsys, "read", str(config), "--section", "Train.reader", "--epochs", "1")
    assert status == 0 and "epoch 0: 3 minibatches, 5 sequences, samples: x 5; 0 errors" in out


def test_counted_errors_give_exit_status_1(tmp_path: Path, capsys: Any) -> None:
    config = write(tmp_path, "0 |x 1 1\n1 |x 1 zz\n2 |x 2 2\n")
    status, out, _ = run(capsys, "read", str(config), "--section", "Train.reader", "--json", "--epochs", "1")
    assert status == 1 and json.loads(out)["epochs"][0]["errors"] == 2  # the bad number and its line without samples


def test_config_errors_give_exit_status_2(tmp_path: Path, capsys: Any) -> None:
    config = write(tmp_path, "0 |x 1 1\n")
    status, _, err = run(capsys, "read", str(config), "--section", "Tarin.reader")
    assert status == 2 and "no section 'Tarin'" in err and "Train.reader" in err
    status, _, err = run(capsys, "read", str(config), "--section", "Train.reader", "--var", "DataDir=/nonexistent")
    assert status == 2 and "/nonexistent/data.ctf" in err


def test_read_as_a_program(tmp_path: Path) -> None:
    config = write(tmp_path, "0 |x 1 1\n1 |x 2 2\n")
    done = subprocess.run(
        [sys.executable, "-m", "cntkio", "read", str(config), "--section", "Train.reader", "--epochs", "2"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "epoch 1:" in done.stdout and "stage" in done.stdout
