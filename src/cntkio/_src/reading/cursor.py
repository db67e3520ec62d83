"""The read cursor: where a partition stands on the endless timeline of sweeps, and which units it takes next.

The cursor walks the blocks of each sweep's order (:mod:`cntkio._src.order`). Its state is the sweep, the
block, the position in the sweep (units) and the sample position of the block, plus, for an elastic
resume, the *layers* of earlier partitionings of the current sweeps: per earlier partition, the
position up to which it had read, so that nothing it read is read again.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from cntkio._src.common.arrays import exclusive_cumsum
from cntkio._src.common.errors import ConfigError
from cntkio._src.corpus.table import Corpus
from cntkio._src.order import Block, Randomization, SweepOrder

ALL_CONSUMED = 2**62  # a layer cursor past every position: that partition read its whole share
SINGLE = (1, 0)  # the partitioning of a cursor that reads every unit
CHAIN_READS = 64  # reads of a block's greedy chain computed at once (see Cursor._chained)
CHAIN_MIN_UNITS = 1024  # ... over at least this many units


class Selection(NamedTuple):
    """The units one read takes, in order, with their table chunks and lengths. ``sweep_ends`` lists, for
    each sweep that ended during the read, how many of the units came before its end; the first unit is of
    sweep ``first_sweep``."""

    units: np.ndarray
    chunks: np.ndarray
    lengths: np.ndarray
    sweep_ends: list[int]
    first_sweep: int = 0

    def sweeps(self) -> np.ndarray:
        """The sweep of every unit (int64)."""
        positions = np.arange(len(self.units), dtype=np.int64)
        return self.first_sweep + np.searchsorted(np.asarray(self.sweep_ends, dtype=np.int64), positions, side="right")


@dataclass(frozen=True)
class _Own:
    """The units of a block this partition reads: their positions in the block (None: every unit), and the
    exclusive cumulative sum of their lengths."""

    positions: np.ndarray | None
    cumulative: np.ndarray

    def position(self, own_index: int) -> int:
        return own_index if self.positions is None else int(self.positions[own_index])

    def take(self, first: int, count: int) -> slice | np.ndarray:
        return slice(first, first + count) if self.positions is None else self.positions[first : first + count]


class Cursor:
    """Position of one partition on the timeline, and selection of the units of the next reads."""

    def __init__(self, corpus: Corpus, randomization: Randomization):
        self.corpus = corpus
        self.randomization = randomization
        self.sweep_size = corpus.sweep_size
        self._orders: OrderedDict[int, SweepOrder] = OrderedDict()
        self._blocks: OrderedDict[tuple[int, int], Block] = OrderedDict()
        self._own_cache: dict[Any, _Own] = {}
        self.sweep = 0
        self.block = 0
        self.offset = 0  # position of the next unit inside the block
        self.unit_base = 0  # position (in units) of the block in its sweep
        self.sample_base = 0  # sample position of the block in its sweep
        self.partitioning: tuple[int, int] | None = None
        self.layers: dict[int, list[tuple[int, list[int]]]] = {}
        # The greedy reads of a block for one budget, from the offsets a read of it starts at: ((sweep, block, budget),
        # the block, {offset: (end, start of the last unit)}); see _chained.
        self._chain: tuple[tuple[int, int, int], Block, dict[int, tuple[int, int]]] | None = None

    # --- orders and blocks -------------------------------------------------------------------------
    def order(self, sweep: int) -> SweepOrder:
        order = self._orders.get(sweep)
        if order is None:
            order = self._orders[sweep] = SweepOrder(self.corpus, self.randomization, sweep)
            while len(self._orders) > 2:
                self._orders.popitem(last=False)
        elif sweep != next(reversed(self._orders)):
            self._orders.move_to_end(sweep)  # least recently used goes first
        return order

    def block_at(self, sweep: int, k: int) -> Block:
        block = self._blocks.get((sweep, k))
        if block is None:
            block = self._blocks[(sweep, k)] = self.order(sweep).block(k)
            while len(self._blocks) > 4:
                self._blocks.popitem(last=False)
        return block

    @property
    def current_block(self) -> Block:
        return self.block_at(self.sweep, self.block)

    @property
    def position(self) -> int:
        """Global sample position of the next unit."""
        return self.sweep * self.sweep_size + self.sample_base + int(self.current_block.starts[self.offset])

    @property
    def unit_position(self) -> int:
        """Position (in units) of the next unit in its sweep."""
        return self.unit_base + self.offset

    def _next_block(self) -> bool:
        """Moves to the start of the next block; returns True when that starts a new sweep."""
        block = self.current_block
        self.unit_base += len(block)
        self.sample_base += block.samples
        self.block += 1
        self.offset = 0
        if self.block < self.order(self.sweep).num_blocks and self.sample_base < self.sweep_size:
            return False  # (once every sample is read, the blocks left are empty: the sweep has ended)
        self.layers.pop(self.sweep, None)
        self.sweep += 1
        self.block = self.unit_base = self.sample_base = 0
        return True

    # --- partitions --------------------------------------------------------------------------------
    def set_partitioning(self, partitions: int, index: int) -> None:
        """Starts a new partitioning layer when the partition count changes mid-sweep."""
        current = self.partitioning
        if current is not None and current[0] != partitions and self.unit_position > 0:
            # Without the other partitions' cursors, assume they all reached this one's position.
            self.layers.setdefault(self.sweep, []).append((current[0], [self.unit_position] * current[0]))
            self._own_cache.clear()
        self.partitioning = (partitions, index)

    def _own(self, block: Block) -> _Own:
        """The units of the current block this partition reads (and no earlier partitioning read)."""
        partitions, index = self.partitioning or (1, 0)
        layers = self.layers.get(self.sweep, [])
        key = (self.sweep, self.block, partitions, index, len(layers))
        own = self._own_cache.get(key)
        if own is not None:
            return own
        if partitions == 1 and not layers:
            own = _Own(None, block.starts)
        else:
            order = self.order(self.sweep)
            positions = self.unit_base + np.arange(len(block), dtype=np.int64)
            mine = np.ones(len(block), dtype=bool)
            if partitions > 1:
                mine &= order.owners(block, positions, partitions) == index
            for old_partitions, cursors in layers:
                owners = order.owners(block, positions, old_partitions)
                mine &= positions >= np.asarray(cursors, dtype=np.int64)[owners]
            kept = np.flatnonzero(mine)
            own = _Own(kept, exclusive_cumsum(block.lengths[kept]))
        if len(self._own_cache) > 8:
            self._own_cache.clear()
        self._own_cache[key] = own
        return own

    # --- reading -----------------------------------------------------------------------------------
    def select(
        self, budget: int, partitions: int, index: int, epoch_end: float, max_sweeps: int | None = None
    ) -> Selection:
        """Takes the next units of this partition: whole units while their samples fit the budget (at
        least one), none at or past ``epoch_end`` (a global sample position), and (``max_sweeps``) from at
        most that many consecutive sweeps."""
        if partitions == 1 and self.partitioning == SINGLE and not self.layers:
            fast = self._chained(budget, epoch_end)
            if fast is not None:
                return fast
        self.set_partitioning(partitions, index)
        first_sweep = first_taken = self.sweep
        pieces: list[tuple[Block, slice | np.ndarray]] = []
        total = taken = 0
        sweep_ends: list[int] = []
        idle_sweeps = 0
        while total < budget:
            if max_sweeps is not None and taken and self.sweep - first_taken >= max_sweeps:
                break
            block = self.current_block
            sweep_base = self.sweep * self.sweep_size + self.sample_base
            if sweep_base + int(block.starts[self.offset]) >= epoch_end:
                break
            own = self._own(block)
            positions = own.positions
            first = self.offset if positions is None else int(positions.searchsorted(self.offset))
            available = len(own.cumulative) - 1 - first
            if available:
                cumulative = own.cumulative
                base = int(cumulative[first])
                fits = int(cumulative.searchsorted(base + budget - total, side="right")) - 1 - first
                if block.cuts is not None:  # length bucketing: a read ends with the bucket of its first unit
                    cut = int(block.cuts[int(block.cuts.searchsorted(own.position(first), side="right"))])
                    fits = min(fits, (cut if positions is None else int(positions.searchsorted(cut))) - first)
                if total == 0:
                    fits = max(fits, 1)  # a unit longer than the budget forms a minibatch of its own
                count = min(fits, available)
                epoch_ends = False
                if count and sweep_base + int(block.starts[own.position(first + count - 1)]) >= epoch_end:
                    starts = sweep_base + block.starts[own.take(first, count)]
                    count, epoch_ends = int(starts.searchsorted(epoch_end, side="left")), True
                if count:
                    if not taken:
                        first_taken = self.sweep
                    pieces.append((block, own.take(first, count)))
                    total += int(cumulative[first + count]) - base
                    taken += count
                if epoch_ends:
                    self.offset = own.position(first + count)  # the first unit past the end
                    break
                if count < available:
                    if count:
                        self.offset = own.position(first + count - 1) + 1
                    break
            self.offset = len(block)
            layered = bool(self.layers.get(self.sweep))  # earlier partitions may have read all of its share
            if self._next_block():
                sweep_ends.append(taken)
                idle_sweeps = 0 if taken or layered else idle_sweeps + 1
                if idle_sweeps > 1:
                    break  # this partition owns no unit at all
            if taken and self.randomization.bucket_samples:
                break  # a length-bucketed read ends with its block: the next block's buckets stay whole
        return self._selection(pieces, sweep_ends, first_sweep)

    def _chained(self, budget: int, epoch_end: float) -> Selection | None:
        """:meth:`select`'s read when the cursor reads every unit (one partition, no layers, no length buckets) and
        the read ends inside the current block, before ``epoch_end``; else None (nothing moved) for the general
        walk. Such reads are the greedy chain of the block: from offset ``o`` the read takes units ``[o, e)``, ``e``
        the last position whose samples from ``o`` fit the budget (at least ``o + 1``), and the next read starts at
        ``e``. The chain is computed for :data:`CHAIN_READS` reads at once (one vectorised search) and kept for the
        block and budget: a read then costs a dictionary lookup and three slices."""
        chain = self._chain
        key = (self.sweep, self.block, budget)
        if chain is None or chain[0] != key:
            if self.randomization.bucket_samples:
                return None
            chain = self._chain = (key, self.current_block, {})
        block, steps = chain[1], chain[2]
        first = self.offset
        step = steps.get(first)
        if step is None:
            computed = self._chain_from(block, first, budget)
            if computed is None:
                return None
            self._chain = (key, block, computed)
            step = computed.get(first)
            if step is None:
                return None
        end, last_start = step
        if self.sweep * self.sweep_size + self.sample_base + last_start >= epoch_end:
            return None  # the epoch ends inside the read (or before it)
        self.offset = end
        return Selection(block.units[first:end], block.chunks[first:end], block.lengths[first:end], [], self.sweep)

    @staticmethod
    def _chain_from(block: Block, first: int, budget: int) -> dict[int, tuple[int, int]] | None:
        """The reads of ``block`` chained from offset ``first`` (see :meth:`_chained`) that end inside it:
        ``{offset: (end, sample offset of the read's last unit)}``; None for a block with length buckets."""
        if block.cuts is not None:
            return None
        size = len(block)
        if first >= size:
            return {}
        starts = block.starts
        per_read = max(1, budget * size // max(1, block.samples))  # units of an average read
        stop = min(size, first + max(CHAIN_MIN_UNITS, CHAIN_READS * per_read))
        ends = starts.searchsorted(starts[first:stop] + budget, side="right") - 1
        np.maximum(ends, np.arange(first + 1, stop + 1, dtype=ends.dtype), out=ends)
        ends_list = ends.tolist()
        lasts = starts[ends - 1].tolist()
        steps: dict[int, tuple[int, int]] = {}
        at = first
        while at < stop:
            end = ends_list[at - first]
            if end >= size:
                break  # the read takes the rest of the block and goes on: the general walk's
            steps[at] = (end, lasts[at - first])
            at = end
        return steps

    @staticmethod
    def _selection(
        pieces: list[tuple[Block, slice | np.ndarray]], sweep_ends: list[int], first_sweep: int
    ) -> Selection:
        if len(pieces) == 1:
            block, chosen = pieces[0]
            return Selection(block.units[chosen], block.chunks[chosen], block.lengths[chosen], sweep_ends, first_sweep)
        if not pieces:
            empty = np.zeros(0, dtype=np.int64)
            return Selection(empty, empty.astype(np.int32), empty, sweep_ends, first_sweep)
        return Selection(
            np.concatenate([b.units[c] for b, c in pieces]),
            np.concatenate([b.chunks[c] for b, c in pieces]),
            np.concatenate([b.lengths[c] for b, c in pieces]),
            sweep_ends,
            first_sweep,
        )

    def upcoming_chunks(self, blocks: int, epoch_end: float) -> list[tuple[int, np.ndarray]]:
        """The chunks the current block and the next ``blocks - 1`` blocks need, block by block, with the
        block's sweep (this partition's only, when partitions are chunk-level); none of sweeps that start at
        ``epoch_end``."""
        result: list[tuple[int, np.ndarray]] = []
        if self.position >= epoch_end:
            return result
        sweep, k = self.sweep, self.block
        partitions, index = self.partitioning or (1, 0)
        for _ in range(blocks):
            order = self.order(sweep)
            if k >= order.num_blocks:
                sweep, k = sweep + 1, 0
                if sweep * self.sweep_size >= epoch_end:
                    break
                order = self.order(sweep)
            chunks = order.needed_chunks(k)
            if partitions > 1 and order.chunk_level(partitions):
                chunks = chunks[order.chunk_rank[chunks] % partitions == index]
            result.append((sweep, chunks))
            k += 1
        return result

    # --- state -------------------------------------------------------------------------------------
    def mark(self) -> tuple[Any, ...]:
        """A cheap snapshot of the position, to :meth:`rewind` to when a read fails after selecting."""
        layers = {s: [(n, list(c)) for n, c in entries] for s, entries in self.layers.items()} if self.layers else {}
        return (self.sweep, self.block, self.offset, self.unit_base, self.sample_base, self.partitioning, layers)

    def rewind(self, mark: tuple[Any, ...]) -> None:
        """Back to ``mark`` (which stays valid: a mark may be rewound to again)."""
        self.sweep, self.block, self.offset, self.unit_base, self.sample_base, self.partitioning, layers = mark
        self.layers = {s: [(n, list(c)) for n, c in entries] for s, entries in layers.items()} if layers else {}
        if self._own_cache:
            self._own_cache.clear()

    def get_state(self) -> dict[str, Any]:
        return {
            "sweep": self.sweep,
            "block": self.block,
            "position": self.unit_position,
            "block_position": self.unit_base,
            "block_samples": self.sample_base,
            "partitioning": list(self.partitioning) if self.partitioning else None,
            "layers": {str(s): [[n, list(c)] for n, c in layers] for s, layers in self.layers.items()},
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Restores a state of :meth:`get_state` (already type-checked by the checkpoint layer)."""
        sweep, k = state["sweep"], state["block"]
        order = self.order(sweep)
        if not 0 <= k < order.num_blocks:
            raise ConfigError(f"checkpoint: cursor.block is {k}; allowed [0, {order.num_blocks - 1}] (sweep {sweep})")
        units, samples = order.block_start(k)
        if (state["block_position"], state["block_samples"]) != (units, samples):
            raise ConfigError(
                f"checkpoint: cursor.block_position {state['block_position']} and cursor.block_samples "
                f"{state['block_samples']} must be where block {k} of sweep {sweep} starts: unit {units}, sample "
                f"{samples}"
            )
        block = self.block_at(sweep, k)
        offset = state["position"] - units
        if not 0 <= offset <= len(block):
            raise ConfigError(
                f"checkpoint: cursor.position is {state['position']}; allowed [{units}, {units + len(block)}] "
                f"(block {k} of sweep {sweep})"
            )
        for layer_sweep, layers in state["layers"].items():
            for _, cursors in layers:
                if any(self.corpus.num_units < c != ALL_CONSUMED for c in cursors):
                    raise ConfigError(
                        f"checkpoint: a cursor of cursor.layers[{layer_sweep}] is beyond the sweep's "
                        f"{self.corpus.num_units} units; allowed [0, {self.corpus.num_units}] or {ALL_CONSUMED}"
                    )
        self.sweep, self.block, self.offset = sweep, k, offset
        self.unit_base, self.sample_base = state["block_position"], state["block_samples"]
        self.partitioning = tuple(state["partitioning"]) if state["partitioning"] else None
        self.layers = {int(s): [(n, list(c)) for n, c in layers] for s, layers in state["layers"].items()}
        self._own_cache.clear()

    def seek(self, position: int) -> None:
        """Moves to a global sample position, rounded up to the next unit boundary (CNTK's restore)."""
        sweep, within = divmod(position, self.sweep_size)
        self.sweep, self.block, self.offset, self.unit_base, self.sample_base = sweep, 0, 0, 0, 0
        self.partitioning, self.layers = None, {}
        self._own_cache.clear()
        while True:
            block = self.current_block
            if self.sample_base + block.samples > within:
                self.offset = int(np.searchsorted(block.starts[:-1], within - self.sample_base, side="left"))
                if self.offset < len(block):
                    return
            if self._next_block():
                return
