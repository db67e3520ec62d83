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


# --- image cases (test_image_conformance.py) --------------------------------------------------------------------
#
# Every image case of the corpus is replayed. The ones below cannot be compared with CNTK's control token for token
# in cntkio's default mode, or fail differently from CNTK; ``check`` says what the suite checks instead:
#
# * ``"multiset"``: the output depends only on the order in which CNTK's shuffle delivered the images. The suite
#   checks the multiset of per-sample records (one output line per written matrix) in cntkio's own randomized
#   order, and, where ``compat_reproduces_cntk``, CNTK's exact control with ``MinibatchSource(compat=True)``.
# * ``"properties"``: random augmentation. cntkio draws from its own generator (seed, sweep, key, view), so values
#   are not CNTK's (spec image.md §4: matching the distributions is required, bit-exact values are not). The suite
#   checks shapes, the [0, 255] range, determinism, the structure of the transform in both outputs, and the mean.
# * ``"exception"``: cntkio raises too, but at another time or for a wider condition than CNTK.
#
# All exception cases differ from CNTK in wording: cntkio messages name the file, the 1-based line, column, byte
# offset and sequence key (CNTK counts map lines from 0 and names no key); the suite checks type and location.


@dataclass(frozen=True)
class ImageDivergence:
    """Why an image case differs from CNTK's recorded result, and what the suite checks instead."""

    check: str  # "multiset", "properties" or "exception"
    reason: str
    compat_reproduces_cntk: bool = False  # MinibatchSource(compat=True) writes CNTK's control exactly


_ORDER = (
    "the control's image order (and, for an epoch shorter than a sweep, which images it holds) is CNTK's "
    "BlockRandomizer with seed 0; cntkio's default randomizer is not CNTK's, so in general it delivers the same "
    "images in another order."
)
_LONE_IMAGE_WINDOW = " CNTK randomizes a lone image deserializer with a window of 1 chunk (1 image)."
_COMPOSITE_WINDOW = " CNTK's composite reader randomizes the whole corpus at once (window >= every chunk)."

IMAGE_EXPECTED_DIFFERENT: dict[str, ImageDivergence] = {
    **{
        name: ImageDivergence("multiset", _ORDER + _LONE_IMAGE_WINDOW, compat_reproduces_cntk=True)
        for name in (
            "ImageReaderSimple",
            "ImageReaderZip",
            "ImageReaderZipDuplicate",
            "ImageReaderEmptyTransforms",
            "ImageReader3DotsSyntaxInMapFile",
        )
    },
    **{
        name: ImageDivergence("multiset", _ORDER + _COMPOSITE_WINDOW, compat_reproduces_cntk=True)
        for name in ("ImageAndTextReaderSimple", "ImageAndImageReaderSimple")
    },
    "ImageReaderIntensityTransform": ImageDivergence(
        "properties",
        "PCA lighting noise drawn from cntkio's generator, not CNTK's mt19937 + boost normal: other values of the "
        "same distribution (a shift per channel, N(0, stddev) weights of the eigenvalues).",
    ),
    "ImageReaderColorTransform": ImageDivergence(
        "properties",
        "brightness/contrast/saturation drawn from cntkio's generator, not CNTK's mt19937 + boost uniform: other "
        "values of the same distribution.",
    ),
    "ImageReaderZipMissingFile": ImageDivergence(
        "exception",
        "CNTK fails when the missing item is read ('Cannot retrieve image data for some sequences', details only in "
        "the log); cntkio checks every zip item when the deserializer is made and names the item, map line and key.",
    ),
    **{
        name: ImageDivergence(
            "exception",
            "CNTK's packer fails when one minibatch holds images of two shapes; cntkio fixes the stream's shape "
            "from the first decodable image and fails on the first image of another shape when its chunk is "
            "parsed (naming map line and key), even if the two never meet in one minibatch.",
        )
        for name in ("ImageReaderInvalidEmptyTransforms", "ImageReaderMissingScaleTransforms")
    },
}
