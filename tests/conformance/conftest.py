"""Counts the CTF cases the conformance suite reproduced and prints the total at the end of the session."""

from __future__ import annotations

from typing import Any

import pytest

from .corpus import corpus_present, missing_corpus_message
from .expected_different import EXPECTED_DIFFERENT

_outcomes: dict[str, str] = {}
_EXTRA_OUTCOMES = (("xfailed", "xfail (known cntkio bugs)"), ("xpassed", "xpassed"), ("failed", "failed"))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "ctf_case: the test that replays one CTF case of the CNTK corpus")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        callspec = getattr(item, "callspec", None)
        if not item.get_closest_marker("ctf_case") or callspec is None:
            continue
        cases = [callspec.params.get("case"), *(callspec.params.get("pair") or ())]  # a pair: both cases
        item.user_properties.append(("ctf_cases", tuple(case["name"] for case in cases if case)))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    xfail = hasattr(report, "wasxfail")
    for name in dict(report.user_properties).get("ctf_cases", ()):
        if report.failed:
            _outcomes[name] = "failed"
        elif report.when == "call":
            if _outcomes.get(name) != "failed":
                _outcomes[name] = ("xfailed" if report.skipped else "xpassed") if xfail else report.outcome
        elif report.skipped:
            _outcomes.setdefault(name, "skipped")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _outcomes:
        if not corpus_present():
            terminalreporter.write_line(f"conformance: skipped, {missing_corpus_message()}")
        return
    ran = {name: outcome for name, outcome in _outcomes.items() if outcome != "skipped"}
    different = [name for name in ran if name in EXPECTED_DIFFERENT]
    reproduced = sum(outcome == "passed" for name, outcome in ran.items() if name not in EXPECTED_DIFFERENT)
    parts = [
        f"conformance: {reproduced}/{len(ran)} CTF and CBF cases reproduced",
        f"{len(different)} expected-different",
    ]
    for outcome, label in _EXTRA_OUTCOMES:
        count = sum(o == outcome for o in ran.values())
        if count:
            parts.append(f"{count} {label}")
    terminalreporter.write_line(", ".join(parts))
