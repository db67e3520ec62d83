#!/usr/bin/env python3
"""PyTorch bars (issue 12): token ids for ATIS against CSR and a hand-written Dataset, and DataLoader workers.

1. ATIS train (``S0`` words 943, ``S1`` intent 26 on a sequence's first line, ``S2`` slot labels 129; one-hot),
   randomized, ``--atis-sweeps`` epochs through ``cntkio.torch.loader`` (minibatches of ``--atis-samples`` samples,
   ~32 sequences), each batch's tensors touched (``sum``):
   - **token ids**: ``layout={"S0": "token_ids", "S1": "per_sequence", "S2": "token_ids"}``;
   - **CSR**: the default layout (sparse CSR tensors);
   - **plain PyTorch**: the common hand-written alternative — the file tokenised once into NumPy arrays (untimed),
     a map-style ``Dataset`` of (words, labels, intent) and ``DataLoader(batch_size=32, shuffle=True)`` with a
     ``pad_sequence`` collate. Bar: token ids >= 1x it (sequences/s, end to end).
2. DataLoader workers: the kit's dense and sparse files (``--mb``), randomized (8 MiB chunks, window 4),
   minibatches of 1024, ``--epochs`` epochs through ``cntkio.torch.loader`` (persistent workers) with ``num_workers``
   0, 1, 2: MB/s and peak RSS of the process tree. Bar: 2 workers >= 0 workers.

Every measurement runs in a fresh subprocess, round-robin over --runs rounds; medians.

  python bench/torch_loader.py [--runs 3] [--atis-sweeps 5] [--mb 200] [--json out.json]
  python bench/torch_loader.py --smoke
"""

from __future__ import annotations

import functools
import gc
import os
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from cntkio import CTFDeserializer, MinibatchSource, StreamDef, StreamDefs
from core import Report, cpu_seconds, stream_defs
from ctf_parse import REPO_ROOT, _table
from harness import Job, Rounds, parser, run_child

ATIS = REPO_ROOT.parent / "shared" / "datasets" / "atis" / "atis.train.ctf"
ATIS_STREAMS = StreamDefs(
    S0=StreamDef(field="S0", shape=943, is_sparse=True),
    S1=StreamDef(field="S1", shape=26, is_sparse=True),
    S2=StreamDef(field="S2", shape=129, is_sparse=True),
)
TOKEN_LAYOUT = {"S0": "token_ids", "S1": "per_sequence", "S2": "token_ids"}


def atis_source(path: str, sweeps: int) -> MinibatchSource:
    return MinibatchSource(CTFDeserializer(path, ATIS_STREAMS), max_sweeps=sweeps, randomization_seed=1)


def kit_source(path: str, kind: str) -> MinibatchSource:
    reader = CTFDeserializer(path, stream_defs(kind), chunk_size_in_bytes=8 << 20)
    return MinibatchSource(reader, max_sweeps=1, randomization_window_in_chunks=4, randomization_seed=1)


def touch(value: Any) -> float:
    import torch

    if isinstance(value, torch.Tensor):
        return float(value.values().sum()) if value.layout == torch.sparse_csr else float(value.sum())
    return float(value.data.sum())  # PackedSequence


def child_atis(spec: dict[str, Any]) -> dict[str, Any]:
    import torch
    from torch.nn.utils.rnn import pad_sequence
    from torch.utils.data import DataLoader, Dataset

    from cntkio.torch import loader

    cpu0, t0 = cpu_seconds(), time.perf_counter()
    sequences = batches = 0
    total = 0.0
    if spec["mode"] == "plain":
        words, labels, intents = tokenised(spec["file"])
        t0, cpu0 = time.perf_counter(), cpu_seconds()  # the tokenising is done once, before training

        class Atis(Dataset):  # type: ignore[type-arg]
            def __len__(self) -> int:
                return len(words)

            def __getitem__(self, i: int) -> tuple[Any, Any, int]:
                return torch.from_numpy(words[i]), torch.from_numpy(labels[i]), intents[i]

        def collate(batch: list[tuple[Any, Any, int]]) -> tuple[Any, Any, Any, Any]:
            w, s, i = zip(*batch, strict=True)
            lengths = torch.tensor([len(x) for x in w])
            padded_words = pad_sequence(list(w), batch_first=True)
            return padded_words, pad_sequence(list(s), batch_first=True), torch.tensor(i), lengths

        data = DataLoader(Atis(), batch_size=32, shuffle=True, collate_fn=collate)
        for _ in range(spec["sweeps"]):
            for w, s, i, lengths in data:
                total += float(w.sum()) + float(s.sum()) + float(i.sum())
                sequences += len(lengths)
                batches += 1
    else:
        layout = TOKEN_LAYOUT if spec["mode"] == "token_ids" else "auto"
        data = loader(functools.partial(atis_source, spec["file"], spec["sweeps"]), spec["samples"], layout=layout)
        for batch in data:
            total += sum(touch(value) for value in batch.tensors.values())
            sequences += len(batch.lengths["S0"])
            batches += 1
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "cpu_s": cpu_seconds() - cpu0, "sequences": sequences, "batches": batches}


def tokenised(path: str) -> tuple[list[np.ndarray], list[np.ndarray], list[int]]:
    """ATIS as hand-written code would keep it: per sequence, the word ids, the slot ids and the intent."""
    source = MinibatchSource(CTFDeserializer(path, ATIS_STREAMS), randomize=False, max_sweeps=1)
    words: list[np.ndarray] = []
    labels: list[np.ndarray] = []
    intents: list[int] = []
    while minibatch := source.next_minibatch(100_000):
        offsets = minibatch["S0"].sequence_offsets
        words += np.split(minibatch["S0"].indices.astype(np.int64), offsets[1:-1])
        labels += np.split(minibatch["S2"].indices.astype(np.int64), offsets[1:-1])
        intents += minibatch["S1"].indices.astype(np.int64).tolist()
    source.close()
    return words, labels, intents


def child_workers(spec: dict[str, Any]) -> dict[str, Any]:
    from cntkio.torch import loader

    cpu0, t0 = cpu_seconds(), time.perf_counter()
    make_source = functools.partial(kit_source, spec["file"], spec["kind"])
    workers = spec["workers"]
    data = loader(make_source, 1024, num_workers=workers, persistent_workers=workers > 0)
    samples = 0
    for _ in range(spec["epochs"]):  # each pass reads the next epoch
        for batch in data:
            samples += int(next(iter(batch.lengths.values())).sum())
            for value in batch.tensors.values():
                touch(value)
    seconds = time.perf_counter() - t0
    del data, batch  # the persistent workers stop: their CPU time and peak RSS are counted
    gc.collect()
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {
        "seconds": seconds,
        "cpu_s": cpu_seconds() - cpu0 + children.ru_utime + children.ru_stime,
        "samples": samples,
        "children_peak_rss_mb": children.ru_maxrss / 1024,
    }


CHILDREN = {"atis": child_atis, "workers": child_workers}


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__, CHILDREN, "1 ATIS sweep, 2 MB kit files")
    ap.add_argument("--atis-sweeps", type=int, default=5)
    ap.add_argument("--atis-samples", type=int, default=430, help="samples per minibatch (~32 ATIS sequences)")
    ap.add_argument("--mb", default="200mb", help="kit file size tag (dense_<mb>_s1.ctf)")
    ap.add_argument("--epochs", type=int, default=3, help="epochs per DataLoader (persistent workers)")
    args = ap.parse_args(argv)
    if run_child(args, CHILDREN):
        return 0
    if args.smoke:
        args.runs, args.atis_sweeps, args.mb, args.epochs = 1, 1, "2mb", 1
    atis = {"file": str(ATIS), "sweeps": args.atis_sweeps, "samples": args.atis_samples}
    jobs = [Job(f"atis {mode}", "atis", {**atis, "mode": mode}) for mode in ("token_ids", "csr", "plain")]
    for kind in ("dense", "sparse"):
        path = Path(args.data) / f"{kind}_{args.mb}_s1.ctf"
        for workers in (0, 1, 2):
            spec = {"file": str(path), "kind": kind, "workers": workers, "epochs": args.epochs}
            jobs.append(Job(f"{kind} workers={workers}", "workers", spec))
    rounds = Rounds(jobs, [], args.runs)
    results = rounds.results
    report = Report()

    def median(label: str, key: str = "seconds") -> float:
        return statistics.median(r.get(key, float("nan")) for r in results[label])

    atis_rows = []
    plain = median("atis plain")
    plain_rate = median("atis plain", "sequences") / plain
    for mode in ("token_ids", "csr", "plain"):
        seconds = median(f"atis {mode}")
        rate = median(f"atis {mode}", "sequences") / seconds
        bar = "PASS" if rate >= plain_rate else "FAIL"
        atis_rows.append([
            mode, f"{median(f'atis {mode}', 'batches') / seconds:,.0f}", f"{rate:,.0f}", f"{seconds:.3f}",
            f"{median(f'atis {mode}', 'cpu_s'):.3f}", f"{rate / plain_rate:.2f}x", bar if mode == "token_ids" else "-",
        ])  # fmt: skip
    worker_rows = []
    for kind in ("dense", "sparse"):
        size = os.path.getsize(Path(args.data) / f"{kind}_{args.mb}_s1.ctf")
        base = median(f"{kind} workers=0")
        for workers in (0, 1, 2):
            label = f"{kind} workers={workers}"
            seconds = median(label)
            worker_rows.append([
                kind, str(workers), f"{size * args.epochs / seconds / 1e6:.0f}", f"{base / seconds:.2f}x",
                f"{median(label, 'cpu_s'):.2f}",
                f"{median(label, 'peak_rss_mb'):.0f} + {median(label, 'children_peak_rss_mb'):.0f}",
                ("PASS" if base / seconds >= 1.0 else "FAIL") if workers == 2 else "-",
            ])  # fmt: skip
    report.lines.append(rounds.header("cntkio.torch bars"))
    report.lines.append("")
    report.section(
        f"## ATIS train, randomized, {args.atis_sweeps} epochs",
        _table(["loader", "batches/s", "sequences/s", "s", "CPU s", "/ plain", "bar >= 1x"], atis_rows),
    )
    worker_header = [
        "file", "workers", "MB/s", "/ 0 workers", "CPU s", "peak RSS MiB (main + largest worker)", "bar 2 >= 0",
    ]  # fmt: skip
    title = f"## DataLoader workers (persistent), {args.epochs} randomized epochs, minibatches of 1024"
    report.section(title, _table(worker_header, worker_rows))
    return report.finish(args, results)


if __name__ == "__main__":
    sys.exit(main())
