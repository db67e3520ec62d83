"""CNTK's image reader unit tests (corpus ``cases.json``, every case of kind ``image``) replayed with cntkio.

Each case is checked in one of these ways (``IMAGE_EXPECTED_DIFFERENT`` in expected_different.py lists, with
reasons, every case that cannot be compared with CNTK's control as is):

* **exact** (``rng_dependent`` false, success): the control file, token for token and line for line.
* **multiset** (the output depends only on CNTK's shuffle): in cntkio's own randomized order, the multiset of
  per-sample records (the sample's line in every written matrix) equals the control's, or, for an epoch shorter
  than a sweep, both are sub-multisets of one sweep read in map order. With ``MinibatchSource(compat=True)`` and the
  randomization window CNTK's reader used, the control is reproduced exactly as well.
* **properties** (random intensity / colour transforms): shapes, the [0, 255] range, determinism for a fixed seed,
  per-sweep variation, the structure of the transform (in cntkio's output and in CNTK's control), the spread of the
  random draws and the mean over many sweeps against the untransformed image.
* **exception**: cntkio's error type, and that it names the file, the (1-based) line and the sequence key.
* **keys** (``Base64WithWriteIds``, a custom harness): the multiset of sequence keys of an epoch of 8 samples.

Every reader comes from the case's own ``Config/*.cntk`` file through ``cntkio.brainscript`` (the legacy
``readerType=ImageReader`` sections and the composite ``deserializers`` ones alike), with the case's command-line
overrides; paths resolve against the case's ``working_dir``, as in CNTK (the test changes into it).
``useNumericSequenceKeys`` has no counterpart: cntkio keeps a key numeric when it is a number and text otherwise,
and joins the two kinds by their decimal text.
"""

from __future__ import annotations

import importlib.util
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cntkio import ConfigError, FormatError, MinibatchSource
from cntkio.brainscript import ReaderPlan

from .corpus import Case, control_text, corpus_dir, corpus_present, image_cases, is_ci, missing_corpus_message
from .driver import config_plan, matrix_lines, matrix_names, reader_case_minibatches, run_reader_case
from .expected_different import IMAGE_EXPECTED_DIFFERENT

WRITE_IDS = "Base64WithWriteIds"
HAVE_CV2 = importlib.util.find_spec("cv2") is not None
MISSING_CV2 = "OpenCV (cv2) is not installed: pip install '.[image]' (or '.[test]')"
SWEEPS = 400  # sweeps of the one-image map read to check the distribution of a random transform
RANDOM_KEYS = ("brightnessRadius", "contrastRadius", "saturationRadius", "intensityStdDev")


def is_legacy(case: Case) -> bool:
    return case.get("reader_config", {}).get("readerType") == "ImageReader"


def _root_relative(path: str) -> str:
    """``$RootDir$/name`` with ``RootDir = .`` (every image config sets it so)."""
    return path.replace("$RootDir$", ".")


def cntk_randomizes(case: Case) -> bool:
    """The reader's ``randomize``: legacy ``auto`` means on, ``none`` off; the composite reader defaults to on."""
    value = case["reader_config"]["randomize"]
    return value is True or str(value).startswith(("auto", "default(true)"))


def features_override(case: Case, key: str, value: object) -> str:
    """A command-line override of one key of a legacy case's image stream section."""
    section, reader, features = case["config_section"], case["reader_subsection"], case["streams"][0]["name"]
    return f"{section}=[{reader}=[{features}=[{key}={value}]]]"


# --- which cases run where ------------------------------------------------------------------------------------------


def check_instead(case: Case) -> str | None:
    """What the suite checks instead of CNTK's control (``IMAGE_EXPECTED_DIFFERENT``), None: the control itself."""
    divergence = IMAGE_EXPECTED_DIFFERENT.get(case["name"])
    return None if divergence is None else divergence.check


CASES = image_cases()
EXCEPTION_CASES = [c for c in CASES if c["expect"] == "exception"]
EXACT_CASES = [c for c in CASES if c["expect"] == "success" and not c["rng_dependent"] and c["name"] != WRITE_IDS]
WRITE_IDS_CASES = [c for c in CASES if c["name"] == WRITE_IDS]
MULTISET_CASES = [c for c in CASES if c["rng_dependent"] and check_instead(c) == "multiset"]
PROPERTY_CASES = [c for c in CASES if c["rng_dependent"] and check_instead(c) == "properties"]


def _params(cases: list[Case]) -> list[Any]:
    if not cases:
        return [pytest.param(None, id="no-corpus", marks=pytest.mark.skip(reason=missing_corpus_message()))]
    marks = [] if HAVE_CV2 else [pytest.mark.skip(reason=MISSING_CV2)]
    return [pytest.param(case, id=case["name"], marks=marks) for case in cases]


@pytest.fixture
def in_working_dir(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    """Changes into the case's working directory (restored after the test), where CNTK ran it."""
    case = request.getfixturevalue("case")
    monkeypatch.chdir(corpus_dir() / case["working_dir"])


def test_image_corpus_present() -> None:
    if not corpus_present():
        (pytest.fail if is_ci() else pytest.skip)(missing_corpus_message())
    if not HAVE_CV2:
        (pytest.fail if is_ci() else pytest.skip)(MISSING_CV2)


def test_every_image_case_is_replayed(monkeypatch: pytest.MonkeyPatch) -> None:
    """All 24 image cases are selected by exactly one check, and every table entry matches its case."""
    if not corpus_present():
        pytest.skip(missing_corpus_message())
    pytest.importorskip("cv2")  # the plans open image deserializers (test_image_corpus_present fails without it in CI)
    groups = [EXCEPTION_CASES, EXACT_CASES, WRITE_IDS_CASES, MULTISET_CASES, PROPERTY_CASES]
    names = [c["name"] for group in groups for c in group]
    assert sorted(names) == sorted(c["name"] for c in CASES) and len(CASES) == 24
    assert set(IMAGE_EXPECTED_DIFFERENT) <= set(names), "expected_different.py names an image case that is not run"
    for case in CASES:
        divergence = IMAGE_EXPECTED_DIFFERENT.get(case["name"])
        if divergence is not None:
            assert divergence.check in {"multiset", "properties", "exception"}
            assert (divergence.check == "exception") == (case["expect"] == "exception"), case["name"]
        if case["name"] == WRITE_IDS or case["expect"] == "exception":
            continue
        monkeypatch.chdir(corpus_dir() / case["working_dir"])  # image paths in map files are relative to it
        plan = config_plan(case)
        try:
            streams = Counter(name for d in plan.deserializers for name in (i.name for i in d.stream_infos()))
            files = {Path(d.filename).name for d in plan.deserializers}  # type: ignore[attr-defined]
        finally:
            plan.close()
        assert streams == Counter(s["name"] for s in case["streams"]), case["name"]
        assert files <= {Path(f).name for f in case["data_files"]}, case["name"]


# --- exact ---------------------------------------------------------------------------------------------------------


@pytest.mark.usefixtures("in_working_dir")
@pytest.mark.parametrize("case", _params(EXACT_CASES))
def test_reproduced_exactly(case: Case) -> None:
    """Cases independent of CNTK's random generator: the control, token for token and line for line (a single image
    or randomize off, so the order of reading cannot matter)."""
    plan = config_plan(case)
    try:
        output = run_reader_case(case, plan=plan)
        errors = sum(d.errors.count for d in plan.deserializers)  # type: ignore[attr-defined]
    finally:
        plan.close()
    control = control_text(case)
    assert output.split() == control.split()
    assert output.rstrip("\n") == control.rstrip("\n"), "tokens match but line breaks differ"
    if case["name"] == "InvalidImageSimpleCompositeAndBase64":  # the only image is corrupt: skipped and counted
        assert output == "" and errors == 1
    else:
        assert errors == 0


# --- multiset (order from CNTK's shuffle) ---------------------------------------------------------------------------


Record = tuple[str, ...]


def _minibatch_records(minibatch: Any, names: list[str]) -> list[Record]:
    """Sample i's line in each written matrix (every image sequence, and every CTF label here, is one sample)."""
    columns = [matrix_lines(minibatch[name]) for name in names]
    assert len({len(column) for column in columns}) == 1
    return list(zip(*columns))


def _records(case: Case) -> list[Record]:
    """The records the case's config reads (cntkio's own randomized order)."""
    names, plan = matrix_names(case["params"]), config_plan(case)
    try:
        return [r for mb in reader_case_minibatches(case, plan) for r in _minibatch_records(mb, names)]
    finally:
        plan.close()


def _sweep_records(case: Case) -> list[Record]:
    """One sweep in map order."""
    names, records, plan = matrix_names(case["params"]), [], config_plan(case)
    try:
        with MinibatchSource(plan.deserializers, max_sweeps=1, randomize=False, prefetch=False) as source:
            while minibatch := source.next_minibatch(1000):
                records += _minibatch_records(minibatch, names)
    finally:
        plan.close()
    return records


def _control_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]  # ColorTransform's control ends with a blank line


def _control_records(case: Case) -> list[Record]:
    """The control cut into minibatches (min(mb_size, rest of the epoch) samples, one line each per matrix)."""
    params = case["params"]
    lines, names = _control_lines(control_text(case)), matrix_names(params)
    records: list[Record] = []
    at = 0
    for _ in range(params["num_epochs"]):
        for start in range(0, params["epoch_size"], params["mb_size"]):
            size = min(params["mb_size"], params["epoch_size"] - start)
            columns = [lines[at + k * size : at + (k + 1) * size] for k in range(len(names))]
            at += size * len(names)
            records += zip(*columns)
    assert at == len(lines), "the control is not what the case's epochs and minibatches write"
    return records


def _within(part: Counter[Record], whole: Counter[Record]) -> bool:
    return all(whole[record] >= count for record, count in part.items())


@pytest.mark.usefixtures("in_working_dir")
@pytest.mark.parametrize("case", _params(MULTISET_CASES))
def test_multiset_in_cntkio_order(case: Case) -> None:
    """cntkio's own shuffle delivers the control's records (the epoch's images, each with its labels), in another
    order; when the epoch is shorter than a sweep, ours and CNTK's are both drawn from one sweep's records."""
    sweep, ours = Counter(_sweep_records(case)), Counter(_records(case))
    control = Counter(_control_records(case))
    params = case["params"]
    assert cntk_randomizes(case)
    size = params["epoch_size"] * params["num_epochs"]
    assert sum(ours.values()) == sum(control.values()) == size
    if size == sum(sweep.values()):
        assert ours == control == sweep
    else:
        assert _within(ours, sweep) and _within(control, sweep)


@pytest.mark.usefixtures("in_working_dir")
@pytest.mark.parametrize("case", _params(MULTISET_CASES))
def test_cntk_order_with_compat(case: Case) -> None:
    """MinibatchSource(compat=True) with the window CNTK's reader used reproduces the control exactly."""
    assert IMAGE_EXPECTED_DIFFERENT[case["name"]].compat_reproduces_cntk
    output = run_reader_case(case, cntk_random_order=True)
    control = control_text(case)
    assert output.split() == control.split()
    assert output.rstrip("\n") == control.rstrip("\n")


# --- properties (random transforms) ---------------------------------------------------------------------------------


def _images(text: str, shape: tuple[int, ...]) -> np.ndarray:
    """Written lines (one CHW image each) as an array of images."""
    return np.array([[float(t) for t in line.split()] for line in _control_lines(text)]).reshape(-1, *shape)


def _many_sweeps(plan: ReaderPlan, stream: str, count: int) -> np.ndarray:
    """The one image of the plan's map in ``count`` consecutive sweeps (each with its own random draws), read to
    the end of the epoch (a minibatch of random augmentation currently spans at most two sweeps)."""
    images = []
    with MinibatchSource(plan.deserializers, max_samples=count, randomize=False, prefetch=False) as source:
        while minibatch := source.next_minibatch(count):
            images.append(np.asarray(minibatch[stream].values, dtype=np.float64))
    return np.concatenate(images)


def _check_intensity(images: np.ndarray, base: np.ndarray, tolerance: float) -> np.ndarray:
    """Intensity adds one shift per channel to every pixel, then clamps: each image is clip(base + shift). Returns
    the shifts (images x channels), read from the mid-grey pixel (128 in every channel, never clamped)."""
    grey = (base == 128).all(axis=0)
    assert grey.any()
    shifts = (images[:, :, grey] - 128).mean(axis=2)
    expected = np.clip(base[None] + shifts[:, :, None, None], 0, 255)
    np.testing.assert_allclose(images, expected, atol=tolerance, rtol=0)
    return shifts


def _check_colour(
    images: np.ndarray, base: np.ndarray, radii: tuple[float, float, float], tolerance: float
) -> tuple[np.ndarray, np.ndarray]:
    """Colour jitter: clamp(p * alpha + beta) then saturation. Grey, black and white pixels have no saturation, so
    they stay achromatic; where beta > 0 black shows beta and grey 128 * alpha + beta: alpha and beta / mean(image)
    stay within the radii, and white is min(255, 255 * alpha + beta). Returns those alphas and beta / mean."""
    brightness, contrast, _ = radii
    achromatic = (base == base[:1]).all(axis=0)
    values = images[:, :, achromatic]
    np.testing.assert_allclose(values, np.broadcast_to(values[:, :1], values.shape), atol=tolerance, rtol=0)
    black, grey, white = (images[:, 0, (base[0] == v) & achromatic].mean(axis=1) for v in (0, 128, 255))
    lifted = black > 0.5  # beta > 0: black is not clamped
    assert lifted.any()
    alpha, beta = (grey[lifted] - black[lifted]) / 128, black[lifted] / base.mean()
    assert np.all(np.abs(alpha - 1) <= contrast + 1e-3) and np.all(beta <= brightness + 1e-3)
    np.testing.assert_allclose(white[lifted], np.minimum(255, 255 * alpha + black[lifted]), atol=0.05, rtol=0)
    return alpha, beta


def _saturation_lowered(images: np.ndarray, base: np.ndarray) -> np.ndarray:
    """Per image: whether the saturation factor was below 1. The 0 channels of a pure colour then rise above
    black's value (clamp(beta)); with a factor above 1 the saturation is capped at 1 and they cannot."""
    achromatic = (base == base[:1]).all(axis=0)
    black = images[:, 0, (base[0] == 0) & achromatic].mean(axis=1)
    zeros = (base == 0) & ~achromatic[None]
    return images[:, zeros].mean(axis=1) > black + 0.5


@pytest.mark.usefixtures("in_working_dir")
@pytest.mark.parametrize("case", _params(PROPERTY_CASES))
def test_random_transform_properties(case: Case) -> None:
    """Random intensity / colour: the same shapes and value range as CNTK's control, determinism for a seed, new draws
    per sweep, the transform's structure in cntkio's output and CNTK's control alike, the spread of the draws and a
    mean over many sweeps close to the untransformed image."""
    assert IMAGE_EXPECTED_DIFFERENT[case["name"]].check == "properties" and not cntk_randomizes(case)
    features = case["streams"][0]
    shape = (features["channels"], features["height"], features["width"])
    output = run_reader_case(case)
    assert run_reader_case(case) == output, "the same seed gives the same images"
    other_seed = run_reader_case(case, variables=[features_override(case, "seed", 1)])
    assert other_seed != output, "another seed gives other images"
    plain = [features_override(case, key, 0) for key in RANDOM_KEYS]  # the untransformed image
    (base,) = _images(run_reader_case(case, variables=plain), shape)[:1]
    ours, cntk = _images(output, shape), _images(control_text(case), shape)
    assert ours.shape == cntk.shape == (case["params"]["num_epochs"], *shape)
    assert not np.array_equal(ours[0], ours[1]), "each epoch (a new sweep of the one image) draws anew"
    assert not np.array_equal(ours[0], base)
    for images in (ours, cntk):
        assert images.min() >= 0 and images.max() <= 255
    plan = config_plan(case)
    try:
        many = _many_sweeps(plan, features["name"], SWEEPS)
    finally:
        plan.close()
    assert many.shape == (SWEEPS, *shape) and many.min() >= 0 and many.max() <= 255
    mean = many.mean(axis=0)
    if "intensityFile" in features:
        _check_intensity(ours, base, 1e-3)  # written with 6 significant digits, as CNTK's
        _check_intensity(cntk, base, 1e-3)
        shifts = _check_intensity(many, base, 1e-4)
        cv2 = pytest.importorskip("cv2")
        storage = cv2.FileStorage(_root_relative(features["intensityFile"]), cv2.FILE_STORAGE_READ)
        eigval, eigvec = storage.getNode("EigVal").mat().reshape(3), storage.getNode("EigVec").mat()
        storage.release()
        # shift = EigVec (alpha * EigVal), alpha ~ N(0, stddev), RGB rows against BGR channels
        expected_std = float(features["intensityStdDev"]) * np.linalg.norm(eigvec * eigval, axis=1)[::-1]
        np.testing.assert_allclose(shifts.std(axis=0), expected_std, rtol=0.2)
        assert np.all(np.abs(shifts.mean(axis=0)) < 5 * expected_std / np.sqrt(SWEEPS))
        assert np.corrcoef(shifts.T).min() > 0.9, "one dominant eigenvector moves all channels together"
        assert np.all(np.abs(_check_intensity(cntk, base, 1e-3)) < 5 * expected_std)
        np.testing.assert_allclose(mean, base, atol=0.02, rtol=0)
    else:
        radii = tuple(float(features.get(f"{kind}Radius", 0)) for kind in ("brightness", "contrast", "saturation"))
        _check_colour(ours, base, radii, 1e-3)  # type: ignore[arg-type]
        _check_colour(cntk, base, radii, 1e-3)  # type: ignore[arg-type]
        alpha, beta = _check_colour(many, base, radii, 1e-3)  # type: ignore[arg-type]
        brightness, contrast, _ = radii
        assert alpha.min() < 1 - 0.8 * contrast and alpha.max() > 1 + 0.8 * contrast, "alpha ~ 1 + U(-c, c)"
        assert beta.max() > 0.8 * brightness, "beta ~ U(-b, b) * mean(image)"
        assert 0.35 < _saturation_lowered(many, base).mean() < 0.65, "saturation factor ~ 1 + U(-s, s)"
        grey = (base == 128).all(axis=0)
        np.testing.assert_allclose(mean[:, grey], 128, atol=4)  # never clamped: E[128 alpha + beta] = 128
        np.testing.assert_allclose(mean, base, atol=40)  # clamping at 0/255 and saturation pull the rest inwards


# --- exceptions -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ExpectedError:
    """What cntkio raises where CNTK raised: the type, the file the message names, the 1-based line and the key
    (None: not a data-file position), and what else the message names (CNTK's message or log names it too)."""

    error: type[Exception]
    file: str
    line: int | None
    key: Any
    fragments: tuple[str, ...]


# CNTK counts map lines from 0 ("line 2" is the 3rd line); a 2-column map's key is the 0-based line index.
EXPECTED_ERRORS: dict[str, ExpectedError] = {
    "ImageReaderBadMap": ExpectedError(FormatError, "ImageReaderBadMap_map.txt", 3, 2, ("column",)),
    "ImageReaderBadLabel": ExpectedError(FormatError, "ImageReaderBadLabel_map.txt", 2, 1, ("'blah'",)),
    "ImageReaderLabelOutOfRange": ExpectedError(
        FormatError, "ImageReaderLabelOutOfRange_map.txt", 4, 3, ("10", "'images/red.jpg'", "4")
    ),
    "ImageReaderMissingImage": ExpectedError(
        FormatError, "ImageReaderMissingImage_map.txt", 1, 0, ("'imageDoesNotExists/black.jpg'",)
    ),
    "ImageReaderZipMissingFile": ExpectedError(
        FormatError, "ImageReaderZipMissing_map.txt", 4, 3, ("missing.jpg", "images/simple.zip")
    ),
    "ImageReaderInvalidEmptyTransforms": ExpectedError(
        FormatError, "ImageReaderVaryingShape_map.txt", 2, 1, ("shape",)
    ),
    "ImageReaderMissingScaleTransforms": ExpectedError(
        FormatError, "ImageReaderVaryingShape_map.txt", 2, 1, ("shape",)
    ),
    "ImageAndImageTwoStreamsSameName": ExpectedError(
        ConfigError, "ImageReaderSimple_map.txt", None, None, ("same name 'feature'",)
    ),
    "ImageReaderNoMatchingIds": ExpectedError(
        ConfigError,
        "Base64WithStringIds_map.txt",
        None,
        None,
        ("Could not reconcile data between different deserializers. Keys of logical sequences do not match",),
    ),
}


@pytest.mark.usefixtures("in_working_dir")
@pytest.mark.parametrize("case", _params(EXCEPTION_CASES))
def test_expected_exception(case: Case) -> None:
    """Where CNTK's test expects an exception (making or reading), cntkio raises one naming the file, line and key."""
    expected = EXPECTED_ERRORS[case["name"]]
    with pytest.raises(expected.error) as raised:
        run_reader_case(case)
    error, message = raised.value, str(raised.value)
    assert expected.file in message and all(fragment in message for fragment in expected.fragments)
    if expected.line is not None:
        assert isinstance(error, FormatError)
        assert Path(error.file).name == expected.file
        assert (error.line, error.sequence_key) == (expected.line, expected.key)
        assert f"{expected.file}:{expected.line}:" in message and f"sequence {expected.key}" in message


# --- Base64WithWriteIds ----------------------------------------------------------------------------------------------


@pytest.mark.usefixtures("in_working_dir")
@pytest.mark.parametrize("case", _params(WRITE_IDS_CASES))
def test_base64_write_ids(case: Case) -> None:
    """Custom harness: an epoch of 8 samples (2 sweeps of 4 images) in minibatches of 2, the key of every sequence
    of the features stream; each variant's keys form the expected multiset (randomize=false in Composite_Test)."""
    params = case["params"]
    assert len(case["variants"]) == 4
    for variant in case["variants"]:
        plan = config_plan({**case, **variant})
        keys: list[str] = []
        try:
            assert not plan.options["randomize"]
            with MinibatchSource(plan.deserializers, **{**plan.options, "max_samples": params["epoch_size"]}) as source:
                while minibatch := source.next_minibatch(params["mb_size"]):
                    assert minibatch["features"].num_samples <= params["mb_size"]
                    keys += [str(key) for _, key in minibatch.sequence_keys]
        finally:
            plan.close()
        assert sorted(keys) == sorted(variant["expected_keys_multiset"]), variant["additional_config_parameters"]
