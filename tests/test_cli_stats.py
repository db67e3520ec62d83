"""``cntkio stats``: the numbers of a generated file (text, JSON, HTML), the PNG's size, and what is computed from
counts and samples (bounded memory) agrees with computing it from every value."""

from __future__ import annotations

import base64
import html
import json
import re
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cntkio import CTFDeserializer, StreamDef, write_cbf
from cntkio._src.cli.distributions import IntegerCounts, ValueSample
from cntkio._src.cli.inspect_ctf import length_summary
from cntkio._src.cli.main import main

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """30 sequences of 1..5 lines: dense x (dim 3, integer values, some zero) on every line, sparse y (dim 12) on
    the first line of each, with 1..3 entries of value 0.5."""
    rng = np.random.default_rng(11)
    lines, lengths, x_values, y_nnz, y_indices = [], [], [], [], []
    for seq in range(30):
        length = int(rng.integers(1, 6))
        lengths.append(length)
        for step in range(length):
            x = rng.integers(0, 4, size=3)
            x_values.append(x)
            line = f"{seq} |x {' '.join(map(str, x))}"
            if step == 0:
                indices = np.sort(rng.choice(12, size=int(rng.integers(1, 4)), replace=False))
                y_nnz.append(len(indices))
                y_indices.extend(indices.tolist())
                line += " |y " + " ".join(f"{i}:0.5" for i in indices)
            lines.append(line)
    path = tmp_path_factory.mktemp("stats") / "data.ctf"
    path.write_text("\n".join(lines) + "\n")
    x = np.array(x_values, dtype=np.float64)
    return path, {
        "lengths": np.array(lengths),
        "x": x,
        "y_nnz": np.array(y_nnz),
        "y_indices": np.array(y_indices),
        "y_dim": max(y_indices) + 1,
    }


def run(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    status = main(["stats", *map(str, args)])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def expected_numbers(data: dict[str, Any]) -> dict[str, Any]:
    x, lengths = data["x"], data["lengths"]
    return {
        "sequence_lengths": length_summary(lengths),
        "x_values": {"min": x.min(), "mean": x.mean(), "max": x.max(), "zero_fraction": np.mean(x == 0)},
        "x_nnz": length_summary(np.count_nonzero(x, axis=1)),
        "y_nnz": length_summary(data["y_nnz"]),
        "y_used": len(set(data["y_indices"].tolist())),
        "y_index_counts": np.bincount(data["y_indices"], minlength=data["y_dim"]),
    }


def test_json_numbers_are_those_of_the_values(
    generated: tuple[Path, dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    path, data = generated
    status, out, err = run(capsys, path, "--json")
    assert (status, err) == (0, "")
    found = json.loads(out)
    want = expected_numbers(data)
    assert found["sequences"] == 30 and found["sequence_lengths"] == want["sequence_lengths"]
    x, y = found["streams"]
    assert x["samples_per_sequence"] == want["sequence_lengths"] and x["samples"] == int(data["lengths"].sum())
    values = x["values"]
    for name, value in want["x_values"].items():
        assert values[name] == pytest.approx(value)
    assert values["sampled"] is None and sum(b["count"] for b in values["histogram"]) == data["x"].size
    assert x["nonzeros_per_sample"] == want["x_nnz"]
    assert y["nonzeros_per_sample"] == want["y_nnz"] and y["samples_per_sequence"]["max"] == 1
    assert y["values"]["min"] == y["values"]["max"] == 0.5 and y["values"]["zero_fraction"] == 0
    indices = y["indices"]
    assert indices["used"] == want["y_used"] and indices["of"] == data["y_dim"]
    counts = want["y_index_counts"]
    assert indices["top"][0] == [int(np.argmax(counts)), int(counts.max())]
    assert sum(b["count"] for b in indices["histogram"]) == len(data["y_indices"])


def test_text_prints_the_numbers(generated: tuple[Path, dict[str, Any]], capsys: pytest.CaptureFixture[str]) -> None:
    path, data = generated
    status, out, _ = run(capsys, path)
    want = expected_numbers(data)
    lengths = want["sequence_lengths"]
    assert status == 0
    assert "30 sequences in 1 chunk" in out
    assert f"lengths    min {lengths['min']}, mean {lengths['mean']:.4g}, median {lengths['median']:.4g}" in out
    x = want["x_values"]
    assert f"{data['x'].size} values: min 0, mean {x['mean']:.4g}, max 3; {100 * x['zero_fraction']:.3g}% zero" in out
    assert f"{want['y_used']} of >= {data['y_dim']} used; most used {int(np.argmax(want['y_index_counts']))} (" in out
    for entry in want["x_nnz"]["histogram"]:  # one bar per count of non-zeros (0..3)
        assert re.search(rf"^ +{entry['low']}  #* ?{entry['count']}$", out, re.MULTILINE)


def test_png_is_a_png_of_the_figure_size(
    generated: tuple[Path, dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("matplotlib")
    from cntkio._src.cli.plot import figure_pixels

    target = tmp_path / "stats.png"
    status, out, err = run(capsys, generated[0], "--plot", target)
    assert (status, err) == (0, "") and str(target) in out
    assert png_size(target.read_bytes()) == figure_pixels(2) == (1600, 900)


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == PNG_SIGNATURE and data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_html_embeds_the_figure_and_the_numbers(
    generated: tuple[Path, dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("matplotlib")
    path, data = generated
    target = tmp_path / "stats.html"
    assert run(capsys, path, "--plot", target)[0] == 0
    page = target.read_text()
    embedded = re.search(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert embedded is not None and png_size(base64.b64decode(embedded.group(1))) == (1600, 900)
    assert "<script" not in page and "http" not in page  # self-contained
    lengths = expected_numbers(data)["sequence_lengths"]
    row = "".join(f"<td>{lengths[n]:.4g}</td>" for n in ("min", "mean", "median", "max"))
    assert row in page
    for entry in lengths["histogram"]:
        low, high = entry["low"], entry["high"]
        assert f"<tr><td>{low if low == high else f'{low}..{high}'}</td><td>{entry['count']}</td></tr>" in page
    _, text, _ = run(capsys, path)  # every summary line of the text is on the page
    for line in text.splitlines():
        summary = re.match(r"^  (samples per sequence|values|non-zeros per sample|indices) +(.*)$", line)
        if summary:
            assert f"<p>{html.escape(summary.group(2))}</p>" in page


def test_a_missing_matplotlib_is_explained(
    generated: tuple[Path, dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setattr("cntkio._src.cli.plot.find_spec", lambda name: None)
    status, _, err = run(capsys, generated[0], "--plot", tmp_path / "out.png")
    assert status == 2 and "pip install 'cntkio[plot]'" in err
    assert not (tmp_path / "out.png").exists()


def test_plot_needs_a_png_or_html_name(
    generated: tuple[Path, dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    status, _, err = run(capsys, generated[0], "--plot", "out.svg")
    assert status == 2 and ".png or .html" in err


def test_a_cbf_file_gives_the_same_numbers(
    generated: tuple[Path, dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, data = generated
    reader = CTFDeserializer(str(path), {"x": StreamDef(shape=3), "y": StreamDef(shape=data["y_dim"], is_sparse=True)})
    cbf = tmp_path / "data.cbf"
    write_cbf(reader, cbf)
    ctf_numbers = json.loads(run(capsys, path, "--json")[1])
    cbf_numbers = json.loads(run(capsys, cbf, "--json")[1])
    assert cbf_numbers["format"] == "CBF"
    assert [s["dim_lower_bound"] for s in ctf_numbers["streams"]] == [False, True]  # inferred from the CTF file
    assert [s["dim_lower_bound"] for s in cbf_numbers["streams"]] == [False, False]  # the CBF file's own
    for numbers in (ctf_numbers, cbf_numbers):
        for s in numbers["streams"]:
            s.pop("dim_lower_bound")
            s.get("indices", {}).pop("of_lower_bound", None)
    assert cbf_numbers["streams"] == ctf_numbers["streams"]
    assert cbf_numbers["sequence_lengths"] == ctf_numbers["sequence_lengths"]


@pytest.mark.parametrize("seed", range(5))
def test_integer_counts_summarise_as_length_summary(seed: int) -> None:
    rng = np.random.default_rng(seed)
    values = rng.integers(int(rng.integers(0, 50)), 400, size=int(rng.integers(1, 3000)))
    counts = IntegerCounts()
    for part in np.array_split(values, 7):
        counts.add(part)
    for bins in (1, 7, 10, 1000):
        assert counts.summary(bins) == length_summary(values, bins)


def test_value_sample_is_exact_then_uniform() -> None:
    small = ValueSample(size=100)
    small.add(np.arange(60))
    small.add(np.arange(60, 100))
    assert small.exact and sorted(small.values()) == list(range(100))
    sample = ValueSample(size=2000, seed=1)
    for part in np.array_split(np.arange(100_000, dtype=np.float64), 37):
        sample.add(part)
    kept = sample.values()
    assert not sample.exact and len(kept) == 2000 and len(np.unique(kept)) == 2000
    counts, _ = np.histogram(kept, bins=10, range=(0, 100_000))
    assert counts.min() > 150  # about 200 per tenth of the range
    again = ValueSample(size=2000, seed=1)
    for part in np.array_split(np.arange(100_000, dtype=np.float64), 37):
        again.add(part)
    np.testing.assert_array_equal(np.sort(again.values()), np.sort(kept))  # seeded: the same every run
