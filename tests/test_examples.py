"""Every example script (examples/*.py but make_data.py) runs to the end in a fresh process from the repository root,
printing what it shows; examples/make_data.py writes examples/data/ again byte for byte.

An example naming optional modules on a ``# requires: torch, cv2`` line is skipped when one of them is not
installed — except under ``CI=true``, where that is a failure (but for a module the test extra does not install on
this Python: ``ONLY_FROM``).
"""

from __future__ import annotations

import filecmp
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
DATA = EXAMPLES / "data"
TIMEOUT = 180  # seconds per example (Ray starts a local instance; DDP two processes)
NOT_EXAMPLES = {"make_data.py"}

# What an example prints when it worked: its own checks come out True, its counts are the data's.
EXPECTED = {
    "getting_started.py": ["over 12 sequences"],
    "read_ctf.py": ["keys [9, 10, 11]", "raised: MaxErrorsExceeded", "7 bad record(s) counted"],
    "read_cbf.py": ["read 12 sequences, 53 samples", "same order: True same values: True", "raised:"],
    "read_htk_mlf.py": ["features follow the labels: True", "8 of 8 sequences kept"],
    "read_kaldi.py": ["same values as written: True", "follow the labels: True", "frame mode: 59 frames of 59"],
    "read_images.py": ["(4, 3, 16, 16) float32", "same augmentation on a re-run: True", "(24, 24, 3) uint8"],
    "read_base64_images.py": ["same pixels as the PNG files: True"],
    "composite_join.py": ["10 of 12 sequences kept, 2 dropped", "keys the labels lack: (5, 9)", "strict=True raised"],
    "sharded_corpus.py": ["sequences: 12", "slice [0%:25%]"],
    "read_remote.py": ["sequences from the shards: 12", "CBF sequences: 12", "same sequences: True"],
    "index_cache.py": ["same minibatches: True", "in index_cache_dir: 1 file", "is stale"],
    "user_deserializer.py": ["joined with labels.ctf: [0, 1, 2, 3, 4, 6, 7, 8, 10, 11]"],
    "record_decoder.py": ["tokens per record: [0, 4, 4, 2, 5, 2, 5, 5, 6, 3]", "1 bad record(s) counted"],
    "csv_reader.py": ["60 samples"],
    "svmlight_reader.py": ["60 samples"],
    "checkpoint_resume.py": ["the same minibatches: True", "refused:"],
    "torch_layouts.py": ["PackedSequence", "EmbeddingBag output: (4, 4)"],
    "torch_workers_resume.py": ["together the reference epoch: True"],
    "torch_ddp.py": ["every sequence once: True"],
    "jax_loop.py": ["resumed run = uninterrupted run: True"],
    "jax_multiprocess.py": ["every sequence once: True"],
    "grain_loop.py": ["every sequence once: True", "resumed run = uninterrupted run: True"],
    "ray_data.py": ["sequences: 12", "read back: 12 sequences, 53 samples"],
    "ray_speech_images.py": ["speech CBF read back: 8 utterances", "same pixels again: True", "errors: [(5, '4')]"],
    "hf_datasets.py": ["sequences: 12", "every sequence once: True", "4 rows, columns"],
}


# Modules the test extra installs only from some Python on (pyproject.toml's markers: no wheels before): missing on an
# older Python is a skip, under CI too.
ONLY_FROM = {"grain": (3, 11)}


def examples() -> list[str]:
    return sorted(p.name for p in EXAMPLES.glob("*.py") if p.name not in NOT_EXAMPLES)


def required_modules(script: Path) -> list[str]:
    """The modules of the example's ``# requires:`` lines (comma- or space-separated)."""
    text = script.read_text(encoding="utf-8")
    return [name for line in re.findall(r"^# requires:(.*)$", text, re.MULTILINE) for name in re.split(r"[,\s]+", line)
            if name]  # fmt: skip


def missing_modules(names: list[str]) -> list[str]:
    missing = []
    for name in names:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(name)
    return missing


def test_every_example_is_checked() -> None:
    """A new example gets its line in EXPECTED (an example another part of the project adds still runs below)."""
    unknown = [name for name in examples() if name not in EXPECTED and not name.startswith("migrate")]
    assert not unknown, f"add what these print to EXPECTED: {unknown}"
    assert not [name for name in EXPECTED if name not in examples()]


@pytest.mark.parametrize("name", examples())
def test_example_runs(name: str) -> None:
    script = EXAMPLES / name
    text = script.read_text(encoding="utf-8")
    assert text.startswith('"""'), f"{name} starts with a docstring saying what it shows"
    missing = missing_modules(required_modules(script))
    if missing:
        if os.environ.get("CI") == "true" and not all(sys.version_info < ONLY_FROM.get(m, (0,)) for m in missing):
            pytest.fail(f"{name} needs {', '.join(missing)}, which CI must install")
        pytest.skip(f"{name} needs {', '.join(missing)}")
    result = subprocess.run(
        [sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT, check=False
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"{name} exited with {result.returncode}:\n{output[-4000:]}"
    assert result.stdout.strip(), f"{name} printed nothing"
    for expected in EXPECTED.get(name, []):
        assert expected in output, f"{name} did not print {expected!r}:\n{output[-4000:]}"


def test_make_data_writes_the_committed_files(tmp_path: Path) -> None:
    """make_data.py into a new folder gives every file of examples/data/, byte for byte, and nothing else."""
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "make_data.py"), str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=TIMEOUT, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    written = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file())
    committed = sorted(
        p.relative_to(DATA).as_posix() for p in DATA.rglob("*") if p.is_file() and not p.name.endswith(".cntkio-index")
    )
    assert written == committed
    different = [name for name in written if not filecmp.cmp(tmp_path / name, DATA / name, shallow=False)]
    assert not different, f"examples/make_data.py writes other bytes for {different}: run it and commit the files"
