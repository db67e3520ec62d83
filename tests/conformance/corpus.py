"""Locating the CNTK conformance corpus and selecting the CTF cases this suite can replay."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
ENV_VAR = "CNTKIO_CONFORMANCE_DIR"

Case = dict[str, Any]


def corpus_dir() -> Path:
    """``$CNTKIO_CONFORMANCE_DIR``, else ``../shared/conformance/cntk`` next to the repository."""
    configured = os.environ.get(ENV_VAR)
    if configured:
        return Path(configured)
    return REPO_ROOT.parent / "shared" / "conformance" / "cntk"


def corpus_present() -> bool:
    return (corpus_dir() / "cases.json").is_file()


def is_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() == "true"


def missing_corpus_message() -> str:
    return (
        f"CNTK conformance corpus not found at {corpus_dir()} (no cases.json); "
        f"set {ENV_VAR} to the folder that holds cases.json"
    )


def selected_cases() -> list[Case]:
    """CTF and CBF cases that do not depend on CNTK's random generator and are runnable from the corpus."""
    if not corpus_present():
        return []
    cases = json.loads((corpus_dir() / "cases.json").read_text(encoding="utf-8"))["cases"]
    return [c for c in cases if c["kind"] in ("ctf", "cbf") and not c["rng_dependent"] and c["runnable_from_corpus"]]


def cntk_random_order_cases() -> list[Case]:
    """CTF cases whose control embodies CNTK's shuffle and that one CTF deserializer can reproduce."""
    if not corpus_present():
        return []
    cases = json.loads((corpus_dir() / "cases.json").read_text(encoding="utf-8"))["cases"]
    return [
        c
        for c in cases
        if c["kind"] == "ctf" and c["rng_dependent"] and c["runnable_from_corpus"] and c.get("control_present")
    ]


def self_consistency_pairs() -> list[tuple[Case, Case]]:
    """Composite cases checked by self-consistency: (the single-file case, the same data in two files)."""
    if not corpus_present():
        return []
    cases = json.loads((corpus_dir() / "cases.json").read_text(encoding="utf-8"))["cases"]
    by_name = {c["name"]: c for c in cases if c["kind"] == "ctf" and c.get("compare") == "self_consistency"}
    return [
        (single, by_name[name.replace("[single_file]", "[two_files]")])
        for name, single in sorted(by_name.items())
        if name.endswith("[single_file]") and single["runnable_from_corpus"]
    ]


def image_cases() -> list[Case]:
    """Every image case of the corpus (kind ``image``), whatever its harness, expectation or RNG dependence."""
    if not corpus_present():
        return []
    cases = json.loads((corpus_dir() / "cases.json").read_text(encoding="utf-8"))["cases"]
    return [c for c in cases if c["kind"] == "image"]


def is_reader_case(case: Case) -> bool:
    """Cases run through CNTK's ``HelperRunReaderTest`` (config file, epochs, control file)."""
    return case["harness"] == "HelperRunReaderTest"


def is_generated_input_case(case: Case) -> bool:
    """``TextParser direct`` cases that parse a one-line temporary file."""
    return "generated_input" in case


def control_text(case: Case) -> str:
    """The expected output; a control path that does not exist counts as empty (corpus README §2)."""
    path = corpus_dir() / case["control_file"]
    return path.read_text(encoding="utf-8") if path.is_file() else ""
