"""The format registry is the one table the command line, sniffing and BrainScript configs look formats up in."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from cntkio._src.cli.check import INSPECTORS
from cntkio._src.cli.common import is_config, open_deserializer
from cntkio._src.common.errors import ConfigError
from cntkio._src.config.readers import DESERIALIZERS, LEGACY_READERS
from cntkio._src.formats import registry
from cntkio._src.formats.sniff import detect_bytes

CLI = Path(registry.__file__).parents[1] / "cli"


def test_every_data_format_has_an_inspect_hook_and_config_none() -> None:
    data = {f.name for f in registry.FORMATS if f.deserializer is not None}
    assert set(INSPECTORS) == data and registry.CONFIG.name not in data


def test_brainscript_names_come_from_the_registry() -> None:
    for form in registry.FORMATS:
        if form.brainscript_type:
            assert registry.by_brainscript_type(form.brainscript_type) is form
            assert DESERIALIZERS[form.brainscript_type][0] == form.brainscript_module
            assert form.brainscript_module in LEGACY_READERS
    assert list(DESERIALIZERS) == [
        "CNTKTextFormatDeserializer", "CNTKBinaryFormatDeserializer", "ImageDeserializer", "Base64ImageDeserializer",
        "HTKFeatureDeserializer", "HTKMLFDeserializer",
    ]  # fmt: skip  (the order "supported: ..." lists them in)


def test_sniffing_uses_the_registry() -> None:
    assert detect_bytes(registry.CBF.magic + b"\0" * 8).format == "cbf"
    assert detect_bytes(registry.MLF.header + b"\n").format == "mlf"
    assert detect_bytes(b"", "x.bs").format == "config" and detect_bytes(b"", "x.ctf").format == "ctf"
    assert detect_bytes(b"a b c\n", "list.SCP").format == "scp"
    assert [registry.title(n) for n in ("ctf", "Other")] == ["CTF (CNTK text format)", "Other"]


def test_opening(tmp_path: Path) -> None:
    assert is_config("a.CNTK") and is_config("x.ctf", "reader") and not is_config("x.ctf")
    empty = tmp_path / "empty.ctf"
    empty.write_text("")
    with pytest.raises(ConfigError, match=r"no '\|name' input found"):
        open_deserializer(empty)
    with pytest.raises(IsADirectoryError):
        open_deserializer(tmp_path)


def test_no_import_circle_in_the_command_line() -> None:
    """A module of cli/ imports main (the parser) nowhere, and plot and stats do not import each other."""
    imports: dict[str, set[str]] = {}
    for path in CLI.glob("*.py"):
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                found.add(node.module)
                found.update(f"{node.module}.{a.name}" for a in node.names)
        imports[path.stem] = {m.rsplit(".", 1)[-1] for m in found if m.startswith("cntkio._src.cli")}
    assert all("main" not in found for name, found in imports.items() if name != "main")
    assert "stats" not in imports["plot"]
    for name, found in imports.items():  # no module of cli/ reaches itself
        seen, todo = set(), list(found)
        while todo:
            module = todo.pop()
            if module in imports and module not in seen:
                seen.add(module)
                todo.extend(imports[module])
        assert name not in seen, name
