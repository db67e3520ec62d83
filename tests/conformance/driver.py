"""Replays CNTK's ``HelperRunReaderTest`` with cntkio and writes its control-file text.

Control format (corpus README §1): for each epoch ``e`` the samples ``[e*epoch_size, (e+1)*epoch_size)``
of the endlessly repeated corpus, at most 10 minibatches per epoch; per minibatch the ``features*``
then ``labels*`` matrices; per matrix the sequences packed first-fit into rows, printed time-major
(one line per non-gap column, values ``%g`` with 6 significant digits), sparse data densified.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from cntkio import (
    DEFAULT_RANDOMIZATION_WINDOW_IN_CHUNKS,
    CBFDeserializer,
    CTFDeserializer,
    Deserializer,
    MinibatchData,
    MinibatchSource,
    StreamDef,
    StreamDefs,
)

from .corpus import Case, corpus_dir


def stream_defs(case: Case) -> Any:
    """``StreamDefs`` from the case's ``streams`` (name, alias, dim, format, definesMbSize)."""
    return StreamDefs(
        **{
            s["name"]: StreamDef(
                field=s["alias"],
                shape=s["dim"],
                is_sparse=s["format"] == "sparse",
                defines_mb_size=bool(s.get("definesMbSize")),
            )
            for s in case["streams"]
        }
    )


def matrix_names(params: dict[str, Any]) -> list[str]:
    """The helper's write order: ``features`` or ``features1..N``, then ``labels`` or ``labels1..M``."""
    names = []
    for prefix in ("features", "labels"):
        count = params[f"num_{prefix[:-1]}_streams"]
        names += [prefix] if count == 1 else [f"{prefix}{i + 1}" for i in range(count)]
    return names


def format_value(value: float) -> str:
    """C++ ``ostream << value`` with default flags; float32 values arrive widened exactly to double."""
    return format(float(value), ".6g")


def time_major_order(lengths: Sequence[int]) -> list[int]:
    """Flat sample indices in print order: first-fit rows of width max(lengths), time-major, gaps skipped."""
    width = max(lengths, default=0)
    rows: list[list[int]] = []
    start = 0
    for length in lengths:
        samples = range(start, start + length)
        start += length
        row = next((r for r in rows if len(r) + length <= width), None)
        if row is None:
            rows.append(list(samples))
        else:
            row.extend(samples)
    return [row[t] for t in range(width) for row in rows if t < len(row)]


def matrix_lines(data: MinibatchData) -> list[str]:
    """The text lines the helper writes for one stream of one minibatch (none for a minibatch without samples:
    cntkio returns one when every sequence it reached was invalid and skipped)."""
    if data.num_samples == 0:
        return []
    samples = data.csr.toarray() if data.is_sparse else np.asarray(data.values).reshape(data.num_samples, -1)
    order = time_major_order(data.sequence_lengths.tolist())
    return [" ".join(map(format_value, samples[i].tolist())) for i in order]


def make_deserializers(case: Case, *, compat: bool = False) -> list[Deserializer]:
    """One deserializer per data file. A composite case (several files) reads one stream from each, the
    file and the stream at the same place in their lists (the config's ``deserializers`` array). A CBF
    file exposes its own streams (the helper's ``features``/``labels`` matrices are named like them)."""
    files = case["data_files"]
    if case["kind"] == "cbf":
        return [CBFDeserializer(corpus_dir() / files[0], precision=case["reader_config"]["precision"])]
    if len(files) == 1:
        return [make_deserializer(case, files[0], stream_defs(case), compat=compat)]
    streams = list(stream_defs(case).items())
    assert len(streams) == len(files), "a composite case reads one stream per file"
    return [
        make_deserializer(case, file, StreamDefs(**{name: definition}), compat=compat)
        for file, (name, definition) in zip(files, streams)
    ]


def make_deserializer(case: Case, data_file: str, streams: Any, *, compat: bool = False) -> CTFDeserializer:
    config = case["reader_config"]
    return CTFDeserializer(
        corpus_dir() / data_file,  # the CTF reader's options, with CNTK's defaults filled in
        streams,
        max_errors=config["maxErrors"],
        skip_sequence_ids=config["skipSequenceIds"],
        chunk_size_in_bytes=config["chunkSizeInBytes"],
        precision=config["precision"],
        trace_level=config["traceLevel"],
        keep_data_in_memory=config["keepDataInMemory"],
        frame_mode=config["frameMode"],
        compat=compat,
    )


def run_reader_case(
    case: Case,
    *,
    compat: bool = False,
    cntk_random_order: bool = False,
    randomize: bool = False,
    deserializers: Sequence[Deserializer] | None = None,
    randomization_window_in_chunks: int = DEFAULT_RANDOMIZATION_WINDOW_IN_CHUNKS,
) -> str:
    """The control-file text cntkio produces for a ``HelperRunReaderTest`` case.

    Every epoch gets a fresh source that starts at ``e*epoch_size`` (rounded up to the next sequence
    boundary, as CNTK's StartEpoch does) and stops at ``(e+1)*epoch_size``, so a minibatch never crosses
    an epoch boundary and a sequence that starts before the boundary is delivered whole.
    ``randomize=False`` unless ``cntk_random_order``: cases with ``randomize`` on but ``rng_dependent``
    false hold a single sequence or only identical ones (or fail before any order shows), so the order
    cannot matter. ``cntk_random_order`` reads in CNTK's exact block-randomized order (``compat=True`` on
    the source, CNTK's default window of 128 chunks and the case's seed), for the RNG-dependent cases;
    ``randomize`` reads in cntkio's own randomized order (the case's seed).
    ``deserializers`` replaces the ones built from the case's CTF/CBF fields (the image cases build their
    own); ``randomization_window_in_chunks`` is the window the case's reader used.
    """
    names = matrix_names(case["params"])
    lines: list[str] = []
    for minibatch in reader_case_minibatches(
        case,
        make_deserializers(case, compat=compat) if deserializers is None else deserializers,
        cntk_random_order=cntk_random_order,
        randomize=randomize,
        randomization_window_in_chunks=randomization_window_in_chunks,
    ):
        for name in names:
            lines += matrix_lines(minibatch[name])
    return "".join(line + "\n" for line in lines)


def reader_case_minibatches(
    case: Case,
    deserializers: Sequence[Deserializer],
    *,
    cntk_random_order: bool = False,
    randomize: bool = False,
    randomization_window_in_chunks: int = DEFAULT_RANDOMIZATION_WINDOW_IN_CHUNKS,
) -> Iterator[Any]:
    """The minibatches ``HelperRunReaderTest`` writes, epoch after epoch (see :func:`run_reader_case`)."""
    params, config = case["params"], case["reader_config"]
    epoch_size = params["epoch_size"]
    partitions: dict[str, int] = {}
    if params["num_subsets"] > 1:
        partitions = {"num_data_partitions": params["num_subsets"], "partition_index": params["subset_index"]}
    for epoch in range(params["num_epochs"]):
        source = MinibatchSource(
            list(deserializers),
            max_samples=(epoch + 1) * epoch_size,
            randomization_window_in_chunks=randomization_window_in_chunks,
            randomize=cntk_random_order or randomize,
            compat=cntk_random_order,
            randomization_seed=config.get("randomizationSeed", 0),
            trace_level=config.get("traceLevel", 1),
            frame_mode=config.get("frameMode", False),
            prefetch=False,
        )
        try:
            source.restore_from_checkpoint({"minibatchSourcePosition": epoch * epoch_size})
            for _ in range(params["max_minibatches_per_epoch"]):
                minibatch = source.next_minibatch(params["mb_size"], **partitions)
                if not minibatch:
                    break
                yield minibatch
        finally:
            source.close()


def write_generated_input(case: Case, folder: Path, content_suffix: str = "") -> Path:
    """Writes a ``TextParser direct`` case's one-line input under its own file name."""
    generated = case["generated_input"]
    path = folder / generated["file_name"]
    path.write_bytes((generated["content"] + content_suffix).encode("utf-8"))
    return path


def open_generated_input(case: Case, path: Path) -> CTFDeserializer:
    """The deserializer a ``TextParser direct`` case uses: its streams, precision and maxErrors."""
    params = case["params"]
    return CTFDeserializer(
        path,
        stream_defs(case),
        max_errors=params["maxErrors"],
        precision=params["elem_type"],
        trace_level=2,
    )
