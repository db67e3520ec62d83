"""Minibatch assembly: one native gather per minibatch copies the selected units (sequences, frames or
BPTT pieces) of every deserializer from the loaded chunks into fresh flat buffers; Python wraps them as
MinibatchData."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

import numpy as np

from cntkio import _native
from cntkio._src.assemble.minibatch import Minibatch, MinibatchData, Provenance
from cntkio._src.common.errors import CNTKIOError
from cntkio._src.common.keys import shorten
from cntkio._src.corpus.table import SWEEP_VERSIONS, Corpus, LoadKey

logger = logging.getLogger("cntkio")

SEQUENCES, FRAMES, PIECES = 0, 1, 2
MAX_LOAD_ROUNDS = 3  # the primary's chunks, then the secondaries' (a third round only if one was dropped meanwhile)


class Assembler:
    """Builds minibatches of a corpus from the chunks in ``store`` (the native chunk store); ``ensure`` loads chunks
    the store lacks and waits for them (the chunk cache's)."""

    def __init__(self, corpus: Corpus, store: _native.ChunkStore, ensure: Callable[[Iterable[LoadKey]], None]):
        self.corpus = corpus
        self.ensure = ensure
        self._sources = [d.source_name for d in corpus.deserializers]
        self.kind = FRAMES if corpus.frame_mode else SEQUENCES
        self.infos = corpus.streams  # deserializer after deserializer, as the native store gathers them
        self.store = store
        self.invalid_units = 0  # units skipped because a counted error left their sequence short
        # Per stream: its information, the sample shape its dense values are reshaped to (None: kept as gathered)
        # and the deserializer it comes from.
        self._layout = [
            (
                info,
                None if info.is_sparse or len(info.shape) == 1 else tuple(info.shape),
                corpus.routing[info.name],
            )
            for info in self.infos
        ]

    def minibatch(
        self,
        units: np.ndarray,
        chunks: np.ndarray,
        end_of_sweep: bool,
        pieces: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
        num_rows: int = 0,
        sweeps: np.ndarray | None = None,
    ) -> Minibatch:
        """Gathers ``units`` (global ids, with their table chunks). ``pieces`` = (offsets, counts, row of
        each piece) for truncated BPTT: then every row of the result holds the pieces of one slot. ``sweeps``
        (each unit's sweep, spanning at most two consecutive sweeps) picks the copies of chunks that vary by
        sweep."""
        offsets, counts, kind = (None, None, self.kind) if pieces is None else (pieces[0], pieces[1], PIECES)
        slots = self.corpus.slots(chunks, sweeps)
        versions = None if sweeps is None else (sweeps % SWEEP_VERSIONS).astype(np.uint8)
        store = self.store
        for _ in range(MAX_LOAD_ROUNDS):
            gathered = store.gather(slots, units, offsets, counts, kind, versions)
            if gathered.missing is None:
                break
            self.ensure(self._loads(gathered.missing, sweeps))  # a chunk first read in this block: load, gather again
        else:
            raise CNTKIOError("chunks needed by a minibatch were dropped while it was read")
        if gathered.short is not None:
            self._raise_short(units, *gathered.short)
        streams, keep = gathered.streams, gathered.keep
        assert streams is not None  # (neither missing nor short: the minibatch)
        if keep is not None:
            kept = keep.astype(bool)
            if not self.invalid_units:  # said once; MinibatchSource.invalid_sequences_skipped keeps the count
                logger.warning("skipping units of sequences that counted errors left short or unusable")
            self.invalid_units += int(len(kept) - np.count_nonzero(kept))
            units = units[kept]
            if pieces is not None:
                pieces = (pieces[0][kept], pieces[1][kept], pieces[2][kept])
        provenance = Provenance(self.corpus.key_names, self._sources, units)
        result = Minibatch()
        result.provenance = provenance
        end_of_sweep = bool(end_of_sweep)
        make = MinibatchData.gathered
        for (info, shape, origin), (values, lengths, indices, indptr) in zip(self._layout, streams):
            if shape is not None:
                values = values.reshape(len(values), *shape)
            starts = None
            if pieces is not None:
                lengths, starts = _rows(lengths, pieces[0], pieces[2], num_rows)
            result[info] = make(info, values, lengths, end_of_sweep, indices, indptr, starts, provenance, origin)
        return result

    def _loads(self, missing: list[tuple[int, int]], sweeps: np.ndarray | None) -> list[LoadKey]:
        """The loads of the missing (deserializer, slot) pairs: with the sweep of the units that need them."""
        if sweeps is None:
            return [(number, slot, 0) for number, slot in missing]
        by_parity = {int(sweep) % SWEEP_VERSIONS: int(sweep) for sweep in np.unique(sweeps).tolist()}
        loads = []
        for number, slot in missing:
            versions = self.corpus.versions[number]
            loads.append((number, slot, by_parity[slot % versions] if versions > 1 else 0))
        return loads

    def _raise_short(self, units: np.ndarray, unit: int, stream: int, row: int) -> None:
        info = self.infos[stream]
        source, key, steps = self.corpus.describe_unit(int(units[unit]), self.corpus.routing[info.name])
        raise CNTKIOError(
            f"{source}: input '{info.alias or info.name}' of sequence {shorten(key)} has fewer samples than the "
            f"sequence's {steps} steps; frame mode and truncated BPTT need a sample of every stream at every step"
        )


def _rows(lengths: np.ndarray, offsets: np.ndarray, rows: np.ndarray, num_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-row sample counts of BPTT pieces, and per flat sample whether it starts a sequence."""
    row_lengths = np.bincount(rows, weights=lengths, minlength=num_rows).astype(np.int64)
    starts = np.zeros(int(lengths.sum()), dtype=bool)
    first = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=first[1:])
    begins = (offsets == 0) & (lengths > 0)
    starts[first[:-1][begins]] = True
    return row_lengths, starts
