"""``cntkio explain``: the plan is what a run reads (MinibatchSource partitions, DataLoader workers), printed the same
every time."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cntkio import CTFDeserializer, MinibatchSource, StreamDef, write_cbf
from cntkio._src.cli.explain import explain, source_for_file
from cntkio._src.cli.main import main
from cntkio._src.common.errors import ConfigError

CHUNK_BYTES = 400
MINIBATCH = 16
KEYS = 6


@pytest.fixture(scope="module")
def data_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """60 sequences of 1..6 lines (dense x on each, sparse y on the first): 7 chunks of CHUNK_BYTES or less."""
    rng = np.random.default_rng(3)
    lines = []
    for seq in range(60):
        for step in range(int(rng.integers(1, 7))):
            line = f"{seq} |x {rng.integers(0, 9)} {rng.integers(0, 9)}"
            lines.append(line + (f" |y {rng.integers(0, 20)}:1" if step == 0 else ""))
    path = tmp_path_factory.mktemp("explain") / "data.ctf"
    path.write_text("\n".join(lines) + "\n")
    return path


def make_source(path: Path, window: int, seed: int = 1) -> MinibatchSource:
    return source_for_file(str(path), seed=seed, window=window, chunk_size_in_bytes=CHUNK_BYTES)


def share(plan: dict[str, Any], rank: int, worker: int | None = None, sweep: int = 0) -> dict[str, Any]:
    (found,) = [s for s in plan["shares"] if (s["sweep"], s["rank"], s["worker"]) == (sweep, rank, worker)]
    return found


@pytest.mark.parametrize("window", [0, 4])
def test_each_rank_reads_what_the_plan_says(data_file: Path, window: int) -> None:
    plan = explain(make_source(data_file, window), ranks=2, minibatch_size=MINIBATCH, first_keys=KEYS)
    assert plan["partitioning"]["by"] == ("chunk" if window else "sequence")
    everything = []
    for rank in range(2):
        keys, samples, minibatches = [], 0, 0
        with make_source(data_file, window) as source:
            while mb := source.next_minibatch(MINIBATCH, num_data_partitions=2, partition_index=rank):
                keys += mb.sequence_keys
                samples += int(mb["x"].sequence_lengths.sum())
                minibatches += 1
        planned = share(plan, rank)
        assert [tuple(k) for k in planned["first_keys"]] == keys[:KEYS]
        assert (planned["units"], planned["samples"], planned["minibatches"]) == (len(keys), samples, minibatches)
        everything += keys
    assert sorted(key for _, key in everything) == list(range(60))  # each sequence once, across the ranks
    if window:  # chunk partitioning: the ranks' chunks are disjoint
        assert not set(share(plan, 0)["chunks"]) & set(share(plan, 1)["chunks"])


@pytest.mark.parametrize("window", [0, 4])
def test_each_dataloader_worker_reads_what_the_plan_says(data_file: Path, window: int) -> None:
    torch_data = pytest.importorskip("torch.utils.data")
    from cntkio.torch import MinibatchDataset

    plan = explain(make_source(data_file, window), ranks=2, workers=2, minibatch_size=MINIBATCH, first_keys=KEYS)
    for rank in range(2):
        dataset = MinibatchDataset(
            functools.partial(make_source, data_file, window), MINIBATCH, num_partitions=2, partition_index=rank
        )
        delivered: dict[int, list[Any]] = {0: [], 1: []}
        counts = {0: 0, 1: 0}
        with dataset:
            for batch in torch_data.DataLoader(dataset, batch_size=None, num_workers=2):
                worker = batch.index % 2
                delivered[worker] += batch.keys
                counts[worker] += 1
        for worker in range(2):
            planned = share(plan, rank, worker)
            assert [tuple(k) for k in planned["first_keys"]] == delivered[worker][:KEYS]
            assert (planned["minibatches"], planned["units"]) == (counts[worker], len(delivered[worker]))


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    status = main(["explain", *args])
    captured = capsys.readouterr()
    assert captured.err == ""
    return status, captured.out


def test_two_runs_print_the_same_plan(data_file: Path) -> None:
    def explain_in_a_process(seed: int) -> str:
        args = [str(data_file), "--ranks", "2", "--workers", "2", "--minibatch-size", str(MINIBATCH), "--seed",
                str(seed), "--chunk-size", str(CHUNK_BYTES)]  # fmt: skip
        result = subprocess.run(
            [sys.executable, "-m", "cntkio", "explain", *args], capture_output=True, text=True, check=True
        )
        assert result.stderr == ""
        return result.stdout

    text = explain_in_a_process(7)
    assert explain_in_a_process(7) == text
    assert "7 chunks" in text and "2 ranks by chunk" in text and "same seed gives the same plan" in text
    digest = [line for line in text.splitlines() if "digest" in line]
    assert digest and digest[0] not in explain_in_a_process(8)  # another seed, another plan


def test_frame_mode_plans_frames(data_file: Path) -> None:
    def source() -> MinibatchSource:
        reader = CTFDeserializer(str(data_file), {"x": StreamDef(shape=2)}, chunk_size_in_bytes=CHUNK_BYTES)
        return MinibatchSource(reader, frame_mode=True, max_sweeps=1, randomization_window_in_chunks=2)

    plan = explain(source(), ranks=2, minibatch_size=MINIBATCH, first_keys=KEYS)
    assert plan["source"]["unit"] == "frame"
    with source() as reading:
        keys = reading.next_minibatch(MINIBATCH, num_data_partitions=2, partition_index=1).sequence_keys
    assert [(path, tuple(key)) for path, key in share(plan, 1)["first_keys"]] == keys[:KEYS]


def test_json_plan_accounts_for_every_chunk_and_sequence(data_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out = run_cli(capsys, str(data_file), "--ranks", "3", "--sweeps", "2", "--window", "2", "--json",
                          "--chunk-size", str(CHUNK_BYTES))  # fmt: skip
    plan = json.loads(out)
    assert status == 0
    chunks = plan["chunks"]
    reader = CTFDeserializer(str(data_file), {"x": StreamDef(shape=2)}, chunk_size_in_bytes=CHUNK_BYTES)
    assert chunks["sequences"] == np.diff(reader.sequence_index().chunk_starts).tolist()
    assert sum(chunks["bytes"]) == data_file.stat().st_size
    assert plan["source"]["sweep_samples"] == sum(chunks["samples"]) == int(reader.sequence_lengths().sum())
    for sweep in (0, 1):
        ranks = [share(plan, rank, sweep=sweep) for rank in range(3)]
        assert sum(s["units"] for s in ranks) == 60
        assert sorted(c for s in ranks for c in s["chunks"]) == list(range(7))
        assert sorted(plan["sweeps"][sweep]["chunk_order"]) == list(range(7))
    assert plan["sweeps"][0]["chunk_order"] != plan["sweeps"][1]["chunk_order"]  # each sweep reshuffled


@pytest.mark.parametrize("seed", range(8))
def test_imbalance_is_flagged_when_ranks_differ_by_more_than_a_chunk(data_file: Path, seed: int) -> None:
    plan = explain(make_source(data_file, 3, seed), ranks=3, minibatch_size=MINIBATCH)
    samples = [share(plan, rank)["samples"] for rank in range(3)]
    imbalanced = max(samples) - min(samples) > max(plan["chunks"]["samples"])
    flagged = any(c["level"] == "warning" and "imbalanced" in c["message"] for c in plan["checks"])
    assert flagged == imbalanced


def test_idle_workers_are_flagged(data_file: Path) -> None:
    plan = explain(make_source(data_file, 0), workers=4, minibatch_size=100)
    assert [share(plan, 0, w)["minibatches"] for w in range(4)] == [1, 1, 1, 0]
    assert any("worker 3 of rank 0 gets nothing" in c["message"] for c in plan["checks"])


def test_cbf_chunks_and_samples_come_from_its_header(data_file: Path, tmp_path: Path) -> None:
    reader = CTFDeserializer(str(data_file), {"x": StreamDef(shape=2)})
    cbf = tmp_path / "data.cbf"
    write_cbf(reader, cbf, chunk_size_in_bytes=200)
    plan = explain(source_for_file(str(cbf), window=0))
    chunks = plan["chunks"]
    assert len(chunks["ids"]) > 1 and sum(chunks["sequences"]) == 60
    assert sum(chunks["samples"]) == int(reader.sequence_lengths().sum())
    assert 12 + sum(chunks["bytes"]) < cbf.stat().st_size  # magic and version before, the header after
    assert "stored in the file" in plan["source"]["samples_counted_as"]


CONFIG = """
Train = [
    reader = [
        readerType = "CNTKTextFormatReader"
        file = "$DataDir$/data.ctf"
        chunkSizeInBytes = 400
        input = [ x = [ dim = 2 ; format = "dense" ] ; y = [ dim = 20 ; format = "sparse" ] ]
    ]
]
"""


@pytest.mark.parametrize("seed", [None, 3])
def test_a_config_is_planned_as_its_reader_reads(
    data_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], seed: int | None
) -> None:
    from cntkio.brainscript import load_reader

    config = tmp_path / "train.cntk"
    config.write_text(CONFIG)
    args = [str(config), "--section", "Train.reader", "--var", f"DataDir={data_file.parent}", "--ranks", "2"]
    args += ["--minibatch-size", str(MINIBATCH), "--keys", str(KEYS), "--json"]
    status, out = run_cli(capsys, *args, *(["--seed", str(seed)] if seed is not None else []))
    plan = json.loads(out)
    assert status == 0 and plan["partitioning"]["by"] == "chunk" and len(plan["chunks"]["ids"]) == 7
    assert plan["randomization"]["seed"] == (seed or 0)
    options = {} if seed is None else {"randomization_seed": seed}
    for rank in range(2):
        with load_reader(config, "Train.reader", {"DataDir": str(data_file.parent)}, **options) as source:
            keys = []
            while mb := source.next_minibatch(MINIBATCH, num_data_partitions=2, partition_index=rank):
                keys += mb.sequence_keys
        planned = share(plan, rank)
        assert [tuple(k) for k in planned["first_keys"]] == keys[:KEYS] and planned["units"] == len(keys)


def test_chunk_size_is_the_configs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", str(tmp_path / "train.cntk"), "--chunk-size", "100"]) == 2
    assert "--chunk-size applies to a FILE" in capsys.readouterr().err


def test_truncated_bptt_is_not_planned(data_file: Path) -> None:
    reader = CTFDeserializer(str(data_file), {"x": StreamDef(shape=2)})
    with MinibatchSource(reader, truncation_length=2) as source, pytest.raises(ConfigError, match="BPTT"):
        explain(source)


def test_unreadable_file_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", str(tmp_path / "missing.ctf")]) == 2
    assert "cntkio explain: error: cannot read" in capsys.readouterr().err
