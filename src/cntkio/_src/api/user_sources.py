"""User-defined sources (``cntk.io`` §8): :class:`MinibatchSourceFromData` walks in-memory arrays in order, as
CNTK's did; :class:`UserMinibatchSource` is the base of a reader written entirely by the user. (The plug-in format,
``UserDeserializer``, is ``formats/user.py``; the arrays are converted and checked by ``formats/stream_data.py``.)

A subclass's methods are never replaced: its ``next_minibatch`` is called as the user wrote it (CNTK's convention),
wherever it is called; :meth:`UserMinibatchSource.read_minibatch` takes either calling convention, calls it and
checks what it returns.
"""

from __future__ import annotations

import abc
import dataclasses
import math
from collections.abc import Iterator, Mapping
from functools import cached_property
from typing import Any

import numpy as np

from cntkio._src.assemble.minibatch import Minibatch, MinibatchData
from cntkio._src.common.arrays import exclusive_cumsum
from cntkio._src.common.errors import ConfigError
from cntkio._src.common.sentinels import FULL_DATA_SWEEP, INFINITELY_REPEAT
from cntkio._src.common.streams import Record, StreamInformation
from cntkio._src.formats.protocol import DenseStream, StreamData
from cntkio._src.formats.stream_data import Where, convert, describe, is_csr

__all__ = ["MinibatchSourceFromData", "UserMinibatchSource"]


# --- UserMinibatchSource ----------------------------------------------------------------------------------------
_SIZE_NAMES = ("minibatch_size_in_samples", "num_samples")
_USER_ORDER = ("number_of_workers", "worker_rank", "device")
_SOURCE_ORDER = ("input_map", "device", "num_data_partitions", "partition_index")
_ALIASES = {"num_data_partitions": "number_of_workers", "partition_index": "worker_rank"}


def _parse_call(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[int, int, int, Any, Mapping[Any, Any] | None]:
    """``next_minibatch`` arguments in either convention: ``MinibatchSource``'s ``(size, input_map=None,
    device=None, num_data_partitions=None, partition_index=None)`` or ``UserMinibatchSource``'s ``(num_samples,
    number_of_workers, worker_rank, device=None)``. Returns (size, workers, rank, device, input_map)."""
    given: dict[str, Any] = {}

    def put(name: str, value: Any) -> None:
        canonical = _ALIASES.get(name, "size" if name in _SIZE_NAMES else name)
        if canonical in given:
            raise TypeError(f"next_minibatch() got two values for '{canonical}' ({name})")
        given[canonical] = value

    if args:
        put("num_samples", args[0])
        rest = args[1:]
        user_style = bool(rest) and isinstance(rest[0], (int, np.integer)) and not isinstance(rest[0], bool)
        order = _USER_ORDER if user_style else _SOURCE_ORDER
        if len(rest) > len(order):
            raise TypeError(f"next_minibatch() takes at most {len(order) + 1} positional arguments")
        for name, value in zip(order, rest):
            put(name, value)
    for name, value in kwargs.items():
        if name not in (*_SIZE_NAMES, *_USER_ORDER, *_SOURCE_ORDER):
            raise TypeError(f"next_minibatch() got an unexpected keyword argument '{name}'")
        put(name, value)
    if "size" not in given:
        raise TypeError("next_minibatch() needs the minibatch size (minibatch_size_in_samples)")
    size = given["size"]
    workers = 1 if given.get("number_of_workers") is None else given["number_of_workers"]
    rank = 0 if given.get("worker_rank") is None else given["worker_rank"]
    for name, value in (("minibatch size", size), ("number of workers", workers), ("worker rank", rank)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"the {name} must be an integer, got {value!r}")
    if size <= 0:
        raise ValueError(f"minibatch_size_in_samples must be positive, got {size}")
    if workers < 1 or not 0 <= rank < workers:
        raise ValueError(f"invalid worker rank {rank} of {workers} workers")
    return int(size), int(workers), int(rank), given.get("device"), given.get("input_map")


def _checked(source: UserMinibatchSource, result: Any, input_map: Mapping[Any, Any] | None) -> Any:
    """What a source's ``next_minibatch`` returned, checked: ``{}`` at the end; a plain dict as a
    :class:`~cntkio._src.assemble.minibatch.Minibatch`; with ``input_map``, the streams under its keys."""
    if not isinstance(result, Mapping):
        raise TypeError(
            f"{type(source).__name__}.next_minibatch must return a dict of StreamInformation -> MinibatchData, "
            f"got {type(result).__name__}"
        )
    if not result:
        return {}
    for key, data in result.items():  # CNTK's MinibatchData(value, ...) is described by its data: named by its key
        if isinstance(data, MinibatchData) and data.from_value and isinstance(key, StreamInformation):
            data.info = dataclasses.replace(data.info, name=key.name, stream_id=key.stream_id, alias=key.alias)
            data.from_value = False
    if type(result) is dict:  # name lookup (mb["features"]) as MinibatchSource's minibatches have
        result = Minibatch(result)
    if input_map is None:
        return result
    mapped = Minibatch({key: _lookup(result, stream) for key, stream in input_map.items()})
    if hasattr(result, "provenance"):
        mapped.provenance = result.provenance
    return mapped


def _lookup(minibatch: Mapping[Any, Any], stream: Any) -> Any:
    if stream in minibatch:
        return minibatch[stream]
    name = stream if isinstance(stream, str) else getattr(stream, "name", None)
    found = [data for info, data in minibatch.items() if getattr(info, "name", info) == name]
    if len(found) != 1:
        raise KeyError(f"expected exactly one stream named {name!r} in the minibatch, found {len(found)}")
    return found[0]


class UserMinibatchSource(abc.ABC):
    """Base of a reader written entirely in Python (``cntk.io.UserMinibatchSource``).

    Implement ``stream_infos()`` and ``next_minibatch(num_samples, number_of_workers, worker_rank, device=None)``
    returning ``{StreamInformation: MinibatchData}`` (``{}`` at the end). Your ``next_minibatch`` is called as you
    wrote it, wherever it is called (CNTK's convention). :meth:`read_minibatch` (and :meth:`iter_minibatches`) take
    either calling convention (``read_minibatch(64)``, ``read_minibatch(64, 2, 1)``, or ``MinibatchSource``'s
    ``input_map=``, ``num_data_partitions=``, ``partition_index=``), call it as ``(num_samples, number_of_workers,
    worker_rank, device)`` and check what it returns: a plain dict becomes a
    :class:`~cntkio._src.assemble.minibatch.Minibatch`
    (indexable by stream name). For checkpoints override :meth:`get_checkpoint_state` and
    :meth:`restore_from_checkpoint`.

    Code written for CNTK builds ``MinibatchData(cntk.Value.one_hot(...), num_sequences, num_samples, sweep_end)``;
    here the first argument is the data itself (a NumPy array, a SciPy CSR matrix, a list of them with one per
    sequence, or another minibatch's ``Value``: see :class:`~cntkio.MinibatchData`), and :meth:`read_minibatch`
    names such a stream after its ``StreamInformation`` key.

    Example::

        class Counter(UserMinibatchSource):
            def __init__(self):
                self.info, self.next = StreamInformation("n", 0, "dense", np.dtype(np.int64), (1,)), 0

            def stream_infos(self):
                return [self.info]

            def next_minibatch(self, num_samples, number_of_workers, worker_rank, device=None):
                values = np.arange(self.next, self.next + num_samples)[worker_rank::number_of_workers, None]
                self.next += num_samples
                return {self.info: MinibatchData(self.info, values, np.ones(len(values)), False)}

            def get_checkpoint_state(self):
                return {"next": self.next}

            def restore_from_checkpoint(self, state):
                self.next = state["next"]

        Counter().read_minibatch(8)["n"].asarray()
    """

    def __init__(self) -> None:  # noqa: B027 (not abstract: CNTK's subclasses call it)
        """Nothing to set up (subclasses may call it, as CNTK's required)."""

    @abc.abstractmethod
    def stream_infos(self) -> list[StreamInformation]:
        """The streams this source produces."""

    @abc.abstractmethod
    def next_minibatch(
        self, num_samples: int, number_of_workers: int, worker_rank: int, device: Any = None
    ) -> Mapping[Any, Any]:
        """``{StreamInformation: MinibatchData}`` of about ``num_samples`` samples for worker ``worker_rank`` of
        ``number_of_workers``, or ``{}`` when the source is exhausted."""

    def read_minibatch(self, *args: Any, **kwargs: Any) -> Any:
        """:meth:`next_minibatch` called with either convention: ``MinibatchSource``'s ``(minibatch_size_in_samples,
        input_map=None, device=None, num_data_partitions=None, partition_index=None)`` or CNTK's ``(num_samples,
        number_of_workers, worker_rank, device=None)``; what it returns is checked (a dict; ``{}`` at the end) and a
        plain dict becomes a :class:`~cntkio._src.assemble.minibatch.Minibatch`, its streams under ``input_map``'s keys
        if given."""
        size, workers, rank, device, input_map = _parse_call(args, kwargs)
        return _checked(self, self.next_minibatch(size, workers, rank, device), input_map)

    @cached_property
    def streams(self) -> Record:
        """A :class:`~cntkio.Record` from stream name to :class:`~cntkio.StreamInformation`."""
        return Record({info.name: info for info in self.stream_infos()})

    def stream_info(self, name: str) -> StreamInformation:
        """The stream named ``name``; a KeyError unless exactly one stream has that name."""
        matches = [info for info in self.stream_infos() if info.name == name]
        if len(matches) != 1:
            raise KeyError(f"expected exactly one stream named {name!r}, found {len(matches)}")
        return matches[0]

    def __getitem__(self, name: str) -> StreamInformation:
        return self.stream_info(name)

    def get_checkpoint_state(self) -> dict[str, Any]:
        """A dict with string keys describing the position; ``{}`` unless overridden."""
        return {}

    def restore_from_checkpoint(self, state: Mapping[str, Any]) -> None:
        """Continues from a state of :meth:`get_checkpoint_state`; the default accepts only an empty state."""
        if state:
            raise NotImplementedError(
                f"{type(self).__name__} cannot restore a checkpoint: implement restore_from_checkpoint(state)"
            )

    @property
    def current_position(self) -> dict[str, Any]:
        """Alias of :meth:`get_checkpoint_state` / :meth:`restore_from_checkpoint`."""
        return self.get_checkpoint_state()

    @current_position.setter
    def current_position(self, state: Mapping[str, Any]) -> None:
        self.restore_from_checkpoint(state)

    def is_infinite(self) -> bool:
        """Whether the source never ends; False unless overridden."""
        return False

    def iter_minibatches(self, minibatch_size_in_samples: int, **kwargs: Any) -> Iterator[Mapping[Any, Any]]:
        """Yields minibatches (:meth:`read_minibatch`, the same arguments) until the source returns ``{}``."""
        while minibatch := self.read_minibatch(minibatch_size_in_samples, **kwargs):
            yield minibatch


# --- MinibatchSourceFromData ------------------------------------------------------------------------------------
class _ItemProvenance:
    """``sequence_keys`` of a minibatch of :class:`MinibatchSourceFromData`: ``(source, item number)``."""

    def __init__(self, source: str, items: np.ndarray):
        self.items = items
        self._source = source

    @property
    def keys(self) -> list[tuple[str, Any]]:
        return [(self._source, item) for item in self.items.tolist()]

    def keys_in(self, deserializer: int) -> list[tuple[str, Any]]:
        del deserializer
        return self.keys

    @property
    def sources(self) -> list[str]:
        return [self._source]


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """``concatenate([arange(s, s + n) for s, n in zip(starts, lengths)])``, vectorised."""
    offsets = exclusive_cumsum(lengths)
    return np.repeat(starts - offsets[:-1], lengths) + np.arange(int(offsets[-1]), dtype=np.int64)


def _is_sequence_type(kind: Any) -> bool:
    """CNTK's typed form ``(data, Sequence[Tensor[...]])``: a type with a sequence axis besides the batch axis."""
    axes = getattr(kind, "dynamic_axes", None)
    return axes is not None and len(axes) > 1


class MinibatchSourceFromData(UserMinibatchSource):
    """In-memory data as a source (``cntk.io.MinibatchSourceFromData``): no randomization; items are read in order
    and the source wraps around at the end.

    ``data_streams`` maps stream names to data: a NumPy array ``(num_items, *shape)`` or a SciPy CSR matrix
    ``(num_items, dim)`` (sample mode: every item one sample), or a list of arrays ``(length, *shape)`` / CSR
    matrices ``(length, dim)`` (sequence mode: item i a sequence); CNTK's ``(data, type)`` pairs are accepted (a
    type with a sequence axis makes an array's rows sequences). Every stream has the same number of items; a
    stream's dtype and sample shape are its data's (other list elements are cast only losslessly).

    Each minibatch holds whole items, at least one, and stops before the largest of the streams' summed lengths
    would pass the request or ``max_samples`` (``FULL_DATA_SWEEP``: one pass over the items); it never wraps around
    inside a minibatch (the minibatch ending the data has ``end_of_sweep``). Distributed, worker r of N reads
    ``items[begin + r:end + r:N]`` of the minibatch ``items[begin:end]`` all workers step over (CNTK's rule). The
    checkpoint is ``{'cursor', 'total_num_samples'}``. Sample-mode arrays are read in place (pass a copy to change
    them meanwhile); sequence-mode lists are concatenated once; minibatches are fresh arrays. ``sequence_keys``
    are item numbers.

    Example::

        source = MinibatchSourceFromData({"x": np.arange(15, dtype=np.float32).reshape(5, 3)}, max_samples=5)
        source.next_minibatch(3)[source.streams.x].asarray()  # items 0-2, then 3-4, then {}
        words = [np.ones((3, 10), np.float32), np.ones((2, 10), np.float32)]  # two sequences
        source = MinibatchSourceFromData({"words": words, "label": np.eye(2, dtype=np.float32)})
    """

    def __init__(self, data_streams: Mapping[str, Any], max_samples: int = INFINITELY_REPEAT):
        super().__init__()
        if not isinstance(data_streams, Mapping) or not data_streams:
            raise ConfigError("at least one stream must be given, as {name: data} or {name: (data, type)}")
        source = type(self).__name__
        self._infos: list[StreamInformation] = []
        self._data: list[StreamData] = []
        per_stream: list[np.ndarray] = []
        self._sequence_mode: list[bool] = []  # per stream: items are sequences (else samples: no sequence axis)
        for number, (name, given) in enumerate(data_streams.items()):
            value, sequences = given, isinstance(given, (list, tuple))
            if isinstance(given, tuple):
                if len(given) != 2:
                    raise ConfigError(f"stream '{name}': a tuple must be (data, type)")
                value, kind = given
                sequences = isinstance(value, (list, tuple)) or _is_sequence_type(kind)
                if sequences and isinstance(value, np.ndarray):
                    value = list(value)
            info = self._infer_stream(str(name), number, value, sequences)
            where = Where(source, None, info.name)
            stream, lengths = convert(list(value) if sequences else value, info, "safe", where)
            self._infos.append(info)
            self._data.append(stream)
            self._sequence_mode.append(bool(sequences))
            per_stream.append(lengths)
        counts = {info.name: len(lengths) for info, lengths in zip(self._infos, per_stream)}
        if len(set(counts.values())) != 1:
            raise ConfigError(f"every stream must have the same number of items, got {counts}")
        self.num_items = len(per_stream[0])
        self._stream_lengths = per_stream
        self._cumulative = [exclusive_cumsum(lengths) for lengths in per_stream]
        sweep = max(int(c[-1]) for c in self._cumulative)
        self.sweep_size = sweep
        self._max_samples = max_samples
        if max_samples == FULL_DATA_SWEEP:
            self._limit: float = sweep
        elif max_samples is None or max_samples == INFINITELY_REPEAT or max_samples == math.inf:
            self._limit = math.inf
        elif isinstance(max_samples, bool) or not isinstance(max_samples, (int, np.integer)) or max_samples < 0:
            raise ConfigError(f"max_samples must be an integer >= 0, got {max_samples!r}")
        else:
            self._limit = int(max_samples)
        self._cursor = 0
        self._total_num_samples = 0

    @staticmethod
    def _infer_stream(name: str, number: int, value: Any, sequences: bool) -> StreamInformation:
        """The stream of some data: sparse when it is CSR; its dtype and sample shape (of the first item)."""
        if sequences:
            items = list(value)
            if not items:
                raise ConfigError(f"stream '{name}': the data is empty")
            first = items[0]
            if not (isinstance(first, np.ndarray) or is_csr(first)):
                raise ConfigError(
                    f"stream '{name}': sequences must be NumPy arrays or CSR matrices, got {describe(first)}"
                )
            if first.ndim < 1:
                raise ConfigError(f"stream '{name}': a sequence must be an array (length, *shape), got a scalar")
            sample_shape = tuple(first.shape[1:])
        else:
            first = value
            if not (isinstance(first, np.ndarray) or is_csr(first)):
                raise ConfigError(
                    f"stream '{name}': data must be a NumPy array, a SciPy CSR matrix or a list of them, "
                    f"got {describe(first)}"
                )
            if first.ndim < 1 or first.shape[0] == 0:
                raise ConfigError(f"stream '{name}': the data is empty")
            sample_shape = tuple(first.shape[1:])
        sparse = is_csr(first)
        dtype = np.dtype(first.dtype)
        return StreamInformation(name, number, "sparse" if sparse else "dense", dtype, sample_shape)

    def stream_infos(self) -> list[StreamInformation]:
        return list(self._infos)

    def is_infinite(self) -> bool:
        """True unless ``max_samples`` is set."""
        return self._limit == math.inf

    def next_minibatch(self, *args: Any, **kwargs: Any) -> Minibatch | dict[Any, Any]:
        """The next items (see the class doc), or ``{}`` once ``max_samples`` samples were delivered; either calling
        convention (:meth:`~UserMinibatchSource.read_minibatch`'s)."""
        num_samples, number_of_workers, worker_rank, _, input_map = _parse_call(args, kwargs)
        result: Minibatch | dict[Any, Any] = _checked(
            self, self._next_items(num_samples, number_of_workers, worker_rank), input_map
        )
        return result

    def _next_items(self, num_samples: int, number_of_workers: int, worker_rank: int) -> Minibatch | dict[Any, Any]:
        if self._total_num_samples >= self._limit:
            return {}
        begin, count = self._cursor, self.num_items
        budget = min(num_samples, self._limit - self._total_num_samples)
        end = count
        for cumulative in self._cumulative:  # the largest end whose summed length fits, in every stream
            target = int(cumulative[begin]) + min(int(cumulative[-1]), budget)
            end = min(end, int(np.searchsorted(cumulative, target, side="right")) - 1)
        end = max(end, begin + 1)  # at least one item
        taken = max(int(c[end] - c[begin]) for c in self._cumulative)
        self._total_num_samples += taken
        at_end = end == count
        self._cursor = 0 if at_end else end
        end_of_sweep = at_end or self._total_num_samples >= self._limit
        items = np.arange(begin + worker_rank, min(end + worker_rank, count), number_of_workers, dtype=np.int64)
        result = Minibatch()
        provenance = _ItemProvenance(type(self).__name__, items)
        result.provenance = provenance  # type: ignore[assignment]
        for info, stream, lengths, sequences in zip(self._infos, self._data, self._stream_lengths, self._sequence_mode):
            data = self._gather(info, stream, items, lengths[items], end_of_sweep)
            data.provenance = provenance
            data.sequence_axis = sequences
            result[info] = data
        return result

    @staticmethod
    def _gather(
        info: StreamInformation, stream: StreamData, items: np.ndarray, lengths: np.ndarray, end_of_sweep: bool
    ) -> MinibatchData:
        """The samples of some items as fresh buffers."""
        rows = _ranges(stream.seq_offsets[items], lengths)
        if isinstance(stream, DenseStream):
            return MinibatchData(info, stream.values[rows], lengths, end_of_sweep)
        row_nnz = stream.indptr[rows + 1] - stream.indptr[rows]
        entries = _ranges(stream.indptr[rows], row_nnz)
        return MinibatchData(
            info,
            stream.values[entries],
            lengths,
            end_of_sweep,
            indices=stream.indices[entries],
            indptr=exclusive_cumsum(row_nnz),
        )

    def get_checkpoint_state(self) -> dict[str, Any]:
        """``{'cursor': next item, 'total_num_samples': samples delivered}`` (CNTK's form)."""
        return {"cursor": self._cursor, "total_num_samples": self._total_num_samples}

    def restore_from_checkpoint(self, state: Mapping[str, Any]) -> None:
        """Continues from a state of :meth:`get_checkpoint_state`; a malformed one is a ``ValueError``."""
        if not isinstance(state, Mapping) or not {"cursor", "total_num_samples"} <= set(state):
            raise ConfigError(f"checkpoint: expected {{'cursor', 'total_num_samples'}}, got {state!r}")
        cursor, total = state["cursor"], state["total_num_samples"]
        for name, value in (("cursor", cursor), ("total_num_samples", total)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
                raise ConfigError(f"checkpoint: {name} must be an integer >= 0, got {value!r}")
        if cursor >= self.num_items:
            raise ConfigError(f"checkpoint: cursor {cursor} is beyond the {self.num_items} items")
        self._cursor, self._total_num_samples = int(cursor), int(total)
