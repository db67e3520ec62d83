"""``MinibatchData``: one stream of one minibatch, as flat buffers with cheap views on top."""

from __future__ import annotations

import warnings
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from cntkio._src.common.arrays import exclusive_cumsum, issparse, scipy_sparse
from cntkio._src.common.streams import StreamInformation
from cntkio._src.formats.protocol import SparseStream
from cntkio._src.formats.stream_data import UserDataError, Where, convert, describe, is_csr

if TYPE_CHECKING:
    import scipy.sparse

    from cntkio._src.corpus.key_names import KeyNames


class MinibatchData:
    """The samples of one stream in a minibatch (``cntk.io.MinibatchData``).

    Samples of all sequences are stored back to back: ``values`` is ``(num_samples, *shape)`` for
    dense streams; sparse streams hold CSR arrays (``values``, ``indices``, ``indptr``) with one row
    per sample. ``sequence_lengths`` splits the samples into sequences.

    Made two ways: cntkio's ``MinibatchData(info, values, sequence_lengths, end_of_sweep, indices=None,
    indptr=None)`` from those arrays, or CNTK's ``MinibatchData(value, num_sequences, num_samples, sweep_end)``
    (what a ``UserMinibatchSource`` written for CNTK returns). CNTK's ``value`` was a ``cntk.Value``; here it is
    the data itself:

    * a NumPy array ``(num_sequences, length, *shape)`` of sequences of one length (``num_samples`` is
      ``num_sequences * length``: CNTK's ``Value(batch=array)`` had no mask), or ``(num_sequences, *shape)`` of one
      sample per sequence (``num_samples == num_sequences``; presented without a sequence axis, as CNTK's);
    * a SciPy CSR matrix ``(num_samples, dim)``, a row per sample (what ``Value.one_hot`` made): one sample per
      sequence (``num_samples == num_sequences``, no sequence axis), or one sequence (``num_sequences == 1``);
    * a list with one array ``(length, *shape)`` or CSR matrix ``(length, dim)`` per sequence (any lengths);
    * a :class:`Value` (``other_minibatch[stream].data``).

    Anything else is a ``TypeError`` naming these; counts that disagree with the data are a
    :class:`~cntkio.UserDataError`. The stream is described by the data (its dtype, shape, sparsity) and named
    after the ``StreamInformation`` key it is returned under once :meth:`UserMinibatchSource.read_minibatch
    <cntkio.UserMinibatchSource.read_minibatch>` checks the minibatch.
    """

    def __init__(
        self,
        info: StreamInformation | Any,
        values: np.ndarray | int,
        sequence_lengths: np.ndarray | int,
        end_of_sweep: bool,
        indices: np.ndarray | None = None,
        indptr: np.ndarray | None = None,
        starts: np.ndarray | None = None,
    ):
        self.sequence_axis = True  # False: every sequence is one item without a sequence axis (CNTK's Value shape)
        self.from_value = False  # made by CNTK's form: the stream is described by the data (see the class doc)
        if not isinstance(info, StreamInformation):  # CNTK's MinibatchData(value, num_sequences, num_samples, ...)
            made = _from_value(info, values, sequence_lengths)
            info, values, sequence_lengths, indices, indptr, starts, self.sequence_axis = made
            self.from_value = True
        assert isinstance(values, np.ndarray)
        self.info = info
        self.values = values
        self.indices = indices
        self.indptr = indptr
        self.sequence_lengths = np.asarray(sequence_lengths, dtype=np.int64)
        self.end_of_sweep = bool(end_of_sweep)
        self._starts = starts  # per flat sample: begins a sequence (truncated BPTT rows hold several)
        self.provenance: Any = None  # set by the source: where each sequence comes from
        self.origin = 0  # the deserializer (in the source's list) that produced the stream

    @classmethod
    def gathered(
        cls,
        info: StreamInformation,
        values: np.ndarray,
        sequence_lengths: np.ndarray,
        end_of_sweep: bool,
        indices: np.ndarray | None,
        indptr: np.ndarray | None,
        starts: np.ndarray | None,
        provenance: Any,
        origin: int,
    ) -> MinibatchData:
        """A stream of a minibatch the reader gathered: what ``MinibatchData(info, values, sequence_lengths,
        end_of_sweep, indices=indices, indptr=indptr, starts=starts)`` makes, with its ``provenance`` and ``origin``
        set, without the checks and conversions of arrays that are already right (``sequence_lengths`` int64)."""
        data = cls.__new__(cls)
        data.__dict__.update(
            sequence_axis=True,
            from_value=False,
            info=info,
            values=values,
            indices=indices,
            indptr=indptr,
            sequence_lengths=sequence_lengths,
            end_of_sweep=end_of_sweep,
            _starts=starts,
            provenance=provenance,
            origin=origin,
        )
        return data

    # --- counts (cntk.io names and their aliases) ---------------------------------------------
    @property
    def num_sequences(self) -> int:
        return len(self.sequence_lengths)

    @property
    def num_samples(self) -> int:
        return int(self.sequence_lengths.sum())

    number_of_sequences = num_sequences
    number_of_samples = num_samples

    @property
    def sweep_end(self) -> bool:
        return self.end_of_sweep

    def __len__(self) -> int:
        return self.num_sequences

    @property
    def is_sparse(self) -> bool:
        return self.info.is_sparse

    @property
    def keys(self) -> list[Any] | None:
        """``(source, sequence key)`` of each sequence (each piece, for truncated BPTT rows) in the
        deserializer that produced this stream (its own file and key, in a composite)."""
        return self.provenance.keys_in(self.origin) if self.provenance is not None else None

    @property
    def sample_shape(self) -> tuple[int, ...]:
        """The stream's sample shape as declared (:attr:`StreamInformation.sample_shape`: a sparse stream declared
        ``(1, dim)`` is ``(1, dim)`` here, its CSR rows ``dim`` wide)."""
        return self.info.sample_shape

    @property
    def max_length(self) -> int:
        return int(self.sequence_lengths.max()) if self.num_sequences else 0

    @property
    def shape(self) -> tuple[int, ...]:
        """Shape of the padded array: ``(num_sequences, max_length, *sample_shape)``."""
        return (self.num_sequences, self.max_length, *self.sample_shape)

    @cached_property
    def sequence_offsets(self) -> np.ndarray:
        """Offsets of each sequence's first sample in the flat buffers (length num_sequences + 1)."""
        return exclusive_cumsum(self.sequence_lengths)

    # --- views ----------------------------------------------------------------------------------
    @property
    def data(self) -> Value:
        """CNTK's ``Value`` of this stream: a view with ``shape``, ``mask``, ``asarray()``, ``as_sequences()`` and
        ``np.asarray(mb.data)`` (see :class:`Value`); nothing is copied until one of them is asked for."""
        return Value(self)

    @property
    def value(self) -> list[Any]:
        """CNTK 2.0's name of :meth:`as_sequences` (deprecated)."""
        warnings.warn("MinibatchData.value is deprecated; use as_sequences()", DeprecationWarning, stacklevel=2)
        return self.as_sequences()

    def sample_positions(self) -> tuple[np.ndarray, np.ndarray]:
        """(sequence, step) of every sample in the flat buffers: where it goes in a padded ``[sequences, steps]``
        layout."""
        lengths = self.sequence_lengths
        rows = np.repeat(np.arange(self.num_sequences), lengths)
        steps = np.arange(self.num_samples) - np.repeat(self.sequence_offsets[:-1], lengths)
        return rows, steps

    def asarray(self) -> np.ndarray:
        """Dense padded array ``[num_sequences, max_length, *shape]``; padding is zero.

        Sparse streams are densified, in every source (use :attr:`csr` or :meth:`as_sequences` to stay sparse).
        """
        out = np.zeros(self.shape, dtype=self.values.dtype)
        if self.num_samples == 0:
            return out
        rows, steps = self.sample_positions()
        if self.is_sparse:
            assert self.indptr is not None and self.indices is not None
            flat = out.reshape(-1, self.info.shape[0])  # a row per sample (a (1, dim) declaration adds no rows)
            entry_rows = np.repeat(rows * self.max_length + steps, np.diff(self.indptr))
            flat[entry_rows, self.indices] = self.values
        else:
            out[rows, steps] = self.values
        return out

    @property
    def mask(self) -> np.ndarray:
        """``(num_sequences, max_length)`` uint8: 2 = sequence start, 1 = valid, 0 = padding."""
        mask = np.zeros((self.num_sequences, self.max_length), dtype=np.uint8)
        if self.num_samples:
            rows, steps = self.sample_positions()
            mask[rows, steps] = 1
            if self._starts is None:
                mask[self.sequence_lengths > 0, 0] = 2
            else:
                mask[rows[self._starts], steps[self._starts]] = 2
        return mask

    @property
    def csr(self) -> scipy.sparse.csr_matrix:
        """Sparse streams: every sample as one CSR row, ``(num_samples, dim)``, sharing memory."""
        if not self.is_sparse:
            raise TypeError(f"stream '{self.info.name}' is dense; use .values or .asarray()")
        return scipy_sparse().csr_matrix(
            (self.values, self.indices, self.indptr), shape=(self.num_samples, self.info.shape[0]), copy=False
        )

    def as_sequences(self, variable: Any = None) -> list[Any]:
        """One array per sequence: dense ``ndarray (len, *shape)`` views, sparse CSR ``(len, dim)``."""
        del variable  # accepted for cntk.io compatibility
        offsets = self.sequence_offsets
        if not self.is_sparse:
            return np.split(self.values, offsets[1:-1]) if self.num_sequences else []
        matrix = self.csr
        return [matrix[a:b] for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist())]

    def __repr__(self) -> str:
        kind = "sparse" if self.is_sparse else "dense"
        return (
            f"MinibatchData({self.info.name!r}, {kind}, sequences={self.num_sequences}, "
            f"samples={self.num_samples}, shape={self.shape}, end_of_sweep={self.end_of_sweep})"
        )


class Value:
    """CNTK's ``Value`` (``cntk.core.Value``) of one stream of a minibatch: what ``MinibatchData.data`` returns.

    A thin view of the :class:`MinibatchData` (made in O(1), holding no copy): ``shape`` is
    ``(num_sequences, max_length, *sample_shape)`` (``(num_sequences, *sample_shape)`` for the sample-mode items of
    :class:`~cntkio.MinibatchSourceFromData`, which have no sequence axis, as in CNTK), ``mask`` marks sequence starts
    (2), valid steps (1) and padding (0). ``np.asarray(value)`` is always the dense array of ``shape`` (zero padding).

    ``asarray()`` follows CNTK 2.1-2.7, the same for every source (file formats, ``UserDeserializer``,
    ``MinibatchSourceFromData``, ``UserMinibatchSource``): the dense array of ``shape``, except that a sparse stream
    whose ``shape`` is 2-D (one item per row without a sequence axis, ``(num_sequences, dim)``) is one SciPy CSR
    matrix of that shape. CNTK's earlier generations differed: 2.0 RC1 gave a list of CSR matrices, one per
    sequence (``as_sequences()`` gives that); 2.0 RC2 to 2.0 raised ``ValueError`` for a sparse value of rank > 2;
    2.1-2.7 returned the dense array with a warning (and failed for sequences of different lengths, which are
    zero-padded here). Before 2.0 RC1 there was no ``asarray()`` (``np.asarray(value)``, unchanged).

    Example::

        value = mb["features"].data
        value.shape, value.mask        # (2, 4, 3), [[2, 1, 1, 1], [2, 1, 1, 0]]
        dense = np.asarray(value)      # zero-padded [sequences, steps, 3]
        value.as_sequences()           # [array (4, 3), array (3, 3)]
    """

    __slots__ = ("_minibatch",)

    def __init__(self, minibatch: MinibatchData):
        self._minibatch = minibatch

    @property
    def shape(self) -> tuple[int, ...]:
        data = self._minibatch
        return data.shape if data.sequence_axis else (data.num_sequences, *data.sample_shape)

    @property
    def dtype(self) -> np.dtype[Any]:
        return self._minibatch.info.dtype

    @property
    def mask(self) -> np.ndarray:
        """``(num_sequences, max_length)`` uint8: 2 = sequence start, 1 = valid, 0 = padding."""
        return self._minibatch.mask

    @property
    def is_sparse(self) -> bool:
        return self._minibatch.is_sparse

    @property
    def num_sequences(self) -> int:
        return self._minibatch.num_sequences

    @property
    def num_samples(self) -> int:
        return self._minibatch.num_samples

    def __len__(self) -> int:
        return self._minibatch.num_sequences

    def as_sequences(self, variable: Any = None) -> list[Any]:
        """One array per sequence without padding (CSR matrices for a sparse stream)."""
        return self._minibatch.as_sequences(variable)

    def asarray(self) -> Any:
        """The dense array of :attr:`shape` (zero padding); a sparse stream of 2-D ``shape`` (items without a sequence
        axis) is one CSR matrix ``(num_sequences, dim)`` (CNTK 2.1-2.7's rule; see the class doc)."""
        data = self._minibatch
        if data.is_sparse and not data.sequence_axis and len(data.sample_shape) == 1:
            return data.csr
        if not data.sequence_axis and not data.is_sparse:
            return data.values
        return self.__array__()

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        del copy  # the padded array is always a new array
        dense = self._minibatch.asarray()
        if not self._minibatch.sequence_axis:
            dense = dense.reshape(self.shape)  # (every sequence one sample: no padding)
        return dense if dtype is None else dense.astype(dtype, copy=False)

    def __repr__(self) -> str:
        kind = "sparse" if self.is_sparse else "dense"
        return f"Value({self._minibatch.info.name!r}, {kind}, shape={self.shape})"


class Provenance:
    """Where the units of a minibatch come from: ``keys`` lists ``(source, sequence key)`` per unit
    (``(source, (key, frame))`` in frame mode) in the primary deserializer, ``keys_in(d)`` in deserializer
    ``d`` of a composite; computed when first asked for. It holds the key columns and file tables only
    (:class:`~cntkio._src.corpus.key_names.KeyNames`), never the deserializers or their open files."""

    __slots__ = ("__dict__", "_keys", "_names", "sources", "units")

    def __init__(self, names: KeyNames, sources: list[str], units: np.ndarray):
        self._names, self.units = names, units
        self.sources = sources  # the source (file) of each deserializer, primary first
        self._keys: dict[int, list[tuple[str, Any]]] = {}

    @property
    def keys(self) -> list[tuple[str, Any]]:
        return self.keys_in(0)

    def keys_in(self, deserializer: int) -> list[tuple[str, Any]]:
        if deserializer not in self._keys:
            self._keys[deserializer] = self._names.keys_of(self.units, deserializer)
        return self._keys[deserializer]

    def columns(self) -> tuple[list[str], np.ndarray, Any]:
        """The primary's keys as columns (:meth:`KeyNames.key_columns`): sources, each unit's source, keys."""
        return self._names.key_columns(self.units, 0)


class Minibatch(dict[Any, MinibatchData]):
    """``{StreamInformation: MinibatchData}`` that can also be indexed by stream name.

    ``sequence_keys`` lists the provenance ``(source, sequence key)`` of each sequence, in row order (for
    truncated BPTT: of each piece of a row, in order).
    """

    provenance: Provenance

    @property
    def sequence_keys(self) -> list[tuple[str, Any]]:
        return self.provenance.keys

    def __missing__(self, key: Any) -> MinibatchData:
        if isinstance(key, str):
            for info, data in self.items():
                if isinstance(info, StreamInformation) and info.name == key:
                    return data
        raise KeyError(key)


_ACCEPTED = (
    "a NumPy array (num_sequences, length, *shape) or (num_sequences, *shape), a SciPy CSR matrix "
    "(num_samples, dim), a list of them (one per sequence) or a cntkio Value"
)

Made = tuple[StreamInformation, np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None, np.ndarray | None, bool]


def _count(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise TypeError(f"MinibatchData(value, num_sequences, num_samples, sweep_end): {name} must be an integer >= 0, "
                        f"got {value!r}")  # fmt: skip
    return int(value)


def _from_value(value: Any, num_sequences: Any, num_samples: Any) -> Made:
    """CNTK's ``MinibatchData(value, num_sequences, num_samples, sweep_end)`` as cntkio's arrays (see
    :class:`MinibatchData`): (info, values, lengths, indices, indptr, starts, sequence_axis)."""
    sequences, samples = _count(num_sequences, "num_sequences"), _count(num_samples, "num_samples")
    where = Where("MinibatchData", None, "value")

    def stream(data: Any, shape: tuple[int, ...]) -> StreamInformation:
        kind = "sparse" if is_csr(data) else "dense"
        return StreamInformation("", 0, kind, np.dtype(data.dtype), shape)

    def check(lengths: np.ndarray) -> None:
        if len(lengths) != sequences or int(lengths.sum()) != samples:
            raise UserDataError(
                f"the value holds {len(lengths)} sequences of {int(lengths.sum())} samples, but num_sequences is "
                f"{sequences} and num_samples {samples}",
                source="MinibatchData",
            )

    if isinstance(value, Value):
        data = value._minibatch
        check(data.sequence_lengths)
        return (data.info, data.values, data.sequence_lengths, data.indices, data.indptr, data._starts,
                data.sequence_axis)  # fmt: skip
    if isinstance(value, (list, tuple)):
        first: Any = value[0] if len(value) else None
        if not (isinstance(first, np.ndarray) or is_csr(first)) or first.ndim < 1:
            raise TypeError(
                f"MinibatchData(value, ...): a list must hold one NumPy array (length, *shape) or SciPy CSR matrix "
                f"(length, dim) per sequence, got {'an empty list' if first is None else describe(first)}"
            )
        info = stream(first, tuple(first.shape[1:]))
        converted, lengths = convert(list(value), info, "safe", where)
        check(lengths)
        if isinstance(converted, SparseStream):
            return info, converted.values, lengths, converted.indices, converted.indptr, None, True
        return info, converted.values, lengths, None, None, None, True
    if is_csr(value):
        if samples != value.shape[0] or sequences not in (samples, 1):
            raise UserDataError(
                f"a CSR matrix is a row per sample: it has {value.shape[0]} rows, num_samples is {samples}; with "
                f"{sequences} sequences, give a list of CSR matrices, one per sequence (or num_sequences "
                f"{samples}: a sample each, or 1: one sequence)",
                source="MinibatchData",
            )
        info = stream(value, (int(value.shape[1]),))
        lengths = np.ones(samples, np.int64) if sequences == samples else np.array([samples], np.int64)
        converted, _ = convert(value, info, "no", where)
        assert isinstance(converted, SparseStream)
        return info, converted.values, lengths, converted.indices, converted.indptr, None, sequences != samples
    if isinstance(value, np.ndarray) and not issparse(value) and value.ndim >= 1:
        if value.shape[0] != sequences:
            raise UserDataError(
                f"the array's first axis ({value.shape[0]}) must be num_sequences ({sequences})", source="MinibatchData"
            )
        steps = value.shape[1] if value.ndim >= 2 else 0
        if value.ndim >= 2 and samples == sequences * steps:  # sequences of one length, (num_sequences, length, ...)
            info, lengths = stream(value, tuple(value.shape[2:])), np.full(sequences, steps, np.int64)
            return info, value.reshape(samples, *info.shape), lengths, None, None, None, True
        if samples == sequences:  # one sample per sequence, (num_sequences, *shape), no sequence axis
            return stream(value, tuple(value.shape[1:])), value, np.ones(sequences, np.int64), None, None, None, False
        raise UserDataError(
            f"an array {value.shape} holds sequences of one length ({sequences} x {steps} = {sequences * steps} "
            f"samples) or one sample per sequence ({sequences}), but num_samples is {samples}; give sequences of "
            "different lengths as a list of arrays, one per sequence",
            source="MinibatchData",
        )
    raise TypeError(
        f"MinibatchData(value, num_sequences, num_samples, sweep_end): value must be {_ACCEPTED} "
        f"(cntkio has no cntk.Value to build: give its data), got {describe(value)}"
    )
