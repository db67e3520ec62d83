"""``cntkio explain``: a source's reading plan, from its index alone (no value is parsed).

The plan lists the chunks (bytes, sequences, samples), each sweep's randomization (the chunk order, its blocks and how
many chunks feed one), and what every rank (data partition), and every ``DataLoader`` worker of a rank, reads per
sweep: minibatches, sequences, samples, chunks and the first keys. It is computed by the source's own code: each rank
walks the source's cursor with :meth:`~cntkio.MinibatchSource.plan_minibatch` (what ``skip_minibatch`` does, the units
it passes returned), and a rank's minibatches go to workers by :func:`cntkio._src.integrations.workers.worker_of`, the
rule of
:class:`cntkio.torch.MinibatchDataset` — so the plan is what a run reads, not a model of it. The plan is a pure
function of the index, the configuration (seed, window, ...), the ranks, the workers and the minibatch size; its
digest says so at a glance.

Not planned: sequences a parse finds unusable (a counted error in frame mode, an image that does not decode), which a
run skips, reading on; and truncated BPTT, which cuts sequences into pieces.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from collections.abc import Callable
from typing import Any, TextIO

import numpy as np

from cntkio._src.api.source import MinibatchSource
from cntkio._src.cli.common import (
    add_progress_option,
    add_variable_option,
    cannot_read,
    close_source,
    dims_inferred,
    fail,
    is_config,
    open_source,
    positive_int,
    sgd_minibatch_size,
    write_json,
)
from cntkio._src.common import progress
from cntkio._src.common.errors import CNTKIOError
from cntkio._src.common.sentinels import DEFAULT_RANDOMIZATION_WINDOW_IN_CHUNKS
from cntkio._src.corpus.table import Corpus
from cntkio._src.formats.cbf import CBFDeserializer
from cntkio._src.formats.ctf import CTFDeserializer
from cntkio._src.formats.protocol import Deserializer
from cntkio._src.formats.shards import ShardedDeserializer
from cntkio._src.integrations.equal_steps import RULES, EqualSteps
from cntkio._src.integrations.workers import worker_of
from cntkio._src.order import Randomization, SweepOrder

DEFAULT_MINIBATCH_SIZE = 256
FIRST_KEYS = 5
SHOWN_CHUNKS = 12  # chunks listed in the text (the JSON lists all)
KEY_CHARS = 24  # a key longer than this is cut in the text

Advance = Callable[[int], None]  # called with the samples a planned minibatch holds (a progress bar)


# ------------------------------------------------------------------------------------------- the plan
class _Share:
    """What one rank (``worker`` None) or one worker of a rank reads in one sweep."""

    def __init__(self, sweep: int, rank: int, worker: int | None, chunks: int):
        self.sweep, self.rank, self.worker = sweep, rank, worker
        self.minibatches = self.units = self.samples = 0
        self.chunks = np.zeros(chunks, dtype=bool)
        self.first: list[int] = []

    def add(self, units: np.ndarray, chunks: np.ndarray, lengths: np.ndarray, first_keys: int) -> None:
        self.units += len(units)
        self.samples += int(lengths.sum())
        self.chunks[chunks] = True
        if len(self.first) < first_keys:
            self.first.extend(units[: first_keys - len(self.first)].tolist())


def explain(
    source: MinibatchSource,
    *,
    ranks: int = 1,
    workers: int = 1,
    sweeps: int = 1,
    minibatch_size: int = DEFAULT_MINIBATCH_SIZE,
    first_keys: int = FIRST_KEYS,
    advance: Advance | None = None,
    dims_inferred: bool = False,
) -> dict[str, Any]:
    """The reading plan of ``source`` for ``ranks`` data partitions of ``workers`` loader workers each, over its first
    ``sweeps`` sweeps (fewer when its epoch ends earlier), with minibatches of ``minibatch_size`` samples for the whole
    job, as a JSON-ready dict (see the module). The source's position is moved: use it for nothing else.
    ``dims_inferred``: the source's streams were inferred from a CTF file (its sparse dimensions are lower bounds).

    Raises:
        ValueError: a count below 1.
        ConfigError: the source uses truncated BPTT.
    """
    for name, value in (("ranks", ranks), ("workers", workers), ("sweeps", sweeps), ("minibatch_size", minibatch_size)):
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    corpus: Corpus = source.engine.corpus  # the source's own corpus: the plan counts what its reads count
    randomization = source.randomization
    shares = {
        (sweep, rank, worker): _Share(sweep, rank, worker, corpus.num_chunks)
        for sweep in range(sweeps)
        for rank in range(ranks)
        for worker in [None, *range(workers if workers > 1 else 0)]
    }
    for rank in range(ranks):
        _walk(source, shares, rank, ranks, workers, sweeps, minibatch_size, first_keys, advance)
    source.restore_from_checkpoint({"minibatchSourcePosition": 0})
    orders = [SweepOrder(corpus, randomization, sweep) for sweep in range(sweeps)]
    plan: dict[str, Any] = {
        "source": _describe_source(source, corpus, dims_inferred),
        "chunks": _chunk_table(corpus),
        "randomization": _describe_randomization(randomization),
        "sweeps": [_describe_sweep(order, corpus) for order in orders],
        "partitioning": {
            "ranks": ranks,
            "by": "chunk" if orders[0].chunk_level(ranks) else "sequence",
            "workers": workers,
            "minibatch_size": minibatch_size,
        },
        "shares": [_share_dict(share, corpus) for share in shares.values()],
        "equal_steps": _equal_steps(source, ranks, minibatch_size),
    }
    plan["checks"] = _checks(plan, corpus, source, sweeps)
    plan["digest"] = hashlib.sha256(json.dumps(plan, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return plan


def _walk(
    source: MinibatchSource,
    shares: dict[tuple[int, int, int | None], _Share],
    rank: int,
    ranks: int,
    workers: int,
    sweeps: int,
    minibatch_size: int,
    first_keys: int,
    advance: Advance | None,
) -> None:
    """Plans rank ``rank``'s minibatches from the start of the timeline until ``sweeps`` sweeps (or the epoch) end."""
    source.restore_from_checkpoint({"minibatchSourcePosition": 0})
    number = 0
    while True:
        selection = source.plan_minibatch(minibatch_size, ranks, rank)
        if selection is None:
            return
        unit_sweeps = selection.sweeps()
        sweep = int(unit_sweeps[0])
        if sweep >= sweeps:
            return
        worker = worker_of(number, workers) if workers > 1 else None
        number += 1
        targets = [shares[(sweep, rank, None)]] + ([shares[(sweep, rank, worker)]] if worker is not None else [])
        for share in targets:
            share.minibatches += 1
        last = min(int(unit_sweeps[-1]), sweeps - 1)
        for part in range(sweep, last + 1):  # a minibatch may run on into the next sweep
            if part == sweep == last and int(unit_sweeps[-1]) == sweep:
                units, chunks, lengths = selection.units, selection.chunks, selection.lengths
            else:
                mine = unit_sweeps == part
                units, chunks, lengths = selection.units[mine], selection.chunks[mine], selection.lengths[mine]
            shares[(part, rank, None)].add(units, chunks, lengths, first_keys)
            if worker is not None:
                shares[(part, rank, worker)].add(units, chunks, lengths, first_keys)
        if advance is not None:
            advance(int(selection.lengths.sum()))


def _equal_steps(source: MinibatchSource, ranks: int, minibatch_size: int) -> dict[str, Any] | None:
    """What each equal-steps rule (cntkio.equal_steps; cntkio.torch's default across ranks) does in the first
    epoch: the steps every rank takes and what it carries out or pads. None for one rank or an endless source."""
    if ranks == 1 or source.is_infinite():
        return None
    return {rule: EqualSteps(rule, minibatch_size, ranks).plan(source, 0).report() for rule in RULES}


def _describe_source(source: MinibatchSource, corpus: Corpus, dims_inferred: bool) -> dict[str, Any]:
    primary = corpus.primary
    streams = [
        {
            "name": info.name,
            "format": info.storage_format,
            "dim": int(np.prod(info.shape)) if info.shape else 0,
            "dim_lower_bound": dims_inferred and info.is_sparse,  # the largest index + 1: the real one may be more
        }
        for info in source.stream_infos()
    ]
    return {
        "name": primary.source_name,
        "deserializers": [type(d).__name__ for d in corpus.deserializers],
        "streams": streams,
        "unit": "frame" if corpus.frame_mode else "sequence",
        "sequences": len(corpus.lengths),
        "units": corpus.num_units,
        "sweep_samples": corpus.sweep_size,
        "samples_counted_as": _samples_note(primary),
    }


def _samples_note(deserializer: Deserializer) -> str:
    """What the index counts as a sequence's samples (no value is parsed)."""
    first = deserializer.shards[0] if isinstance(deserializer, ShardedDeserializer) else deserializer
    if isinstance(first, CTFDeserializer):
        if first.compat:
            return "the lines of each sequence (compat: CNTK's index length)"
        return (
            "per sequence, the lines holding its longest stream (or its defining stream), counted by the index "
            "scan; streams' own counts, and lines a bad value spoils, need a parse (cntkio stats)"
        )
    if isinstance(first, CBFDeserializer):
        return "the per-sequence sample counts stored in the file's chunks"
    return f"the index lengths of {type(first).__name__}"


def _chunk_table(corpus: Corpus) -> dict[str, Any]:
    """The table chunks (the primary's chunks with sequences read) as columns; ``bytes`` None when unknown."""
    ids = corpus.chunk_ids
    sizes = corpus.primary.chunk_file_bytes()
    return {
        "ids": ids.tolist(),
        "bytes": None if sizes is None else sizes[ids].tolist(),
        "sequences": np.diff(corpus.sequence_starts).tolist(),
        "samples": corpus.chunk_samples.tolist(),
    }


def _describe_randomization(r: Randomization) -> dict[str, Any]:
    kind = "off" if not r.enabled else "compat" if r.compat else "default"
    return {
        "order": kind,
        "window": r.window if r.enabled else None,
        "window_unit": "samples" if r.sample_window else "chunks",
        "seed": r.seed if r.enabled else None,
        "bucket_samples": r.bucket_samples or None,
    }


def _describe_sweep(order: SweepOrder, corpus: Corpus) -> dict[str, Any]:
    """A sweep's chunk order (file chunk ids) and blocks: the most chunks any one block reads from."""
    widest = max((len(order.needed_chunks(k)) for k in range(order.num_blocks)), default=0)
    return {
        "sweep": order.sweep,
        "chunk_order": corpus.chunk_ids[order.chunk_order].tolist(),
        "blocks": order.num_blocks,
        "max_chunks_per_block": widest,
    }


def _share_dict(share: _Share, corpus: Corpus) -> dict[str, Any]:
    chunks = corpus.chunk_ids[np.flatnonzero(share.chunks)]
    keys = corpus.keys_of(np.asarray(share.first, dtype=np.int64)) if share.first else []
    return {
        "sweep": share.sweep,
        "rank": share.rank,
        "worker": share.worker,
        "minibatches": share.minibatches,
        "units": share.units,
        "samples": share.samples,
        "chunks": chunks.tolist(),
        "first_keys": [[source, _json_key(key)] for source, key in keys],
    }


def _json_key(key: Any) -> Any:
    if isinstance(key, tuple):
        return [_json_key(part) for part in key]
    return key.item() if isinstance(key, np.generic) else key


def _checks(plan: dict[str, Any], corpus: Corpus, source: MinibatchSource, sweeps: int) -> list[dict[str, Any]]:
    """Imbalance and idle readers, and an epoch shorter than the sweeps asked for: (level, message) records."""
    checks: list[dict[str, Any]] = []
    part = plan["partitioning"]
    biggest = int(corpus.chunk_samples.max()) if corpus.num_chunks else 0
    epoch = source.epoch_size
    if epoch < sweeps * corpus.sweep_size:
        checks.append(_check("note", f"the source's epoch ends after {epoch:,} samples, before {sweeps} sweep(s)"))
    for sweep in range(sweeps):
        ranks = [s for s in plan["shares"] if s["sweep"] == sweep and s["worker"] is None]
        samples = [s["samples"] for s in ranks]
        if not any(samples):
            continue
        for s in ranks:
            if not s["units"]:
                checks.append(_check("warning", f"sweep {sweep}: rank {s['rank']} reads nothing"))
        spread = max(samples) - min(samples)
        if part["ranks"] > 1 and spread > biggest:
            checks.append(_check(
                "warning", f"sweep {sweep}: ranks read {min(samples):,} to {max(samples):,} samples, a difference of "
                f"more than one chunk ({biggest:,} samples at most): imbalanced",
            ))  # fmt: skip
        elif part["ranks"] > 1:
            within = f"sweep {sweep}: ranks read {min(samples):,} to {max(samples):,} samples (within one chunk)"
            checks.append(_check("ok", within))
        steps = sorted({s["minibatches"] for s in ranks})
        if len(steps) > 1:
            checks.append(_check(
                "note", f"sweep {sweep}: ranks take {steps[0]:,} to {steps[-1]:,} minibatches (ranks that step "
                "together, as in DDP, must stop at the fewest)",
            ))  # fmt: skip
        idle = [s for s in plan["shares"] if s["sweep"] == sweep and s["worker"] is not None and not s["minibatches"]]
        checks += [
            _check("warning", f"sweep {sweep}: worker {s['worker']} of rank {s['rank']} gets nothing") for s in idle
        ]
    return checks


def _check(level: str, message: str) -> dict[str, Any]:
    return {"level": level, "message": message}


# ------------------------------------------------------------------------------------------- text
def write_plan(plan: dict[str, Any], out: TextIO) -> None:
    """Writes the plan for people."""
    src, chunks, r = plan["source"], plan["chunks"], plan["randomization"]
    part = plan["partitioning"]
    unit = src["unit"]
    streams = ", ".join(
        f"{s['name']} ({s['format']} {'>= ' * s['dim_lower_bound']}{s['dim']})" for s in src["streams"]
    )
    out.write(f"source     {src['name']} ({' + '.join(src['deserializers'])}): {streams}\n")
    out.write(
        f"index      {_plural(src['sequences'], 'sequence')}, {src['sweep_samples']:,} samples per sweep in "
        f"{_plural(len(chunks['ids']), 'chunk')}; nothing parsed\n"
    )
    out.write(f"samples    {src['samples_counted_as']}\n")
    if unit == "frame":
        out.write(f"frames     frame mode: every frame is a unit of its own ({src['units']:,} per sweep)\n")
    _write_chunks(out, chunks)
    if r["order"] == "off":
        out.write("randomize  off: chunks and sequences in file order\n")
    else:
        kind = "CNTK's exact order (compat)" if r["order"] == "compat" else "default order"
        bucket = f", length buckets of {r['bucket_samples']:,} samples" if r["bucket_samples"] else ""
        out.write(f"randomize  on, {kind}: window {r['window']:,} {r['window_unit']}, seed {r['seed']}{bucket}\n")
    for sweep in plan["sweeps"]:
        order = sweep["chunk_order"]
        shown = ", ".join(map(str, order[:SHOWN_CHUNKS])) + (", ..." if len(order) > SHOWN_CHUNKS else "")
        out.write(
            f"  sweep {sweep['sweep']}  chunk order {shown}; {_plural(sweep['blocks'], 'block')}, each read from at "
            f"most {_plural(sweep['max_chunks_per_block'], 'chunk')}\n"
        )
    ranks, workers = part["ranks"], part["workers"]
    if ranks == 1:
        out.write("partition  1 rank: it reads every sequence\n")
    elif part["by"] == "chunk":
        out.write(
            f"partition  {ranks} ranks by chunk: rank r reads the chunks at randomized positions k with k % {ranks} == "
            "r (other chunks each sweep), each chunk's sequences wherever the window moves them\n"
        )
    else:
        few = f"{_plural(len(chunks['ids']), 'chunk')} < {ranks} ranks"
        why = "randomization is off" if r["order"] == "off" else few
        out.write(
            f"partition  {ranks} ranks by {unit} ({why}): rank r reads the {unit}s at positions p % {ranks} == r of "
            "each sweep's order, from every chunk (each rank parses every chunk)\n"
        )
    split = f", split across the {ranks} ranks" if ranks > 1 else ""
    out.write(f"minibatch  {part['minibatch_size']:,} samples for the job{split}\n")
    if workers > 1:
        out.write(
            f"workers    {workers} DataLoader workers per rank: worker w reads its rank's minibatches w, "
            f"w + {workers}, ... and skips the others unread\n"
        )
    _write_shares(out, plan["shares"], unit, ranks > 1 and part["by"] == "chunk")
    equal = plan.get("equal_steps")
    if equal is not None:
        carry, pad = equal["carry"], equal["pad"]
        out.write(
            f"steps      epoch 0: ranks read {min(carry['own']):,} to {max(carry['own']):,} minibatches; equal steps "
            f"(cntkio.torch's default) carry: {carry['steps']:,} steps each, {sum(carry['carried_out_samples']):,} "
            f"samples carried into epoch 1; pad: {pad['steps']:,} steps each, {sum(pad['padded']):,} empty steps\n"
        )
    for check in plan["checks"]:
        out.write(f"{check['level']:<10} {check['message']}\n")
    out.write(
        f"determinism  a pure function of the index, the seed and options, the ranks, workers and minibatch size: the "
        f"same seed gives the same plan (digest {plan['digest']})\n"
    )


def _write_chunks(out: TextIO, chunks: dict[str, Any]) -> None:
    sizes = chunks["bytes"] if chunks["bytes"] is not None else ["?"] * len(chunks["ids"])
    rows = [[str(c), _number(b), f"{n:,}", f"{s:,}"] for c, b, n, s in
            zip(chunks["ids"], sizes, chunks["sequences"], chunks["samples"])]  # fmt: skip
    if len(rows) > SHOWN_CHUNKS:
        rows = [*rows[: SHOWN_CHUNKS - 2], ["...", "", "", ""], *rows[-2:]]
    if len(chunks["ids"]) > 1:
        rows.append(["all"] + [_spread(values) for values in (chunks["bytes"], chunks["sequences"], chunks["samples"])])
    _write_table(out, ["chunk", "bytes", "sequences", "samples"], rows)


def _write_shares(out: TextIO, shares: list[dict[str, Any]], unit: str, list_chunks: bool) -> None:
    rows = []
    for s in shares:
        keys = ", ".join(_show_key(source, key, shares) for source, key in s["first_keys"])
        chunks = len(s["chunks"])
        if list_chunks and s["worker"] is None:
            listed = ",".join(map(str, s["chunks"][:SHOWN_CHUNKS]))
            chunks_text = f"{chunks} ({listed}{',...' if chunks > SHOWN_CHUNKS else ''})"
        else:
            chunks_text = str(chunks)
        worker = "-" if s["worker"] is None else str(s["worker"])
        rows.append([str(s["sweep"]), str(s["rank"]), worker, f"{s['minibatches']:,}", f"{s['units']:,}",
                     f"{s['samples']:,}", chunks_text, keys])  # fmt: skip
    _write_table(out, ["sweep", "rank", "worker", "minibatches", f"{unit}s", "samples", "chunks", "first keys"], rows)


def _show_key(source: str, key: Any, shares: list[dict[str, Any]]) -> str:
    text = "/".join(map(str, key)) if isinstance(key, list) else str(key)
    if len(text) > KEY_CHARS:
        text = text[: KEY_CHARS - 3] + "..."
    several = len({s for share in shares for s, _ in share["first_keys"]}) > 1
    return f"{os.path.basename(source)}:{text}" if several else text


def _write_table(out: TextIO, header: list[str], rows: list[list[str]]) -> None:
    table = [header, *rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    last = len(header) - 1
    for row in table:
        cells = [cell.ljust(w) if i in (0, last) else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths))]
        out.write("  " + "  ".join(cells).rstrip() + "\n")


def _number(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) else str(value)


def _spread(values: list[int] | None) -> str:
    if not values:
        return "?"
    return f"{sum(values):,} ({min(values):,}..{max(values):,})"


def _plural(count: int, noun: str) -> str:
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


# ------------------------------------------------------------------------------------------- command line
def add_command(commands: Any) -> None:
    """Adds ``cntkio explain`` to the command line's subparsers."""
    command = commands.add_parser(
        "explain",
        help="print the reading plan (chunks, windows, what each rank and worker reads) without parsing the data",
        description="Print how a reader would read its data, from the index alone (no value is parsed): the chunks, "
        "each sweep's randomization, and what every rank and DataLoader worker reads per sweep (minibatches, "
        "sequences, samples, chunks, first keys), with imbalance flagged. The plan comes from the library's own "
        "cursor, so it is what a run with the same options reads. FILE is a CTF or CBF file (streams inferred); "
        "CONFIG (a .cntk file, or --section given) is a BrainScript config whose reader section builds the source.",
    )
    command.add_argument("path", metavar="CONFIG|FILE", help="a BrainScript config, or a CTF or CBF file")
    command.add_argument("--ranks", type=positive_int, default=1, help="data partitions (torch.distributed world size)")
    command.add_argument("--workers", type=positive_int, default=1, help="DataLoader workers per rank (default 1)")
    command.add_argument("--sweeps", type=positive_int, default=1, help="sweeps to plan (default 1)")
    command.add_argument(
        "--minibatch-size", metavar="M", type=positive_int, default=None,
        help="samples per minibatch for the whole job, split across ranks (default: a CONFIG's, the minibatchSize "
        f"of the SGD section beside its reader section, as cntkio read takes it; else {DEFAULT_MINIBATCH_SIZE})",
    )  # fmt: skip
    command.add_argument(
        "--keys", metavar="N", type=positive_int, default=FIRST_KEYS, help="first keys shown per reader"
    )
    command.add_argument("--seed", type=int, default=None, help="randomization seed (default: 0, or the CONFIG's)")
    command.add_argument(
        "--window", metavar="CHUNKS", type=int, default=None,
        help=f"randomization window in chunks, 0 = no randomization (default: "
        f"{DEFAULT_RANDOMIZATION_WINDOW_IN_CHUNKS}, or the CONFIG's)",
    )  # fmt: skip
    command.add_argument("--chunk-size", metavar="BYTES", type=positive_int, help="FILE (CTF): chunk size in bytes")
    command.add_argument("--section", metavar="S", help="CONFIG: the reader section (default 'reader')")
    add_variable_option(command)
    command.add_argument("--json", action="store_true", help="print the plan as JSON")
    add_progress_option(command, "a progress bar (needs tqdm; default: on a terminal, once planning takes a while)")
    command.set_defaults(handler=run_explain)


def run_explain(args: argparse.Namespace) -> int:
    """Runs ``cntkio explain``; returns the exit status (0, or 2 for a usage or I/O error)."""
    try:
        source, minibatch_size = _open_source(args)
    except (OSError, CNTKIOError, ImportError, ValueError) as e:
        return fail("explain", cannot_read(e, args.path) if isinstance(e, OSError) and e.strerror else str(e))
    try:
        plan = _plan_with_progress(source, args, minibatch_size)
    except (CNTKIOError, ValueError) as e:
        return fail("explain", str(e))
    finally:
        close_source(source)
    if args.json:
        write_json(plan)
    else:
        write_plan(plan, sys.stdout)
    return 0


def _plan_with_progress(source: MinibatchSource, args: argparse.Namespace, minibatch_size: int) -> dict[str, Any]:
    total = args.ranks * args.sweeps * source.sweep_size
    with progress.bar(args.progress, total, "planning", unit="sample") as advance:
        return explain(
            source, ranks=args.ranks, workers=args.workers, sweeps=args.sweeps, minibatch_size=minibatch_size,
            first_keys=args.keys, advance=advance, dims_inferred=dims_inferred(args.path, args.section),
        )  # fmt: skip


def _open_source(args: argparse.Namespace) -> tuple[MinibatchSource, int]:
    """The source to plan, and the minibatch size to plan with (``--minibatch-size``, else a config's)."""
    path: str = args.path
    if args.window is not None and args.window < 0:
        raise ValueError(f"--window must be >= 0, got {args.window}")
    if is_config(path, args.section):
        if args.chunk_size is not None:
            raise ValueError("--chunk-size applies to a FILE; a CONFIG's reader section sets chunkSizeInBytes")
        from cntkio._src.config.brainscript import load_config

        overrides: dict[str, Any] = {"prefetch": False}  # (what the config sets, unless given here)
        if args.seed is not None:
            overrides["randomization_seed"] = args.seed
        if args.window is not None:
            overrides.update(
                randomization_window_in_chunks=args.window, randomization_window_in_samples=0, randomize=args.window > 0
            )
        config = load_config(path, list(args.var) or None)
        section = args.section or "reader"
        source = open_source(config, section=section, **overrides)
        size = args.minibatch_size or sgd_minibatch_size(config, section) or DEFAULT_MINIBATCH_SIZE
        return source, size
    if args.var:
        raise ValueError("--var applies to a CONFIG")
    source = source_for_file(
        path, seed=args.seed or 0, sweeps=args.sweeps, chunk_size_in_bytes=args.chunk_size,
        window=DEFAULT_RANDOMIZATION_WINDOW_IN_CHUNKS if args.window is None else args.window,
    )  # fmt: skip
    return source, args.minibatch_size or DEFAULT_MINIBATCH_SIZE


def source_for_file(
    path: str, *, seed: int = 0, window: int = DEFAULT_RANDOMIZATION_WINDOW_IN_CHUNKS, sweeps: int = 1,
    chunk_size_in_bytes: int | None = None,
) -> MinibatchSource:  # fmt: skip
    """A source of every stream of a CTF or CBF file (:func:`cntkio._src.cli.common.open_source`), as ``cntkio
    explain`` plans it: ``sweeps`` sweeps, randomized over ``window`` chunks (0: file order) with ``seed``."""
    return open_source(
        path, chunk_size_in_bytes=chunk_size_in_bytes, max_sweeps=sweeps, randomization_window_in_chunks=window,
        randomization_seed=seed, randomize=window > 0, prefetch=False,
    )  # fmt: skip
