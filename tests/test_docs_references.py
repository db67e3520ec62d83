"""The documentation cannot drift from the code it describes.

* Every ``tests/<file>.py::<test>`` (or ``::<Class>::<test>``) a page under ``docs/`` names exists: the guarantees
  table and the migration table point at tests that prove their rows.
* Every cntkio name the migration table (docs/migration.md, "Every cntk.io name") gives is importable from where the
  table says, with the keyword arguments it names, and every row's status is one of the page's words.
* The migration page's before/after block is the header of ``examples/migrate_from_cntk.py``, and the output the page
  shows is what the script prints.
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
MIGRATION = DOCS / "migration.md"
GUARANTEES = DOCS / "guarantees.md"
EXAMPLE = ROOT / "examples" / "migrate_from_cntk.py"
SEQUENCES = ROOT / "examples" / "data" / "sequences.ctf"

REFERENCE = re.compile(r"\b(tests/[\w/]+\.py)::(\w+)(?:::(\w+))?")
STATUSES = ("same, with a difference", "same", "deprecated", "ignored", "not implemented")
NAME = re.compile(r"^(cntkio(?:\.\w+)*)(?:\((.*)\))?$")  # cntkio.io.X.y or cntkio.io.X(keyword=, other=)


def pages() -> list[Path]:
    return sorted(p for p in DOCS.rglob("*.md") if "_build" not in p.relative_to(DOCS).parts)


def references(text: str) -> list[tuple[str, str, str | None]]:
    return [(m.group(1), m.group(2), m.group(3)) for m in REFERENCE.finditer(text)]


@functools.cache
def definitions(path: Path) -> tuple[set[str], dict[str, set[str]]]:
    """A test file's top-level functions and classes, and each class's methods."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top: set[str] = set()
    methods: dict[str, set[str]] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            top.add(node.name)
        if isinstance(node, ast.ClassDef):
            methods[node.name] = {
                item.name for item in node.body if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
            }
    return top, methods


def missing_references(text: str) -> list[str]:
    missing = []
    for file, name, member in references(text):
        path = ROOT / file
        if not path.is_file():
            missing.append(f"{file} (no such file)")
            continue
        top, methods = definitions(path)
        if member is None and name not in top:
            missing.append(f"{file}::{name}")
        elif member is not None and member not in methods.get(name, set()):
            missing.append(f"{file}::{name}::{member}")
    return missing


# ------------------------------------------------------------------------------------------- test references
def test_the_pages_name_tests():
    """The pattern finds the references (a page that stopped naming tests, or a changed pattern, fails here)."""
    assert len(references(GUARANTEES.read_text(encoding="utf-8"))) >= 200
    assert len(references(MIGRATION.read_text(encoding="utf-8"))) >= 100


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(DOCS)))
def test_every_test_a_page_names_exists(page: Path):
    missing = missing_references(page.read_text(encoding="utf-8"))
    assert not missing, f"{page.relative_to(ROOT)} names tests that do not exist: {missing}"


def test_a_missing_test_is_caught():
    assert missing_references("`tests/test_resume.py::test_resume_after_every_minibatch_is_exact`") == []
    assert missing_references("`tests/test_ctf_format.py::TestDense::test_empty_dense_sample_is_all_zeros`") == []
    assert missing_references("`tests/test_resume.py::test_no_such_test`") == [
        "tests/test_resume.py::test_no_such_test"
    ]
    assert missing_references("`tests/test_ctf_format.py::test_empty_dense_sample_is_all_zeros`")  # a method
    assert missing_references("`tests/test_nothing_here.py::test_x`") == ["tests/test_nothing_here.py (no such file)"]


# ------------------------------------------------------------------------------------------- the migration table
def table_rows(text: str) -> list[list[str]]:
    """The rows of the tables under "## Every cntk.io name", split into cells."""
    section = text.split("## Every cntk.io name", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        if not line.startswith("|") or set(line) <= set("|-: "):
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split(" | ")]
        if cells[0].startswith("`cntk.io`"):  # the header
            continue
        rows.append(cells)
    return rows


def names_in(cell: str) -> list[tuple[str, list[str]]]:
    """Each cntkio name of a cell (backticked, starting with ``cntkio.``) and the keywords it names."""
    found = []
    for token in re.findall(r"`([^`]+)`", cell):
        match = NAME.match(token)
        if match:
            keywords = re.findall(r"(\w+)=", match.group(2) or "")
            found.append((match.group(1), keywords))
    return found


@functools.cache
def samples() -> list[tuple[Any, Any]]:
    """(public object, an instance of it) for attributes that exist on instances only."""
    import cntkio.io as C

    streams = C.StreamDefs(
        features=C.StreamDef(field="features", shape=3), labels=C.StreamDef(field="label", shape=4, is_sparse=True)
    )
    source = C.MinibatchSource(C.CTFDeserializer(str(SEQUENCES), streams), randomize=False, max_sweeps=1)
    data = source.next_minibatch(16)[source.streams.features]
    return [
        (C.MinibatchSource, source),
        (C.MinibatchData, data),
        (C.Value, data.data),
        (C.CTFDeserializer, C.CTFDeserializer(str(SEQUENCES))),  # CNTK 2.0's form: streams mapped later
        (C.ImageDeserializer, C.ImageDeserializer("map.txt")),  # (nothing is read before the streams are mapped)
    ]


def resolve(dotted: str) -> Any:
    """Imports the longest module prefix of ``dotted`` and looks the rest up as attributes (of an instance when the
    attribute exists on instances only)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        break
    else:
        raise ImportError(dotted)
    for part in parts[cut:]:
        if not hasattr(obj, part):
            instance = next((sample for public, sample in samples() if public is obj), None)
            if instance is None or not hasattr(instance, part):
                raise AttributeError(f"{dotted}: no attribute {part!r}")
            obj = instance
        obj = getattr(obj, part)
    return obj


def takes(obj: Any, keyword: str) -> bool:
    """Whether ``obj`` (a callable, or a class with ``__init__`` along its bases) names ``keyword``."""
    candidates = [obj]
    if inspect.isclass(obj):
        candidates += [klass.__init__ for klass in obj.__mro__ if "__init__" in vars(klass)]
    for candidate in candidates:
        try:
            if keyword in inspect.signature(candidate).parameters:
                return True
        except (TypeError, ValueError):
            continue
    return False


def test_the_migration_table_has_its_rows():
    rows = table_rows(MIGRATION.read_text(encoding="utf-8"))
    assert len(rows) >= 45
    assert all(len(row) == 4 for row in rows), [row for row in rows if len(row) != 4]


@pytest.mark.parametrize("row", table_rows(MIGRATION.read_text(encoding="utf-8")), ids=lambda row: row[0][:60])
def test_every_name_the_migration_table_gives_is_importable(row: list[str]):
    cntk, cntkio_cell, status, tests = row
    assert status.startswith(STATUSES), f"{cntk}: unknown status {status!r}"
    names = names_in(cntkio_cell)
    if not status.startswith("not implemented"):
        assert names, f"{cntk}: the row says it is available but names no cntkio object"
        assert tests != "—", f"{cntk}: the row says it is available but names no test"
    for dotted, keywords in names:
        obj = resolve(dotted)
        for keyword in keywords:
            assert takes(obj, keyword), f"{dotted} does not take {keyword}="


def test_the_resolver_refuses_what_does_not_exist():
    assert resolve("cntkio.io.MinibatchSource.streams") is not None  # an instance attribute
    assert resolve("cntkio.io.CTFDeserializer.map_input") is not None  # on CNTK 2.0's form of the deserializer
    assert takes(resolve("cntkio.io.MinibatchSource"), "num_parse_threads")  # (through its base class)
    assert not takes(resolve("cntkio.io.MinibatchSource"), "epochs")
    with pytest.raises(AttributeError):
        resolve("cntkio.io.MinibatchSource.is_distributed")
    with pytest.raises(AttributeError):
        resolve("cntkio.io.NoSuchName")


# ------------------------------------------------------------------------------------------- the worked example
def fenced(text: str, language: str) -> list[list[str]]:
    return [block.splitlines() for block in re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)]


def test_the_before_and_after_block_is_the_examples_header():
    text = MIGRATION.read_text(encoding="utf-8")
    example = EXAMPLE.read_text(encoding="utf-8").splitlines()
    header = next(block for block in fenced(text, "diff") if any("migrate" in line or "json" in line for line in block))
    after = [line[1:] for line in header if not line.startswith("-")]
    before = [line[1:] for line in header if not line.startswith("+")]
    start = example.index(after[0])
    assert example[start : start + len(after)] == after
    changed = [b for b, a in zip(before, after) if a != b]
    assert changed == ["import cntk.io as C"] and sum(line.startswith("+") for line in header) == 1


def test_the_output_the_page_shows_is_what_the_example_prints():
    text = MIGRATION.read_text(encoding="utf-8")
    shown = next(block for block in fenced(text, "text") if block and block[0].startswith("before training"))
    result = subprocess.run(
        [sys.executable, str(EXAMPLE)], cwd=ROOT, capture_output=True, text=True, check=False, timeout=600
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == shown


def test_the_pages_name_every_torch_layout() -> None:
    """The PyTorch page's table and the API reference list the layouts cntkio.torch has, no more, no fewer."""
    torch_layouts = pytest.importorskip("cntkio._src.integrations.torch_layouts")
    names = set(torch_layouts.LAYOUTS)
    table = set(re.findall(r'^\| `"(\w+)"`', (DOCS / "frameworks" / "pytorch.md").read_text(encoding="utf-8"), re.M))
    api = (DOCS / "api.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"``(\w+)``", api[api.index("py:data:: LAYOUTS") : api.index("py:data:: STATE_KEY")]))
    assert table == names and listed == names, (names ^ table, names ^ listed)
