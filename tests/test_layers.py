"""The house's shape as tests: layers import only downwards, the faces are the public doors, constructors return
their own type, and ``import cntkio`` loads only what reading needs."""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "cntkio"
# cntkio._src's packages, lowest first: a module may import its own package and those of lower rank only.
RANKS = {
    "common": 0,
    "formats": 1,
    "corpus": 2,
    "order": 3,
    "assemble": 4,
    "reading": 5,
    "api": 6,
    "compat": 7,
    "config": 7,
    "integrations": 7,
    "cli": 8,
}
FACES = {
    "cntkio": None,  # (its __all__ is pinned below)
    "cntkio.io": None,
    "cntkio.io.transforms": None,
    "cntkio.torch": "torch",
    "cntkio.jax": "jax",
    "cntkio.grain": "grain",
    "cntkio.ray": "ray",
    "cntkio.hf": "datasets",
    "cntkio.remote": None,
    "cntkio.transforms": None,
    "cntkio.htk": None,
    "cntkio.equal_steps": None,
    "cntkio.brainscript": None,
}
PUBLIC = [
    "DEFAULT_RANDOMIZATION_WINDOW_IN_CHUNKS", "FULL_DATA_SWEEP", "INFINITELY_REPEAT", "Base64ImageDeserializer",
    "CBFDeserializer", "CNTKIOError", "CTFDeserializer", "ChunkIndex", "ConfigError", "DenseStream", "Deserializer",
    "DeserializerGroup", "DeserializerJoin", "FormatError", "HTKFeatureDeserializer", "HTKMLFDeserializer",
    "ImageDeserializer", "JoinReport", "KaldiDeserializer", "KeyProblems", "LengthMismatch", "Location",
    "MaxErrorsExceeded",
    "MinibatchData", "MinibatchSource", "MinibatchSourceFromData", "ReaderStats", "Record", "RecordDeserializer",
    "SparseStream", "StreamConfiguration", "StreamDef", "StreamDefs", "StreamInformation", "TraceLevel",
    "UserDataError", "UserDeserializer", "UserMinibatchSource", "Value", "sequence_to_cntk_text_format",
    "transforms", "write_cbf",
    # cntk.io's CNTK 2.0 names, so that `from cntk.io import X` -> `from cntkio import X` holds for every X (issue 24)
    "DEFAULT_RANDOMIZATION_WINDOW", "INFINITE_SAMPLES", "MAX_UI64", "CNTKTextFormatMinibatchSource",
    "LatticeDeserializer", "MinibatchSourceConfig", "ReaderConfig", "minibatch_source", "text_format_minibatch_source",
]  # fmt: skip


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> list[tuple[int, str]]:
    """Every cntkio module ``path`` imports (at any depth: lazy imports count), with its line."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("cntkio"):
            found += [(node.lineno, node.module)]
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names if alias.name.startswith("cntkio")]
    return found


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "_src" else None


def test_every_import_runs_down_the_layers() -> None:
    wrong = []
    for path in sorted((SRC / "_src").rglob("*.py")):
        here = _layer(_module_name(path))
        if here is None:
            continue
        assert here in RANKS, f"{path}: package {here} has no rank in this test"
        for line, target in _imports(path):
            there = _layer(target)
            if there is None or there == here:
                continue
            if RANKS[there] >= RANKS[here]:
                wrong.append(f"{path.relative_to(SRC)}:{line}: {here} imports {target} ({there})")
    assert not wrong, "\n".join(wrong)


def test_internals_are_private_by_path_and_the_faces_are_thin() -> None:
    """Every module outside ``_src`` is a face: it imports from ``_src`` (or other faces) and defines nothing but
    its docstring, imports and ``__all__``."""
    for path in sorted(SRC.rglob("*.py")):
        module = _module_name(path)
        if module.startswith("cntkio._src") or module == "cntkio.__main__":
            continue
        assert module in FACES, f"{module}: a public module that is not a declared face"
        tree = ast.parse(path.read_text())
        body = [n for n in tree.body if not isinstance(n, ast.If)]  # (TYPE_CHECKING: imports for type checkers)
        body += [n for node in tree.body if isinstance(node, ast.If) for n in (*node.body, *node.orelse)]
        for node in body:
            allowed = (ast.Import, ast.ImportFrom, ast.Expr)
            is_all = isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] in (
                ["__all__"],
                ["__version__"],
            )
            assert isinstance(node, allowed) or is_all, f"{module}:{node.lineno}: a face defines only names it imports"


@pytest.mark.parametrize("face", sorted(FACES))
def test_every_face_exports_what_its_all_names(face: str) -> None:
    extra = FACES[face]
    if extra is not None:
        pytest.importorskip(extra)
    module = importlib.import_module(face)
    names = module.__all__
    assert len(names) == len(set(names))
    for name in names:
        assert hasattr(module, name), f"{face}.{name}"
        assert not name.startswith("_")


def test_the_top_level_names_stay() -> None:
    import cntkio
    import cntkio.io

    assert sorted(cntkio.__all__) == sorted(PUBLIC)
    assert not set(cntkio.io.__all__) - set(cntkio.__all__), "every cntk.io name imports from cntkio"


def test_no_constructor_returns_another_type() -> None:
    """No class of cntkio defines ``__new__`` (a constructor returns an instance of its own class)."""
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                offenders += [
                    f"{path.relative_to(SRC)}:{item.lineno} {node.name}.__new__"
                    for item in node.body
                    if isinstance(item, ast.FunctionDef) and item.name == "__new__"
                ]
    assert not offenders, offenders


def test_import_cntkio_loads_only_what_reading_needs() -> None:
    """Frameworks, shared memory, worker processes, SciPy and plotting load on first use."""
    code = "import sys, json, cntkio; print(json.dumps(sorted(sys.modules)))"
    loaded = set(json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, check=True).stdout))
    heavy = ["torch", "jax", "ray", "scipy", "matplotlib", "tqdm", "cv2", "multiprocessing", "mmap"]
    assert not [name for name in heavy if name in loaded]
    deferred = ["integrations", "cli", "config"]  # (compat holds the faces of the public classes)
    assert not [m for m in loaded if _layer(m) in deferred], sorted(m for m in loaded if _layer(m) in deferred)
