"""``cntkio read CONFIG [--section S]``: reads a BrainScript reader section end to end, epoch by epoch, as CNTK's
training loop did (``epochSize`` samples per epoch, ``maxEpochs`` epochs from the ``SGD`` section beside the reader),
and prints what each epoch delivered: minibatches, sequences, samples per stream, errors counted, time and rate.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from cntkio._src.api.source import MinibatchSource
from cntkio._src.cli.common import (
    add_progress_option,
    add_variable_option,
    close_source,
    open_source,
    sgd_minibatch_size,
    sgd_section,
    write_json,
)
from cntkio._src.common import progress
from cntkio._src.common.errors import CNTKIOError, FormatError

DEFAULT_MINIBATCH_SIZE = 1024


def add_command(commands: Any) -> None:
    """Adds ``cntkio read`` to the command line's subparsers."""
    command = commands.add_parser(
        "read",
        help="read a BrainScript reader section end to end and print per-epoch statistics",
        description="Load the reader section of a CNTK config (.cntk) and read it as CNTK's training loop did: epoch "
        "e covers samples [e*epochSize, (e+1)*epochSize) of the endlessly repeated corpus (epochSize 0: one sweep), "
        "for maxEpochs epochs (both from the SGD section beside the reader unless given). Exit status: 0 read, "
        "1 the data has errors, 2 a config or I/O error.",
    )
    command.add_argument("config", metavar="CONFIG", help="a BrainScript config file")
    command.add_argument("--section", default="reader", help="dotted path of the reader section (default 'reader')")
    add_variable_option(command)
    command.add_argument("--epochs", type=int, help="epochs to read (default: the SGD section's maxEpochs, else 1)")
    command.add_argument(
        "--minibatch-size", type=int, help=f"samples per minibatch (default: the SGD section's minibatchSize, else "
        f"{DEFAULT_MINIBATCH_SIZE})",
    )  # fmt: skip
    command.add_argument("--base-dir", help="where relative data paths resolve (default: the current directory)")
    command.add_argument("--json", action="store_true", help="print the statistics as JSON")
    add_progress_option(command, "a progress bar (needs tqdm; default: on a terminal, once reading takes a while)")
    command.set_defaults(handler=run_read)


def run_read(args: argparse.Namespace) -> int:
    """Runs ``cntkio read``; returns the exit status."""
    from cntkio._src.config.brainscript import load_config

    variables = list(args.var) or None
    try:
        config = load_config(args.config, variables)
        source = open_source(config, section=args.section, base_dir=args.base_dir)
    except (OSError, CNTKIOError, ValueError) as error:
        print(f"cntkio read: {error}", file=sys.stderr)
        return 2
    try:
        epochs, minibatch_size = _training_loop(config, args)
    except (OSError, CNTKIOError, ValueError) as error:
        close_source(source)
        print(f"cntkio read: {error}", file=sys.stderr)
        return 2
    report: dict[str, Any] = {"config": args.config, "section": args.section, "minibatch_size": minibatch_size}
    try:
        streams = source.stream_infos()
        report["streams"] = {i.name: {"shape": list(i.shape), "format": i.storage_format} for i in streams}
        report["epoch_size"] = None if source.is_infinite() else int(source.epoch_size)
        report["epochs"] = [_read_epoch(source, epoch, minibatch_size, args) for epoch in range(epochs)]
        report["stages"] = str(source.stats())
    except FormatError as error:
        print(f"cntkio read: {error}", file=sys.stderr)
        return 1
    except (OSError, CNTKIOError) as error:
        print(f"cntkio read: {error}", file=sys.stderr)
        return 2
    finally:
        close_source(source)
    if args.json:
        write_json(report)
    else:
        _print(report)
    return 1 if any(epoch["errors"] for epoch in report["epochs"]) else 0


def _training_loop(config: Any, args: argparse.Namespace) -> tuple[int, int]:
    """Epochs and minibatch size: the arguments, else the ``SGD`` section beside the reader, else 1 and 1024."""
    sgd = sgd_section(config, args.section)
    epochs = args.epochs
    if epochs is None:
        value = None if sgd is None else sgd.get("maxEpochs")
        epochs = 1 if value is None else value.as_int()
    size = args.minibatch_size
    if size is None:
        configured = sgd_minibatch_size(config, args.section)
        size = DEFAULT_MINIBATCH_SIZE if configured is None else configured
    if epochs < 1 or size < 1:
        raise ValueError(f"epochs and minibatch size must be >= 1, got {epochs} and {size}")
    return epochs, size


def _read_epoch(source: MinibatchSource, epoch: int, minibatch_size: int, args: argparse.Namespace) -> dict[str, Any]:
    if not source.is_infinite():
        source.start_epoch(epoch)
    errors_before = _errors(source)
    samples = dict.fromkeys(source.streams, 0)
    minibatches = sequences = 0
    started, cpu = time.perf_counter(), time.process_time()
    total = 0 if source.is_infinite() else int(source.epoch_size)
    with progress.bar(args.progress, total, f"epoch {epoch}", unit="sample") as advance:
        while minibatch := source.next_minibatch(minibatch_size):
            minibatches += 1
            for name in samples:
                samples[name] += minibatch[name].num_samples
            sequences += max(minibatch[name].num_sequences for name in samples)
            advance(max(minibatch[name].num_samples for name in samples))
    seconds = time.perf_counter() - started
    return {
        "epoch": epoch,
        "minibatches": minibatches,
        "sequences": sequences,
        "samples": samples,
        "errors": _errors(source) - errors_before,
        "seconds": round(seconds, 4),
        "cpu_seconds": round(time.process_time() - cpu, 4),
        "samples_per_second": round(max(samples.values(), default=0) / seconds) if seconds > 0 else None,
    }


def _errors(source: MinibatchSource) -> int:
    """Errors counted so far (bad records skipped under max_errors) by the reader's deserializers."""
    return sum(getattr(getattr(d, "errors", None), "count", 0) for d in source.deserializers)


def _print(report: dict[str, Any]) -> None:
    streams = ", ".join(f"{name} {s['format']} {s['shape']}" for name, s in report["streams"].items())
    epoch_size = report["epoch_size"]
    print(f"{report['config']} [{report['section']}]: streams {streams}")
    size = "infinite" if epoch_size is None else epoch_size
    print(f"epoch size {size} samples, minibatch {report['minibatch_size']}")
    for epoch in report["epochs"]:
        samples = ", ".join(f"{name} {count}" for name, count in epoch["samples"].items())
        rate = epoch["samples_per_second"]
        print(
            f"epoch {epoch['epoch']}: {epoch['minibatches']} minibatches, {epoch['sequences']} sequences, samples: "
            f"{samples}; {epoch['errors']} errors; {epoch['seconds']:.3f} s ({epoch['cpu_seconds']:.3f} CPU s)"
            + (f", {rate} samples/s" if rate else "")
        )
    print(report["stages"])
