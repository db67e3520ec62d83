"""Every ``python`` block of the README and of the documentation pages runs as written, from the repository's root,
on the data the repository ships (each block on its own, in a fresh interpreter). A block that is not meant to run
on its own is not a ``python`` block: pages show parts of the examples with ``literalinclude``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
PAGES = [page for page in PAGES if "_build" not in page.parts]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def blocks() -> list[tuple[str, str]]:
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for number, match in enumerate(BLOCK.finditer(text), 1):
            line = text.count("\n", 0, match.start()) + 1
            found.append((f"{page.relative_to(ROOT)}:{line}#{number}", match.group(1)))
    return found


def test_there_are_blocks() -> None:
    assert any(name.startswith("README.md") for name, _ in blocks())


@pytest.mark.parametrize(("name", "code"), blocks(), ids=[name for name, _ in blocks()])
def test_block_runs(name: str, code: str, tmp_path: Path) -> None:
    needs = re.findall(r"^\s*(?:import|from)\s+(torch|jax|ray|cv2)\b", code, re.M)
    for module in sorted(set(needs)):
        if os.environ.get("CI") != "true":
            pytest.importorskip(module)
    script = tmp_path / "block.py"
    script.write_text(code, encoding="utf-8")
    done = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{name} failed:\n{code}\n--- stderr ---\n{done.stderr[-3000:]}"
