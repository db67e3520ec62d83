"""Every place where cntkio deliberately differs from the CNTK behaviour a corpus case records.

Each entry is a CNTK bug or quirk that cntkio fixes by default (numbers refer to the list in the spec
README, "CNTK behaviours the new implementation should NOT copy"). For these cases the suite checks
the fixed behaviour instead and, where ``compat=True`` covers the quirk, that compat mode reproduces
CNTK.
"""

from __future__ import annotations

from dataclasses import dataclass

_NO_NEWLINE_EMPTY_DENSE = (
    "spec README bug #8: CNTK skips the dense checks and padding on a final row without newline, so "
    "an empty dense sample there is an error. cntkio handles the final row like any other row: the empty "
    "sample is zero-padded (value 0, no error), exactly as with a trailing newline. compat=True does not "
    "model #8."
)


@dataclass(frozen=True)
class Divergence:
    """Why a case differs, and what cntkio does instead."""

    reason: str
    fixed_output: str | None = None  # reader cases: the output cntkio writes by default (compared by tokens)
    fixed_value: float | None = None  # TextParser cases: the first sample's value cntkio reads by default
    compat_reproduces_cntk: bool = False  # CTFDeserializer(compat=True) gives CNTK's result


EXPECTED_DIFFERENT: dict[str, Divergence] = {
    "CNTKTextFormatReader_blank_lines": Divergence(
        "spec README bug #2: with skipSequenceIds=true (line mode) CNTK makes the blank line a sequence "
        "with no inputs, which is fatal. cntkio skips blank lines and reads both sequences.",
        fixed_output="1 2",
        compat_reproduces_cntk=True,
    ),
    "CNTKTextFormatReader_blank_lines_ignored": Divergence(
        "spec README bug #1: CNTK's index counts the blank line, so sequence 1 has length 2, the sweep has "
        "3 samples and the 3-sample epoch is exactly one sweep ('1 2'). cntkio's length is the parsed "
        "sample count (1): the sweep has 2 samples and the epoch runs on into sweep 2 ('1 2 1').",
        fixed_output="1 2 1",
        compat_reproduces_cntk=True,
    ),
    **{
        f"CNTKTextFormatReader_no_trailing_newline_invalid_input[{i}]": Divergence(
            _NO_NEWLINE_EMPTY_DENSE, fixed_value=0.0
        )
        for i in range(4)  # contents "|A", "|A\t", "|A ", "|A     "
    },
    "CNTKTextFormatReader_invalid_inputs": Divergence(
        "spec README bug #2 (and #1): CNTK counts every row without a valid sample as an error, including "
        "blank lines, comment-only lines and lines holding only unknown inputs (lines 26, 30 and 32). "
        "cntkio counts a row only when one of its samples failed: blank and comment lines carry no data, and "
        "unknown inputs are not errors. Every other row and offset CNTK blames is reproduced.",
    ),
}

# invalid_inputs: CNTK WARNING kinds (message prefixes) that describe no bad sample or row of their own,
# so cntkio reports no error for them. Every other WARNING of the control must match an error of cntkio.
IGNORED_CNTK_WARNINGS: dict[str, str] = {
    "Could not read a row": "repeats the 'Empty input row' warning of the same row (same offset)",
    "Number of samples for sequence": (
        "spec README bug #1: CNTK compares parsed samples with the index line count; cntkio's sequence "
        "length is the parsed sample count"
    ),
    "Exhausted all input expected for the current sequence (id": (
        "sequence-level consequence of the line count (bug #1) and of rows already reported"
    ),
    "Exhausted all input expected for the current sequence while reading": (
        "spec README bug #8: CNTK does not treat the final row without newline like other rows"
    ),
    "A dense sample at offset": (
        "zero-padding of a short dense sample (bug #10, kept): a warning in both readers, not an error"
    ),
}
