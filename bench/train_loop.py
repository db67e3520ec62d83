#!/usr/bin/env python3
"""A training loop fed by cntkio and by the loader a PyTorch user would write (issue 25, point 5).

A step of configurable CPU cost (--step-ms: a loop of torch matmuls on a fixed 128 x 128 tensor, calibrated in each
child before the timing to take about that many ms; torch releases the GIL inside each matmul, as in a real step; one
torch thread, --step-threads) runs after every batch. The batches come from the kit's dense, sparse (gen.py, --mb MiB)
and seq (--seq-mb MiB: its minibatches hold ~30 sequences, ~10^3 per epoch at 20 MiB) CTF files, randomized,
minibatches of --minibatch (1024) samples, --epochs whole epochs (a run stopped at --max-steps is checked for its
steps only, and its per-batch figures carry the first chunks' parse over fewer batches), through:

  ahead=2     cntkio.torch.loader(make_source, 1024, ahead=2): in-process, minibatches assembled ahead on a
              background thread (without `ahead` in this version of cntkio: the plain in-process loader)
  2 workers   cntkio.torch.loader(make_source, 1024, num_workers=2, persistent_workers=True)
  anchor      what a PyTorch user writes by hand: the file parsed once into NumPy arrays (untimed), a map-style
              Dataset of per-sequence tensors and DataLoader(num_workers=2, batch_size=<sequences of ~1024
              samples>, shuffle=True, persistent_workers=True) with a collate: dense torch.stack, sparse a CSR
              tensor (torch.sparse_csr_tensor), seq (one-hot word ids) pad_sequence of the ids
  ahead=0     the in-process loader reading each minibatch when asked (a reference)
  source      MinibatchSource(..., max_sweeps=epochs).next_minibatch(1024), NumPy, no tensors (a reference)
  step alone  the step with no data (its own cost)

make_source = MinibatchSource(CTFDeserializer(file, streams), max_sweeps=1, randomization_seed=1) (the defaults:
32 MiB chunks, window 128 chunks); on seq every cntkio configuration uses layout="token_ids" for S0 and S1, the padded
ids the anchor's pad_sequence makes. Every measurement runs in a fresh subprocess (imports and calibration untimed),
round-robin over --runs rounds; medians. Per configuration: time to the first batch (from building the loader), then
steps/s, exposed wait (the share of the wall time after the first batch spent in next(iterator)), CPU-seconds per
batch of the loading (process + worker processes, getrusage after the workers exit, minus the consuming thread's
step and check time), peak RSS of the process tree (the process's VmHWM from the start of the timing + the peak
private memory of each child process, sampled every 0.2 s), MB/s without a step against CNTK's own C++ parser (the
kit's ctf_oracle) in the same run.

Bars: exposed wait <= 5 % when the step costs more than loading (the step alone against the no-step time per batch
of that configuration); CPU-seconds per batch of ahead=2 <= 0.6x the anchor's; tree RSS with 2 workers <= ahead=2's
+ 2 x 64 MiB; the first batch <= 1 s on a corpus of --big-sequences one-line sequences with the index cache.

  python bench/train_loop.py [--mb 200] [--seq-mb 20] [--runs 3] [--step-ms 2,10] [--epochs 2] [--json out.json]
  python bench/train_loop.py --smoke        # 2 MiB files, one round, each kind's measurements in one process
"""

from __future__ import annotations

import argparse
import functools
import gc
import glob
import inspect
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from cntkio import CTFDeserializer, MinibatchSource
from core import SEED, Report, cpu_seconds, relative, reset_peak_rss, stream_defs, write_short_sequences
from ctf_parse import REPO_ROOT, _table, kit_dir, load_anchors
from harness import Job, parser, run, run_child

KINDS = ("dense", "sparse", "seq")
CONFIGS = {  # key -> label in the tables
    "ahead2": "ahead=2",
    "workers2": "2 workers",
    "anchor": "anchor (DataLoader, 2 workers)",
    "ahead0": "ahead=0",
    "source": "MinibatchSource",
}
SEQ_LAYOUT = {"S0": "token_ids", "S1": "token_ids"}
ID_KINDS = ("seq",)  # one-hot streams: their checksum is the sum of the ids (column indices), else sum |v|
MATRIX = 128  # the step's tensor: 128 x 128 float32, ~4 MFLOP per matmul
WAIT_BAR = 0.05
CPU_BAR = 0.6
RSS_BAR_MIB = 2 * 64
FIRST_BAR_S = 1.0
SAME_SUM = 1e-9  # cntkio configurations and the anchor: the same float32 values, summed in another order
CLOSE_SUM = 1e-6  # against CNTK's float parser (not correctly rounded)


# ------------------------------------------------------------------------------------------- children
class Step:
    """``n`` matmuls of a fixed tensor, ``n`` chosen so that the step takes about ``ms`` milliseconds: the best of
    a few timed trials (the cost on a quiet core) is taken, once, before the timing."""

    def __init__(self, ms: float):
        import torch

        self.a = torch.randn(MATRIX, MATRIX)
        self.out = torch.empty_like(self.a)
        self.n = 0
        self.per_matmul_s = 0.0
        if ms > 0:
            trials = []
            for _ in range(7):
                t0 = time.perf_counter()
                for _ in range(20):
                    torch.mm(self.a, self.a, out=self.out)
                trials.append((time.perf_counter() - t0) / 20)
            self.per_matmul_s = min(trials)
            self.n = max(1, round(ms / 1e3 / self.per_matmul_s))

    def __call__(self) -> None:
        import torch

        for _ in range(self.n):
            torch.mm(self.a, self.a, out=self.out)


def make_source(path: str, kind: str, cache: bool = False, sweeps: int = 1) -> MinibatchSource:
    """What a user passes to cntkio.torch.loader: a new source per pass (each pass reads the next epoch)."""
    deserializer = CTFDeserializer(path, stream_defs(kind), cache_index=cache)
    return MinibatchSource(deserializer, max_sweeps=sweeps, randomization_seed=SEED)


def ahead_supported() -> bool:
    from cntkio.torch import MinibatchDataset

    return "ahead" in inspect.signature(MinibatchDataset).parameters


def cntkio_loader(mode: str, path: str, kind: str, minibatch: int, cache: bool = False) -> Any:
    from cntkio.torch import loader

    make = functools.partial(make_source, path, kind, cache)
    options: dict[str, Any] = {"layout": SEQ_LAYOUT} if kind == "seq" else {}
    if mode in ("ahead2", "ahead0") and ahead_supported():
        options["ahead"] = 2 if mode == "ahead2" else 0
    if mode == "workers2":
        return loader(make, minibatch, num_workers=2, persistent_workers=True, **options)
    return loader(make, minibatch, **options)


class Stored:
    """One stream of the whole file in memory, as hand-written code keeps it: ``rows`` [sequences, dim] (dense, one
    sample per sequence); ``indptr``/``indices``/``values`` (sparse, one sample per sequence: a CSR row each); or
    ``offsets``/``ids`` (one-hot sequences: the ids of each sequence)."""

    def __init__(self, form: str, dim: int, parts: list[Any]):
        self.form, self.dim = form, dim
        lengths = np.concatenate([p.sequence_lengths for p in parts]).astype(np.int64)
        self.lengths = lengths
        if form == "dense":
            if (lengths != 1).any():
                raise RuntimeError("dense anchor streams must have one sample per sequence")
            self.rows = np.concatenate([p.values.reshape(p.num_samples, -1) for p in parts])
        elif form == "csr":
            if (lengths != 1).any():
                raise RuntimeError("sparse anchor streams must have one sample per sequence")
            nnz = np.concatenate([np.diff(p.indptr) for p in parts]).astype(np.int64)
            self.indptr = np.concatenate([[0], np.cumsum(nnz)]).astype(np.int64)
            self.indices = np.concatenate([p.indices for p in parts]).astype(np.int64)
            self.values = np.concatenate([p.values for p in parts])
        else:  # one-hot: one id per sample
            if any((np.diff(p.indptr) != 1).any() for p in parts):
                raise RuntimeError("id streams must be one-hot")
            self.offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
            self.ids = np.concatenate([p.indices for p in parts]).astype(np.int64)

    def item(self, i: int) -> Any:
        import torch

        if self.form == "dense":
            return torch.from_numpy(self.rows[i])
        if self.form == "csr":
            a, b = self.indptr[i], self.indptr[i + 1]
            return torch.from_numpy(self.indices[a:b]), torch.from_numpy(self.values[a:b])
        return torch.from_numpy(self.ids[self.offsets[i] : self.offsets[i + 1]])


def in_memory(path: str, kind: str) -> dict[str, Stored]:
    """The file parsed once, in file order (untimed: what a user does before training, or loads from .npy)."""
    source = MinibatchSource(CTFDeserializer(path, stream_defs(kind)), randomize=False, max_sweeps=1)
    parts: dict[str, list[Any]] = {}
    dims: dict[str, int] = {}
    sparse: dict[str, bool] = {}
    while minibatch := source.next_minibatch(1 << 16):
        for info, data in minibatch.items():
            parts.setdefault(info.name, []).append(data)
            dims[info.name], sparse[info.name] = int(np.prod(info.shape)), info.is_sparse
    source.close()
    forms = {name: ("ids" if kind in ID_KINDS else "csr") if sparse[name] else "dense" for name in parts}
    return {name: Stored(forms[name], dims[name], parts[name]) for name in parts}


def anchor_loader(stored: dict[str, Stored], minibatch: int) -> Any:
    """Dataset + collate + DataLoader as a PyTorch user writes them; batches of the sequences that hold about
    ``minibatch`` samples (the mean of the longest stream of a sequence)."""
    import torch
    from torch.nn.utils.rnn import pad_sequence
    from torch.utils.data import DataLoader, Dataset

    sequences = len(next(iter(stored.values())).lengths)
    samples = np.max([s.lengths for s in stored.values()], axis=0).sum()
    batch_size = max(1, round(minibatch * sequences / samples))

    class InMemory(Dataset):  # type: ignore[misc,type-arg]
        def __len__(self) -> int:
            return sequences

        def __getitem__(self, i: int) -> dict[str, Any]:
            return {name: s.item(i) for name, s in stored.items()}

    def collate(items: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
        tensors: dict[str, Any] = {}
        lengths: dict[str, Any] = {}
        for name, s in stored.items():
            column = [item[name] for item in items]
            if s.form == "dense":
                tensors[name] = torch.stack(column)
                lengths[name] = torch.ones(len(items), dtype=torch.int64)
            elif s.form == "csr":
                indices, values = zip(*column, strict=True)
                crow = torch.zeros(len(items) + 1, dtype=torch.int64)
                torch.cumsum(torch.tensor([len(x) for x in indices]), 0, out=crow[1:])
                shape = (len(items), s.dim)
                tensors[name] = torch.sparse_csr_tensor(crow, torch.cat(indices), torch.cat(values), size=shape)
                lengths[name] = torch.ones(len(items), dtype=torch.int64)
            else:
                tensors[name] = pad_sequence(column, batch_first=True, padding_value=0)
                lengths[name] = torch.tensor([len(x) for x in column])
        return tensors, lengths

    return DataLoader(
        InMemory(), batch_size=batch_size, shuffle=True, num_workers=2, persistent_workers=True, collate_fn=collate
    )


class Tally:
    """Sequences, values and a checksum of everything delivered: sum |v| of the values, or on one-hot kinds the
    sum of the ids (the same whether they come as CSR column indices or padded token ids)."""

    def __init__(self, kind: str):
        self.ids = kind in ID_KINDS
        self.sequences = self.values = 0
        self.total = 0.0

    def torch_batch(self, tensors: dict[str, Any], lengths: dict[str, Any]) -> None:
        import torch

        self.sequences += len(next(iter(lengths.values())))
        for name, value in tensors.items():
            if value.layout == torch.sparse_csr:
                self.values += value.values().numel()
                part = value.col_indices().sum() if self.ids else value.values().abs().sum(dtype=torch.float64)
            elif self.ids:  # token ids [batch, max_len], padded with 0
                self.values += int(lengths[name].sum())
                part = value.sum()
            else:
                self.values += value.numel()
                part = value.abs().sum(dtype=torch.float64)
            self.total += float(part)

    def numpy_batch(self, minibatch: Any) -> None:
        self.sequences += next(iter(minibatch.values())).num_sequences
        for data in minibatch.values():
            self.values += int(data.values.size)
            part = data.indices.sum(dtype=np.int64) if self.ids else np.abs(data.values).sum(dtype=np.float64)
            self.total += float(part)


def numpy_minibatches(path: str, kind: str, minibatch: int, epochs: int) -> Iterator[Any]:
    source = make_source(path, kind, sweeps=epochs)
    try:
        while batch := source.next_minibatch(minibatch):
            yield batch
    finally:
        source.close()


def child_pids() -> list[int]:
    pids: list[int] = []
    for children in glob.glob("/proc/self/task/*/children"):
        try:
            with open(children) as f:
                pids += [int(pid) for pid in f.read().split()]
        except OSError:
            pass
    return pids


def private_mib(pid: int) -> float:
    """Memory only this process maps (Private_Clean + Private_Dirty): what a worker adds to the tree."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            kb = sum(int(line.split()[1]) for line in f if line.startswith(("Private_Clean:", "Private_Dirty:")))
    except OSError:
        return 0.0
    return kb / 1024


class ChildMemory:
    """The private memory of every child process (the workers, multiprocessing's resource tracker), sampled at most
    every ``period`` seconds from the consuming thread: each one's peak. (At the end of a run the workers have closed
    their sources, so their memory then is not their peak.)"""

    def __init__(self, period: float = 0.2):
        self.period = period
        self.peak: dict[int, float] = {}
        self.due = 0.0

    def sample(self, now: float, force: bool = False) -> None:
        if now < self.due and not force:
            return
        self.due = now + self.period
        for pid in child_pids():
            self.peak[pid] = max(self.peak.get(pid, 0.0), private_mib(pid))


def vm_hwm_mib() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024


def children_usage() -> tuple[float, float]:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def child_loop(spec: dict[str, Any]) -> dict[str, Any]:
    """One configuration: the first batch, then the loop with the step after every batch."""
    import torch

    import cntkio.torch  # noqa: F401  (every child has the same imports, so the same RSS baseline)

    torch.set_num_threads(spec["step_threads"])
    mode, kind, path, minibatch = spec["mode"], spec["kind"], spec["file"], spec["minibatch"]
    epochs, max_steps = spec["epochs"], spec["max_steps"] or sys.maxsize
    step = Step(spec["step_ms"])
    stored = in_memory(path, kind) if mode == "anchor" else None
    tally = Tally(kind)
    gc.collect()
    reset_peak_rss()
    children_cpu0, _ = children_usage()
    cpu0, t0 = cpu_seconds(), time.perf_counter()

    passes: Callable[[], Iterable[Any]]
    if mode == "step":
        passes, epochs = (lambda: range(spec["steps"])), 1
    elif mode == "source":
        passes, epochs = (lambda: numpy_minibatches(path, kind, minibatch, spec["epochs"])), 1
    else:
        data = anchor_loader(stored, minibatch) if stored is not None else cntkio_loader(mode, path, kind, minibatch)
        passes = lambda: data  # noqa: E731  (each pass of the loader reads the next epoch)

    memory = ChildMemory()
    steps = 0
    wait = epoch_wait = consumer_cpu = first = 0.0
    t_first = t0
    iterator: Iterator[Any] | None = None
    for _ in range(epochs):
        if steps >= max_steps:
            break
        w0 = time.perf_counter()
        iterator = iter(passes())
        pass_start = True
        while steps < max_steps:
            batch = next(iterator, None)
            now = time.perf_counter()
            if steps == 0:
                first, t_first = now - t0, now
            else:
                wait += now - w0
                epoch_wait += (now - w0) if pass_start else 0.0
            pass_start = False
            if batch is None:
                break
            c0 = time.thread_time()
            if mode == "source":
                tally.numpy_batch(batch)
            elif isinstance(batch, tuple):
                tally.torch_batch(*batch)
            elif mode != "step":
                tally.torch_batch(batch.tensors, batch.lengths)
            step()
            memory.sample(time.perf_counter())  # (consumer time: not counted as loading)
            consumer_cpu += time.thread_time() - c0
            steps += 1
            w0 = time.perf_counter()
    end = time.perf_counter()
    worker_pids = child_pids()
    memory.sample(end, force=True)
    main_peak = vm_hwm_mib()
    del iterator, passes, batch  # the persistent workers stop: their CPU time is counted
    if mode not in ("step", "source"):
        del data
    gc.collect()
    children_cpu, children_peak = children_usage()
    cpu = cpu_seconds() - cpu0 + children_cpu - children_cpu0
    return {
        "steps": steps,
        "capped": steps >= max_steps,
        "first_s": first,
        "seconds": end - t0,
        "loop_s": end - t_first,
        "wait_s": wait,
        "epoch_start_wait_s": epoch_wait,
        "cpu_s": cpu,
        "consumer_cpu_s": consumer_cpu,
        "workers": len(worker_pids),
        "workers_cpu_s": children_cpu - children_cpu0,
        "main_peak_mib": main_peak,
        "workers_private_mib": sum(memory.peak.values()),
        "children_sampled": len(memory.peak),
        "largest_worker_peak_mib": children_peak,
        "matmuls": step.n,
        "matmul_ms": step.per_matmul_s * 1e3,
        "sequences": tally.sequences,
        "values": tally.values,
        "total": tally.total,
        "ahead_supported": ahead_supported(),
    }


def child_first(spec: dict[str, Any]) -> dict[str, Any]:
    """The first batch of the in-process loader (ahead=2) on the big corpus, from building the loader on."""
    import cntkio.torch  # noqa: F401

    t0 = time.perf_counter()
    data = cntkio_loader("ahead2", spec["file"], "short", spec["minibatch"], cache=spec["cache"])
    batch = next(iter(data))
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "sequences": len(batch.lengths["a"]), "cache": spec["cache"]}


def child_oracle(spec: dict[str, Any]) -> dict[str, Any]:
    """CNTK's own C++ CTF reader (index + parse, one thread): its own timing, from its JSON line."""
    done = subprocess.run([spec["oracle"], spec["file"], spec["kind"]], capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["count"] = result["dense_values"] + result["nnz"]
    return result


def child_group(spec: dict[str, Any]) -> dict[str, Any]:
    """--smoke: several measurements in one process (the imports paid once); each restarts the peak-RSS mark."""
    return {"group": {label: CHILDREN[child](sub) for label, child, sub in spec["jobs"]}}


CHILDREN = {"loop": child_loop, "first": child_first, "oracle": child_oracle, "group": child_group}


# --------------------------------------------------------------------------------------------- parent
Results = dict[str, list[dict[str, Any]]]


def prepare(args: argparse.Namespace) -> dict[str, Any]:
    """The kit's files (generated once by gen.py), the big corpus and its index cache (built once, untimed)."""
    kit = kit_dir()
    oracle = kit / "cntk-ctf-oracle" / "ctf_oracle"
    if not os.access(oracle, os.X_OK):
        sys.exit(f"CNTK's CTF oracle not found or not executable: {oracle}")
    anchors = load_anchors(kit)
    files: dict[str, Any] = {"oracle": str(oracle)}
    for kind in args.kinds:
        meta = anchors.ensure_data(kind, args.seq_mb if kind == "seq" else args.mb, SEED, args.data, sys.executable)
        files[kind] = meta["files"]["ctf"]["path"]
        print(f"data: {files[kind]}  {os.path.getsize(files[kind]) / 1e6:.1f} MB", file=sys.stderr)
    if args.big_sequences:
        big = Path(args.data) / f"short_{args.big_sequences}seq.ctf"
        write_short_sequences(big, args.big_sequences)
        if not glob.glob(str(big) + ".*.cntkio-index"):
            print(f"index cache: {big}", file=sys.stderr)
            CTFDeserializer(str(big), stream_defs("short"), cache_index=True)
        files["big"] = str(big)
    return files


def jobs_of(args: argparse.Namespace, files: dict[str, Any]) -> list[Job]:
    """One round: every (kind, configuration, step) measurement, the step alone, CNTK, the first batch."""
    steps = [0.0, *args.step_ms]
    common = {"minibatch": args.minibatch, "epochs": args.epochs, "max_steps": args.max_steps}
    jobs: list[Job] = []
    for kind in args.kinds:
        for mode in CONFIGS:
            for ms in steps:
                spec = {**common, "mode": mode, "kind": kind, "file": files[kind], "step_ms": ms}
                jobs.append(Job(f"{kind} {mode} {ms:g}", "loop", {**spec, "step_threads": args.step_threads}))
        jobs.append(Job(f"{kind} CNTK", "oracle", {"oracle": files["oracle"], "file": files[kind], "kind": kind}))
    for ms in args.step_ms:
        spec = {**common, "mode": "step", "kind": "dense", "file": "", "step_ms": ms, "steps": args.alone_steps}
        jobs.append(Job(f"step {ms:g}", "loop", {**spec, "step_threads": args.step_threads}))
    if args.big_sequences:
        for cache in (True, False):
            spec = {"file": files["big"], "minibatch": args.minibatch, "cache": cache}
            jobs.append(Job(f"first {'cache' if cache else 'no cache'}", "first", spec))
    return jobs


def grouped(jobs: list[Job]) -> list[Job]:
    """--smoke: one process per kind (and one for the rest)."""
    groups: dict[str, list[Job]] = {}
    for job in jobs:
        groups.setdefault(job.label.split()[0] if job.label.split()[0] in KINDS else "other", []).append(job)
    return [
        Job(name, "group", {"jobs": [(job.label, job.child, job.spec) for job in members]})
        for name, members in groups.items()
    ]


def run_rounds(jobs: list[Job], runs: int, group: bool) -> Results:
    results: Results = {job.label: [] for job in jobs}
    for round_number in range(1, runs + 1):
        for job in grouped(jobs) if group else jobs:
            print(f"round {round_number}/{runs}: {job.label}", file=sys.stderr)
            result = run(job)
            if job.child != "group":
                results[job.label].append(result)
            elif "failed" in result:
                for label, _, _ in job.spec["jobs"]:
                    results[label].append(result)
            else:
                for label, value in result["group"].items():
                    results[label].append(value)
    return results


def med(runs: list[dict[str, Any]], key: str) -> float:
    values = [r[key] for r in runs if key in r]
    return float(statistics.median(values)) if values else float("nan")


def failed(runs: list[dict[str, Any]]) -> list[str]:
    return [f"run {n}: {r['failed']}" for n, r in enumerate(runs, 1) if "failed" in r]


class Figures:
    """Medians of one (kind, configuration, step) measurement."""

    def __init__(self, runs: list[dict[str, Any]], mb: float, values_per_sweep: int):
        self.runs = runs
        self.steps = med(runs, "steps")
        self.steps_per_s = self.steps / med(runs, "loop_s")
        self.wait = med(runs, "wait_s") / med(runs, "loop_s")
        self.epoch_start_wait = med(runs, "epoch_start_wait_s") / med(runs, "loop_s")
        self.ms_per_batch = med(runs, "loop_s") / self.steps * 1e3
        self.loading_cpu_ms = (med(runs, "cpu_s") - med(runs, "consumer_cpu_s")) / self.steps * 1e3
        self.cpu_ms = med(runs, "cpu_s") / self.steps * 1e3
        self.tree_mib = statistics.median(r["main_peak_mib"] + r["workers_private_mib"] for r in runs if "steps" in r)
        self.first_s = med(runs, "first_s")
        self.mbps = mb * med(runs, "values") / values_per_sweep / med(runs, "seconds")


def checks(kind: str, mode: str, runs: list[dict[str, Any]], args: argparse.Namespace, cntk: Any) -> list[str]:
    """Every run delivered what one sweep holds x epochs (CNTK's sequences, values and checksum), or took exactly
    --max-steps steps when capped; the worker configurations counted their workers' CPU."""
    problems = failed(runs)
    checksum = cntk["index_sum"] if kind in ID_KINDS else cntk["abs_sum"]
    expected = (cntk["sequences"] * args.epochs, cntk["count"] * args.epochs, checksum * args.epochs)
    for n, r in enumerate(runs, 1):
        if "failed" in r:
            continue
        if r["capped"]:
            if r["steps"] != args.max_steps or r["sequences"] <= 0:
                problems.append(f"run {n}: {r['steps']} steps, {r['sequences']} sequences; capped at {args.max_steps}")
        elif (r["sequences"], r["values"]) != expected[:2] or relative(r["total"], expected[2]) > CLOSE_SUM:
            problems.append(
                f"run {n}: {r['sequences']} sequences, {r['values']} values, sum {r['total']:.10g}; "
                f"CNTK x {args.epochs}: {expected[0]}, {expected[1]}, {expected[2]:.10g}"
            )
        if mode in ("workers2", "anchor") and (r["workers"] < 2 or r["workers_cpu_s"] <= 0):
            problems.append(f"run {n}: {r['workers']} workers, their CPU {r['workers_cpu_s']:.3f} s")
    return problems


def agreement(kind: str, results: Results, args: argparse.Namespace) -> list[str]:
    """Full runs of every configuration of a kind agree with each other (sum within 1e-9)."""
    totals = [
        (label, r["sequences"], r["values"], r["total"])
        for label, runs in results.items()
        if label.startswith(f"{kind} ") and not label.endswith("CNTK")
        for r in runs
        if "capped" in r and not r["capped"]
    ]
    if not totals:
        return []
    _, sequences, values, total = totals[0]
    return [
        f"{label}: {s}, {v}, {t:.12g} against {sequences}, {values}, {total:.12g}"
        for label, s, v, t in totals
        if (s, v) != (sequences, values) or relative(t, total) > SAME_SUM
    ]


def revision() -> str:
    """The commit measured (`git describe --always --dirty`: "-dirty" when the working tree had changes)."""
    done = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "describe", "--always", "--dirty"], capture_output=True, text=True, check=False
    )
    return done.stdout.strip() or "unknown"


def report_of(args: argparse.Namespace, files: dict[str, Any], results: Results, load: tuple[float, float]) -> Report:
    report = Report()
    steps = [0.0, *args.step_ms]
    supported = any(r.get("ahead_supported") for runs in results.values() for r in runs)
    report.lines += [
        f"# training loop (issue 25.5)  {time.strftime('%Y-%m-%d %H:%M')}  runs={args.runs}  nproc={os.cpu_count()}  "
        f"load avg (1 min) before/after: {load[0]:.2f}/{load[1]:.2f}  cntkio: {revision()}",
        f"# minibatches of {args.minibatch} samples, {args.epochs} epochs (at most {args.max_steps or 'any'} steps), "
        f"randomized; step = matmuls of {MATRIX}x{MATRIX} on {args.step_threads} torch thread(s); medians; "
        f"ahead={'supported' if supported else 'NOT supported by this cntkio: ahead=2 is the plain loader'}",
        "",
    ]
    alone = {ms: results[f"step {ms:g}"] for ms in args.step_ms}
    alone_ms = {ms: med(runs, "loop_s") / med(runs, "steps") * 1e3 for ms, runs in alone.items()}
    rows = [
        (f"{ms:g}", f"{med(runs, 'matmuls'):.0f}", f"{med(runs, 'matmul_ms'):.3f}", f"{alone_ms[ms]:.2f}",
         f"{med(runs, 'consumer_cpu_s') / med(runs, 'steps') * 1e3:.2f}", report.verdict(failed(runs)))
        for ms, runs in alone.items()
    ]  # fmt: skip
    report.section(
        f"## The step alone ({args.alone_steps} steps, no data)",
        _table(("step ms asked", "matmuls", "ms per matmul", "ms per step", "CPU ms per step", "check"), rows),
    )
    numbers: dict[str, Any] = {"step_alone_ms": {f"{ms:g}": v for ms, v in alone_ms.items()}}
    bar_rows: list[tuple[str, ...]] = []
    cntk_rows: list[tuple[str, ...]] = []
    for kind in args.kinds:
        cntk_runs = results[f"{kind} CNTK"]
        report.verdict(failed(cntk_runs))
        cntk = next((r for r in cntk_runs if "failed" not in r), None)
        if cntk is None:
            continue
        mb = os.path.getsize(files[kind]) / 1e6
        cntk_mbps = mb / med(cntk_runs, "seconds")
        figures: dict[tuple[str, float], Figures] = {}
        rows = []
        for mode, name in CONFIGS.items():
            for ms in steps:
                runs = results[f"{kind} {mode} {ms:g}"]
                check = report.verdict(checks(kind, mode, runs, args, cntk))
                if not any("steps" in r for r in runs):
                    rows.append((name, f"{ms:g}", *("-",) * 10, check))
                    continue
                f = figures[mode, ms] = Figures(runs, mb, cntk["count"])
                numbers[f"{kind} {mode} {ms:g}"] = {k: v for k, v in vars(f).items() if k != "runs"}
                speed = (f"{f.mbps:.0f}", f"{f.mbps / cntk_mbps:.2f}x") if ms == 0 else ("-", "-")
                rows.append((
                    name, f"{ms:g}", f"{f.steps:.0f}", f"{f.steps_per_s:.0f}", f"{f.ms_per_batch:.2f}",
                    f"{f.wait * 100:.1f} ({f.epoch_start_wait * 100:.1f})", f"{f.loading_cpu_ms:.2f}",
                    f"{f.cpu_ms:.2f}", f"{f.tree_mib:.0f}", f"{f.first_s:.3f}", *speed, check,
                ))  # fmt: skip
        header = ("loader", "step ms", "steps", "steps/s", "ms/batch", "exposed wait % (at pass starts)",
                  "loading CPU ms/batch", "CPU ms/batch", "tree RSS MiB", "first batch s", "MB/s", "x CNTK",
                  "check")  # fmt: skip
        agree = report.verdict(agreement(kind, results, args))
        report.section(
            f"## {kind}: {Path(files[kind]).name} ({mb:.1f} MB), CNTK's parser {cntk_mbps:.0f} MB/s "
            f"(index + parse, 1 thread, CPU {med(cntk_runs, 'cpu_s'):.3f} s); configurations agree: "
            f"{agree}",
            _table(header, rows),
        )
        cntk_rows.append((kind, f"{mb:.1f}", f"{cntk_mbps:.0f}", *(
            f"{figures[mode, 0.0].mbps / cntk_mbps:.2f}x" if (mode, 0.0) in figures else "-" for mode in CONFIGS
        )))  # fmt: skip
        numbers[f"{kind} CNTK mbps"] = cntk_mbps
        bar_rows += bars_of(kind, steps, figures, alone_ms)
    report.section(
        "## MB/s without a step (from building the loader to the last batch), x CNTK's parser in the same run",
        _table(("file", "MB", "CNTK MB/s", *CONFIGS.values()), cntk_rows),
    )
    header = ("file", "step ms", "step alone ms", "loading ms/batch ahead=2 / 2 workers / anchor",
              f"exposed wait % (bar <= {WAIT_BAR:.0%} when step > loading)",
              f"CPU/batch ahead=2 / anchor (<= {CPU_BAR})",
              f"tree RSS 2 workers - ahead=2 MiB (<= {RSS_BAR_MIB})")  # fmt: skip
    report.section("## Bars (issue 25.5)", _table(header, bar_rows))
    if args.big_sequences:
        first_section(report, args, results)
    report.numbers = {**report.numbers, **numbers, "ahead_supported": supported, "revision": revision()}
    return report


def bars_of(
    kind: str, steps: list[float], figures: dict[tuple[str, float], Figures], alone_ms: dict[float, float]
) -> list[tuple[str, ...]]:
    rows = []
    for ms in steps:
        if not all((mode, ms) in figures and (mode, 0.0) in figures for mode in ("ahead2", "workers2", "anchor")):
            rows.append((kind, f"{ms:g}", *("-",) * 5))
            continue
        loading = {mode: figures[mode, 0.0].ms_per_batch for mode in ("ahead2", "workers2", "anchor")}
        waits = []
        for mode in ("ahead2", "workers2", "anchor"):
            wait = figures[mode, ms].wait
            dearer = ms > 0 and alone_ms[ms] > loading[mode]
            verdict = ("PASS" if wait <= WAIT_BAR else "FAIL") if dearer else "n/a"
            waits.append(f"{CONFIGS[mode].split(' (')[0]} {wait * 100:.1f} {verdict}")
        cpu = figures["ahead2", ms].loading_cpu_ms / figures["anchor", ms].loading_cpu_ms
        rss = figures["workers2", ms].tree_mib - figures["ahead2", ms].tree_mib
        rows.append((
            kind, f"{ms:g}", f"{alone_ms[ms]:.2f}" if ms else "-",
            " / ".join(f"{loading[mode]:.2f}" for mode in ("ahead2", "workers2", "anchor")), "; ".join(waits),
            f"{cpu:.2f}x {'PASS' if cpu <= CPU_BAR else 'FAIL'}",
            f"{rss:+.0f} {'PASS' if rss <= RSS_BAR_MIB else 'FAIL'}",
        ))  # fmt: skip
    return rows


def first_section(report: Report, args: argparse.Namespace, results: Results) -> None:
    rows = []
    for cache in ("cache", "no cache"):
        runs = results[f"first {cache}"]
        problems = failed(runs) + [
            f"run {n}: {r['sequences']} sequences in the first batch" for n, r in enumerate(runs, 1)
            if "failed" not in r and r["sequences"] != args.minibatch
        ]  # fmt: skip
        seconds = med(runs, "seconds")
        bar = ("PASS" if seconds <= FIRST_BAR_S else "FAIL") if cache == "cache" else "-"
        rows.append((cache, f"{seconds:.3f}", bar, report.verdict(problems)))
        report.numbers[f"first batch {cache} s"] = seconds
    report.section(
        f"## First batch, {args.big_sequences:,} one-line sequences, in-process loader (ahead=2), fresh process",
        _table(("index", "s", f"bar <= {FIRST_BAR_S:g} s", "check"), rows),
    )


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__, CHILDREN, "2 MiB files, one round, 10^5 big sequences, each kind in one process")
    ap.add_argument("--mb", type=float, default=200.0, help="size of each kit CTF file in MiB (gen.py)")
    ap.add_argument("--seq-mb", type=float, default=20.0, help="size of the seq file in MiB (~10^3 batches/epoch)")
    ap.add_argument("--kinds", default=",".join(KINDS), help="kit files to read (dense,sparse,seq)")
    ap.add_argument("--step-ms", default="2,10", help="step costs to sweep, ms (a run with no step is always made)")
    ap.add_argument("--step-threads", type=int, default=1, help="torch threads of the step")
    ap.add_argument("--minibatch", type=int, default=1024, help="samples per minibatch")
    ap.add_argument("--epochs", type=int, default=2, help="epochs per measurement")
    ap.add_argument("--max-steps", type=int, default=3000, help="at most this many steps per measurement (0: any)")
    ap.add_argument("--alone-steps", type=int, default=300, help="steps of the step-alone measurement")
    ap.add_argument("--big-sequences", type=int, default=10**7, help="sequences of the first-batch corpus (0 skips)")
    args = ap.parse_args(argv)
    if run_child(args, CHILDREN):
        return 0
    if args.smoke:
        args.mb, args.seq_mb, args.runs, args.step_ms = 2.0, 2.0, 1, "2"
        args.big_sequences, args.alone_steps = 10**5, 50
    args.kinds = [k for k in args.kinds.split(",") if k]
    args.step_ms = [float(ms) for ms in str(args.step_ms).split(",") if ms.strip() and float(ms) > 0]
    files = prepare(args)
    load_before = os.getloadavg()[0]
    results = run_rounds(jobs_of(args, files), args.runs, group=args.smoke)
    report = report_of(args, files, results, (load_before, os.getloadavg()[0]))
    return report.finish(args, results)


if __name__ == "__main__":
    sys.exit(main())
