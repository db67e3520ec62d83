"""Every ``python`` block of the README and of the documentation pages runs as written, from the repository's root,
on the data the repository ships (each block on its own, in a fresh interpreter). A block that is not meant to run
on its own is not a ``python`` block: pages show parts of the examples with ``literalinclude``."""

from __future__ import annotations

import os
import re
import shlex
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


def test_the_readmes_links_lead_to_files() -> None:
    """The README's relative links (into docs/, CHANGELOG.md) name files that exist (the docs build checks its own)."""
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", (ROOT / "README.md").read_text(encoding="utf-8"))
    relative = [link for link in links if "://" not in link]
    assert relative and all((ROOT / link).is_file() for link in relative), relative


def command_lines() -> list[tuple[str, str]]:
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for match in re.finditer(r"^```bash\n(.*?)^```", text, re.S | re.M):
            for line in match.group(1).splitlines():
                if line.startswith("cntkio "):
                    found.append((f"{page.relative_to(ROOT)}: {line.split('#')[0].strip()}", line.split("#")[0]))
    return found


@pytest.mark.parametrize(("name", "line"), command_lines(), ids=[name for name, _ in command_lines()])
def test_command_line_runs(name: str, line: str) -> None:
    """The ``cntkio`` command lines of the pages run as written (exit status 0, or 1 where the data has errors)."""
    argv = [sys.executable, "-m", "cntkio", *shlex.split(line)[1:]]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode in (0, 1) and done.stdout and "Traceback" not in done.stderr, (name, done.stderr[-2000:])
    assert (done.returncode == 1) == ("broken" in line), name  # only the broken file has errors
