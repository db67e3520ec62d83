"""The command line guides instead of misleading (issue 24, section 2): a typo does not hide the real errors, inferred
sparse dimensions are lower bounds everywhere, configs take --var in every command, broken image maps are known as
image maps with every error listed, progress bars move, and ``stats --plot`` draws what carries information."""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cntkio._src.cli.main import main

ATIS = Path("/work/shared/datasets/atis/atis.train.ctf")
needs_atis = pytest.mark.skipif(not ATIS.exists(), reason="ATIS dataset not present")


def cli(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# ------------------------------------------------------------------------------------------- 1. a typo
TYPO_LINE = 1002  # '|S2' written '|S9' on this line
CORRUPTED = {  # line -> (what is replaced, by what, the error's column and reason)
    2001: (":1", ":1x", 14, "malformed number: unexpected 'x'"),
    5001: ("|S0 ", "|S0 abc:", 9, "expected a non-negative integer sparse index, found 'a'"),
    20001: (":1", ":", 14, "malformed number: unexpected ' '"),
    40001: (":1", ":1.2.3", 17, "malformed number: unexpected '.'"),
}


@pytest.fixture(scope="module")
def atis_with_a_typo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ATIS with one '|S2' mistyped '|S9' and four real corruptions."""
    lines = ATIS.read_text().split("\n")
    assert "|S2" in lines[TYPO_LINE - 1]
    lines[TYPO_LINE - 1] = lines[TYPO_LINE - 1].replace("|S2", "|S9")
    for line, (old, new, _, _) in CORRUPTED.items():
        lines[line - 1] = lines[line - 1].replace(old, new, 1)
    path = tmp_path_factory.mktemp("typo") / "atis.ctf"
    path.write_text("\n".join(lines))
    return path


def _real_errors(errors: list[dict]) -> list[tuple[int, int, str]]:
    return [(e["line"], e["column"], e["reason"]) for e in errors if e["stream"] != "S9"]


WANTED = [(line, column, reason) for line, (_, _, column, reason) in CORRUPTED.items()]


@needs_atis
def test_a_typo_does_not_hide_the_real_errors(atis_with_a_typo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "validate", atis_with_a_typo, "--json", "--no-progress")
    report = json.loads(out)
    assert code == 1 and report["files"][0]["sequences"] == 4978  # no sequence dropped for a missing 'S9'
    assert _real_errors(report["errors"]) == WANTED
    (typo,) = [e for e in report["errors"] if e["stream"] == "S9"]
    assert (typo["line"], typo["column"]) == (TYPO_LINE, 26)
    assert typo["reason"].startswith("likely a typo of 'S2': an input seen in only 1 sample")
    code, text, _ = cli(capsys, "validate", atis_with_a_typo, "--no-progress")
    assert "INVALID, 5 errors" in text and "missing from the sequence" not in text
    assert f"{atis_with_a_typo}:{TYPO_LINE}:26\n" in text
    code, every, _ = cli(capsys, "validate", atis_with_a_typo, "--all-errors", "--no-progress")
    for line, column, reason in WANTED:
        assert f"{atis_with_a_typo}:{line}:{column}: {reason}" in every
    code, inspected, _ = cli(capsys, "inspect", atis_with_a_typo, "--json", "--no-progress")
    inspected_report = json.loads(inspected)
    assert [s["name"] for s in inspected_report["streams"]] == ["S0", "S1", "S2"]
    assert inspected_report["unknown_inputs"] == [
        {"input": "S9", "samples": 1, "lines": [TYPO_LINE], "likely_typo": True, "similar": "S2"}
    ]


@needs_atis
def test_an_unknown_input_under_explicit_streams_is_reported(
    atis_with_a_typo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    streams = ["--stream", "S0:943:sparse", "--stream", "S2:129:sparse"]  # S1 left out on purpose, S9 a typo
    code, out, _ = cli(capsys, "validate", atis_with_a_typo, *streams, "--json", "--no-progress")
    report = json.loads(out)
    assert code == 1 and _real_errors(report["errors"]) == WANTED
    (typo,) = [e for e in report["errors"] if e["stream"] == "S9"]
    assert typo["line"] == TYPO_LINE and "not among the streams given by --stream" in typo["reason"]
    (warning,) = report["files"][0]["warnings"]
    assert warning == "input 'S1' is not among the streams given by --stream: its 4,978 samples are skipped " \
        "(first at line 1)"  # fmt: skip
    code, text, _ = cli(capsys, "validate", atis_with_a_typo, *streams, "--no-progress")
    assert f"  warning: {warning}\n" in text


@needs_atis
def test_a_configs_reader_reports_its_unknown_inputs(
    atis_with_a_typo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "atis.cntk"
    config.write_text(
        'reader = [ readerType = "CNTKTextFormatReader" ; file = "$DataDir$/atis.ctf"\n'
        '  input = [ query = [ alias = "S0" ; dim = 943 ; format = "sparse" ]\n'
        '            labels = [ alias = "S2" ; dim = 129 ; format = "sparse" ] ] ]\n'
    )
    code, out, _ = cli(capsys, "validate", config, "--var", f"DataDir={atis_with_a_typo.parent}", "--json")
    report = json.loads(out)
    assert code == 1 and _real_errors(report["errors"]) == WANTED
    (typo,) = [e for e in report["errors"] if e["stream"] == "S9"]
    assert typo["line"] == TYPO_LINE and "not among the streams given by reader section 'reader'" in typo["reason"]
    assert report["files"][0]["warnings"] == [
        "input 'S1' is not among the streams given by reader section 'reader': its 4,978 samples are skipped "
        "(first at line 1)"
    ]


def test_errors_of_sequences_dropped_for_a_missing_input_are_listed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = [f"{i} |a {i} |b {i % 3}:1" if i % 2 else f"{i} |a {i}" for i in range(40)]  # 'b' only in odd ones
    lines[10] = "10 |a 1x"  # in a sequence dropped for the missing 'b'
    lines[11] = "11 |a 2y |b 1:1"
    path = tmp_path / "data.ctf"
    path.write_text("\n".join(lines) + "\n")
    for extra in ([], ["--all-errors"]):
        _, out, _ = cli(capsys, "validate", path, "--json", "--no-progress", *extra)
        report = json.loads(out)
        parse_errors = [(e["line"], e["reason"]) for e in report["errors"] if e["stream"] == "a"]
        assert parse_errors == [(11, "malformed number: unexpected 'x'"), (12, "malformed number: unexpected 'y'")]
        assert sum(e["reason"] == "input is missing from the sequence" for e in report["errors"]) == 20
        assert "if it is optional, pass --optional-inputs" in report["files"][0]["warnings"][0]
    _, out, _ = cli(capsys, "validate", path, "--no-progress")
    assert re.search(r"20 x input is missing from the sequence \(input 'b'\)", out)
    assert f"{path}:11:" in out and f"{path}:12:" in out


# ------------------------------------------------------------------------------------------- 2. lower bounds
ATIS_TEST = ATIS.with_name("atis.test.ctf")  # its largest indices: 940, 24, 128 (the real dimensions: 943, 26, 129)


@needs_atis
def test_stats_and_explain_say_an_inferred_sparse_dimension_is_a_lower_bound(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, text, _ = cli(capsys, "stats", ATIS_TEST, "--no-progress")
    assert code == 0 and "stream S0  sparse, dim >= 941 (inferred: largest index + 1): 10,984 samples" in text
    assert re.search(r"indices +449 of >= 941 used", text) and "dim 941" not in text
    found = json.loads(cli(capsys, "stats", ATIS_TEST, "--json", "--no-progress")[1])
    assert [(s["dim"], s["dim_lower_bound"]) for s in found["streams"]] == [(941, True), (25, True), (129, True)]
    code, plan, _ = cli(capsys, "explain", ATIS_TEST, "--no-progress")
    assert code == 0 and "S0 (sparse >= 941), S1 (sparse >= 25), S2 (sparse >= 129)" in plan
    plan_json = json.loads(cli(capsys, "explain", ATIS_TEST, "--json", "--no-progress")[1])
    assert [s["dim_lower_bound"] for s in plan_json["source"]["streams"]] == [True, True, True]


def test_stats_of_a_cbf_file_gives_its_dimensions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "data.ctf"
    source.write_text("0 |x 1 2 |y 3:1\n1 |x 3 4 |y 0:1\n")
    cbf = tmp_path / "data.cbf"
    assert cli(capsys, "convert", source, cbf, "--stream", "x:2:dense", "--stream", "y:10:sparse")[0] == 0
    found = json.loads(cli(capsys, "stats", cbf, "--json", "--no-progress")[1])
    assert [(s["dim"], s["dim_lower_bound"]) for s in found["streams"]] == [(2, False), (10, False)]


@needs_atis
def test_convert_refuses_to_write_an_inferred_sparse_dimension(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from cntkio import CBFDeserializer

    target = tmp_path / "atis.cbf"
    code, _, err = cli(capsys, "convert", ATIS_TEST, target, "--no-progress")
    assert code == 2 and not target.exists()
    assert "lower bounds (the largest index seen + 1: S0 >= 941, S1 >= 25, S2 >= 129)" in err
    assert "--stream S0:941:sparse --stream S1:25:sparse --stream S2:129:sparse" in err and "--infer-dims" in err
    given = ["--stream", "S0:943:sparse", "--stream", "S1:26:sparse", "--stream", "S2:129:sparse"]
    assert cli(capsys, "convert", ATIS_TEST, target, *given, "--no-progress")[0] == 0
    reader = CBFDeserializer(target)
    assert [i.shape for i in reader.stream_infos()] == [(943,), (26,), (129,)]
    reader.close()
    code, out, _ = cli(capsys, "convert", ATIS_TEST, tmp_path / "inferred.cbf", "--infer-dims", "--no-progress")
    assert code == 0 and "S0 (941 sparse, inferred: a lower bound)" in out
    assert cli(capsys, "convert", ATIS_TEST, target, "--infer-dims", *given)[0] == 2  # one or the other
    help_text = cli_help(capsys, "convert")
    assert "--infer-dims" in help_text and "lower bound" in help_text


def cli_help(capsys: pytest.CaptureFixture[str], command: str) -> str:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    return " ".join(capsys.readouterr().out.split())


def test_convert_refuses_a_file_with_a_likely_typo(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "data.ctf"
    lines = [f"{i} |x {i} {i}" for i in range(300)]
    lines[123] = "123 |xx 1 2"
    source.write_text("\n".join(lines) + "\n")
    code, _, err = cli(capsys, "convert", source, tmp_path / "data.cbf", "--no-progress")
    assert code == 1 and f"{source}:124:5: likely a typo of 'x': input 'xx'" in err
    assert not (tmp_path / "data.cbf").exists()


# ------------------------------------------------------------------------------------------- 3. --var, SGD
CONFIG = """
DataDir = ../Data
Train = [
    reader = [
        readerType = "CNTKTextFormatReader"
        file = "$DataDir$/data.ctf"
        input = [ x = [ dim = 2 ; format = "dense" ] ]
    ]
    SGD = [ minibatchSize = 7 ; maxEpochs = 2 ]
]
"""


@pytest.fixture()
def config_elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A config whose DataDir (../Data) is right only from another directory than the one we run in."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "data.ctf").write_text("".join(f"{i} |x {i} {i + 1}\n" for i in range(20)))
    config = tmp_path / "configs" / "train.cntk"
    config.parent.mkdir()
    config.write_text(CONFIG)
    monkeypatch.chdir(tmp_path)  # ../Data is not there from here
    return config, data


@pytest.mark.parametrize("command", ["validate", "inspect"])
def test_inspect_and_validate_take_var(
    config_elsewhere: tuple[Path, Path], command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    config, data = config_elsewhere
    code, _, err = cli(capsys, command, config, "--no-progress")
    assert code == 2 and "Data/data.ctf" in err  # the config as written: its data is not found from here
    code, out, err = cli(capsys, command, config, "--var", f"DataDir={data}", "--no-progress")
    assert (code, err) == (0, "") and "OK: no errors" in out and "20" in out
    with pytest.raises(SystemExit):  # not NAME=VALUE: a usage error
        main([command, str(config), "--var", "DataDir"])
    code, _, err = cli(capsys, command, data / "data.ctf", "--var", "DataDir=x", "--no-progress")
    assert code == 2 and "--var is for BrainScript configs" in err


def test_explain_plans_with_the_configs_minibatch_size(
    config_elsewhere: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    config, data = config_elsewhere
    common = [config, "--section", "Train.reader", "--var", f"DataDir={data}", "--json", "--no-progress"]
    code, out, err = cli(capsys, "explain", *common)
    assert (code, err) == (0, "") and json.loads(out)["partitioning"]["minibatch_size"] == 7  # the SGD section's
    code, out, _ = cli(capsys, "explain", *common, "--minibatch-size", "5")
    assert json.loads(out)["partitioning"]["minibatch_size"] == 5  # unless told otherwise
    code, out, _ = cli(capsys, "explain", data / "data.ctf", "--json", "--no-progress")
    assert json.loads(out)["partitioning"]["minibatch_size"] == 256  # a data file: the default


# ------------------------------------------------------------------------------------------- 4. broken image maps
@pytest.fixture()
def broken_map(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """20 lines naming 6 images, 5 of them malformed in different ways."""
    monkeypatch.chdir(tmp_path)  # images are named relative to the working directory
    for i in range(6):
        (tmp_path / f"im{i}.png").write_bytes(b"not decoded here")
    lines = [f"im{i % 6}.png\t{i % 3}" for i in range(20)]
    lines[3] = "im3.png 1"  # spaces, not a tab
    lines[7] = "im1.png\tcat"  # not a class id
    lines[11] = "im5.png\t"  # empty label
    lines[15] = "im0.png\t2\textra"  # an extra column
    lines[18] = "\t1"  # empty path
    path = tmp_path / "map.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


BROKEN_MAP_ERRORS = [
    (4, 10, "expected 2 tab-separated columns (path, label) as on the first line, found 1"),
    (8, 9, "label 'cat' is not an unsigned decimal integer"),
    (12, 9, "empty label"),
    (16, 11, "expected 2 tab-separated columns (path, label) as on the first line, found 3"),
    (19, 1, "empty image path"),
]


@pytest.mark.parametrize("command", ["validate", "inspect"])
def test_a_broken_image_map_is_an_image_map_with_every_error_listed(
    broken_map: Path, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = cli(capsys, command, broken_map, "--json", "--no-progress")
    assert (code, err) == (1, "")  # invalid data, not "not a CNTK data file"
    report = json.loads(out)
    found = report["errors"]
    assert [(e["line"], e["column"], e["reason"]) for e in found] == BROKEN_MAP_ERRORS
    assert [e["sequence"] for e in found] == [3, 7, 11, 15, 18]  # a 2-column map's key: the line index
    if command == "inspect":
        assert report["format"] == "image-map" and "16 of the first 20 lines" in report["detected"]
        assert (report["valid_lines"], report["invalid_lines"]) == (15, 5)


def test_a_map_with_spaces_for_tabs_is_an_image_map(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "map.txt"
    path.write_text("".join(f"images/{i}.jpg {i % 2}\n" for i in range(5)))
    code, out, _ = cli(capsys, "validate", path, "--json", "--no-progress")
    report = json.loads(out)
    assert code == 1 and report["files"][0]["format"] == "image-map"
    assert [e["line"] for e in report["errors"]] == [1, 2, 3, 4, 5]
    assert report["errors"][0]["reason"] == (
        "expected 2 tab-separated columns (path, label) or 3 (key, path, label), found 1"
    )


SINGLE_ERRORS = [
    "k1\tim.png\t1\nk2\tim.png\n",  # a 3-column map, then 2 columns
    "k1\tim.png\t1\n\tim.png\t2\n",  # empty key
    "im.png\t1\nim.png\t99999999999999999999999\n",  # a class id past 2^64
    "im.png\t1\n@/x.png\t1\n",  # empty zip archive
    "im.png\t1\na.zip@/\t1\n",  # empty zip item
    "\ufeffim.png\tx\n",  # after a byte order mark
    "im.png\t1\r\n\u00e9\u00e9.png\t+ 2 \r\n",  # CRLF, characters of two bytes, a label with spaces
    "im.png\t1\n\u00e9.png\t1\t\t\n",  # four columns
    "k\tim.png\t1\nno tabs at all\n",  # one column in a 3-column map: no key
    "\n \t\nim.png\t\n",  # blank lines first
    "im.png\t1\nim.png\t1\tx\n",  # fine, then 3 columns
]


@pytest.mark.parametrize("text", SINGLE_ERRORS)
def test_every_map_error_starts_with_the_scanners(tmp_path: Path, text: str) -> None:
    from cntkio._src.common.errors import FormatError
    from cntkio._src.formats.image_map import parse_image_map
    from cntkio._src.formats.image_map_check import map_errors

    path = tmp_path / "map.txt"
    path.write_bytes(text.encode())
    with pytest.raises(FormatError) as raised:
        parse_image_map(path, label_dim=2**63 - 1)
    first = map_errors(path, label_dim=2**63 - 1)[0][0]
    native = raised.value
    assert (first.reason, first.line, first.column, first.offset) == (
        native.reason, native.line, native.column, native.offset
    )  # fmt: skip
    assert first.sequence_key == native.sequence_key


FIELDS = st.sampled_from(["im.png", "a.zip@/x.jpg", "@/x", "a.zip@/", "k", "", " ", "1", "+3", " 2 ", "cat",
                          "18446744073709551616", "7\r", "\u00e9", "\u00e9.png", "x\ty"])  # fmt: skip


@st.composite
def map_text(draw: st.DrawFn) -> bytes:
    lines = []
    for _ in range(draw(st.integers(1, 8))):
        fields = draw(st.lists(FIELDS, min_size=1, max_size=4))
        lines.append("\t".join(fields) + draw(st.sampled_from(["", "\r"])))
    text = "\n".join(lines) + draw(st.sampled_from(["", "\n"]))
    return (draw(st.sampled_from(["", "\ufeff"])) + text).encode()


@settings(max_examples=150, deadline=None)
@given(map_text(), st.sampled_from([None, 2, 2**63 - 1]))
def test_every_map_error_is_what_the_scanner_finds_line_after_line(data: bytes, label_dim: int | None) -> None:
    """The list is what the native scanner reports, each error's line blanked (kept in offsets and line numbers)
    before the file is scanned again."""
    from cntkio._src.common.errors import FormatError
    from cntkio._src.formats.image_map import parse_image_map
    from cntkio._src.formats.image_map_check import map_errors

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "map.txt"
        expected = []
        scanned = bytearray(data)
        while True:
            path.write_bytes(bytes(scanned))
            try:
                parse_image_map(path, label_dim=label_dim)
                break
            except FormatError as e:
                expected.append((e.reason, e.line, e.column, e.offset, e.sequence_key))
                start = scanned.rfind(b"\n", 0, e.offset) + 1
                end = scanned.find(b"\n", e.offset)
                end = len(scanned) if end < 0 else end
                first = 3 if start == 0 and scanned.startswith(b"\xef\xbb\xbf") else start
                scanned[first:end] = b" " * (end - first)  # blank: skipped, still counted
        path.write_bytes(data)
        errors, _ = map_errors(path, label_dim=label_dim)
    assert [(e.reason, e.line, e.column, e.offset, e.sequence_key) for e in errors] == expected


# ------------------------------------------------------------------------------------------- 5. progress
@pytest.fixture(scope="module")
def six_megabytes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ATIS twice: about 6 MB, one chunk of the reader's default size."""
    path = tmp_path_factory.mktemp("big") / "atis2.ctf"
    text = ATIS.read_bytes()
    path.write_bytes(text + text)
    return path


@needs_atis
def test_inspect_reports_progress_per_chunk_of_the_parse(six_megabytes: Path) -> None:
    from cntkio._src.cli.inspect_ctf import inspect_file

    calls: list[tuple[str, int, int]] = []
    report = inspect_file(str(six_megabytes), progress=lambda *call: calls.append(call))
    size = six_megabytes.stat().st_size
    parsing = [done for phase, done, total in calls if phase == "parsing" and total == size]
    assert parsing[0] == 0 and parsing[-1] == size and parsing == sorted(parsing)
    assert len(parsing) >= 6 and report.summary["chunks"] == len(parsing) - 1  # a step per chunk of about 1 MB
    scanning = [done for phase, done, _ in calls if phase == "scanning"]
    assert len(scanning) >= 3 and scanning[-1] == size


@needs_atis
def test_validate_draws_the_bar_moving(six_megabytes: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("tqdm")
    code, _, err = cli(capsys, "validate", six_megabytes, "--progress")
    shown = set(re.findall(r"parsing: +(\d+)%", err))
    assert code == 0 and len(shown) >= 5  # not 0% then cleared


def test_a_phase_draws_every_step(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("tqdm")
    import io

    from cntkio._src.common.progress import Phases

    err = io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    with Phases(True) as progress:
        progress("parsing", 0, 1000)
        progress("parsing", 400, 1000)  # a large step right after the start is drawn
    assert "400/1.00k" in err.getvalue()
    with Phases(True, units={"reading": "chunk"}) as progress:
        progress("reading", 0, 3)
        progress("reading", 1, 3)
    assert "1/3 [" in err.getvalue() and "chunk/s" in err.getvalue()


# ------------------------------------------------------------------------------------------- 6. stats --plot
@pytest.fixture()
def drawn(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The figures ``stats --plot`` saves."""
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    figures: list[Any] = []
    save = Figure.savefig

    def keep(self: Figure, *args: Any, **kwargs: Any) -> Any:
        figures.append(self)
        return save(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    return figures


def _panels(figure: Any) -> tuple[list[str], str]:
    titles = [axes.get_title() for axes in figure.axes if axes.get_title()]
    texts = "\n".join(text.get_text() for axes in figure.axes for text in axes.texts)
    return titles, texts


@needs_atis
def test_plot_of_one_hot_data_says_in_words_what_a_single_bar_would_show(
    drawn: list[Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "atis.png"
    assert cli(capsys, "stats", ATIS_TEST, "--plot", target, "--no-progress")[0] == 0
    (figure,) = drawn
    titles, texts = _panels(figure)
    assert not any(title.endswith((": values", ": non-zeros per sample")) for title in titles)
    assert "S1: samples per sequence" not in titles  # one sample in every sequence: said, not drawn
    assert "values: every value is 1" in texts and "non-zeros per sample: every sample has 1 non-zero" in texts
    assert "samples per sequence: every sequence has 1 sample" in texts
    assert "S0 (sparse, dim >= 941, one-hot)" in texts
    assert str(ATIS_TEST) in figure.get_suptitle()  # the figure names its file


@needs_atis
def test_index_bars_are_the_most_used_indices(
    drawn: list[Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli(capsys, "stats", ATIS_TEST, "--plot", tmp_path / "atis.png", "--no-progress")[0] == 0
    (figure,) = drawn
    (s2,) = [axes for axes in figure.axes if axes.get_title() == "S2: the 10 most used indices"]
    labels = [label.get_text() for label in s2.get_xticklabels()]
    heights = [patch.get_height() for patch in s2.patches]
    assert labels[:3] == ["128", "78", "48"] and heights[:3] == [7319, 716, 704]
    assert heights == sorted(heights, reverse=True)
    found = json.loads(cli(capsys, "stats", ATIS_TEST, "--json", "--no-progress")[1])
    assert found["streams"][2]["indices"]["most_used"][:3] == [[128, 7319], [78, 716], [48, 704]]
    _, text, _ = cli(capsys, "stats", ATIS_TEST, "--no-progress")
    assert re.search(r"^ +128  #+ 7,319\n +78  #+ 716$", text, re.MULTILINE)  # the text's bars too


def test_a_dense_stream_keeps_its_charts(drawn: list[Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "data.ctf"
    source.write_text("".join(f"{i // 3} |x {i % 5} {i % 7 - 3}\n" for i in range(60)))
    assert cli(capsys, "stats", source, "--plot", tmp_path / "data.png", "--no-progress")[0] == 0
    titles, texts = _panels(drawn[0])
    assert titles[1:] == ["x: values", "x: non-zeros per sample"]  # 3 samples in every sequence: said
    assert "samples per sequence: every sequence has 3 samples" in texts


def test_a_bad_file_an_option_names_is_a_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A state list given with --labels that is a directory: exit status 2 and one line naming it (a traceback
    before)."""
    mlf = tmp_path / "x.mlf"
    mlf.write_text('#!MLF!#\n"a.lab"\n0 100000 s1\n.\n')
    (tmp_path / "labels").mkdir()
    assert main(["inspect", str(mlf), "--labels", str(tmp_path / "labels")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("cntkio inspect: error: ") and "is a directory" in err and "Traceback" not in err


def test_a_label_on_each_sequence_of_a_few_long_sequences_is_a_stream_not_a_typo(tmp_path: Path) -> None:
    """One label sample per sequence beside 120 feature samples, in 6 sequences: fewer than 10 samples and 1 % of
    the features', yet in every sequence — a stream (it was reported as a likely typo: validate exit 1, convert
    refused it, stats dropped it)."""
    from cntkio._src.formats.ctf_infer import infer

    path = tmp_path / "labels.ctf"
    lines = [f"{s} |x {t} {t}" + (f" |y {s}:1" if t == 0 else "") for s in range(6) for t in range(120)]
    path.write_text("\n".join(lines) + "\n")
    inference = infer(path)
    assert inference.sequences == 6 and not inference.rare
    assert [s.alias for s in inference.streams] == ["x", "y"]
    assert main(["validate", str(path)]) == 0
