"""``MinibatchData``: one stream of one minibatch, as flat buffers with cheap views on top."""

from __future__ import annotations

import warnings
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from cntkio._src.common.arrays import exclusive_cumsum, scipy_sparse
from cntkio._src.common.streams import StreamInformation

if TYPE_CHECKING:
    import scipy.sparse

    from cntkio._src.corpus.key_names import KeyNames


class MinibatchData:
    """The samples of one stream in a minibatch (``cntk.io.MinibatchData``).

    Samples of all sequences are stored back to back: ``values`` is ``(num_samples, *shape)`` for
    dense streams; sparse streams hold CSR arrays (``values``, ``indices``, ``indptr``) with one row
    per sample. ``sequence_lengths`` splits the samples into sequences.
    """

    def __init__(
        self,
        info: StreamInformation,
        values: np.ndarray,
        sequence_lengths: np.ndarray,
        end_of_sweep: bool,
        indices: np.ndarray | None = None,
        indptr: np.ndarray | None = None,
        starts: np.ndarray | None = None,
    ):
        self.info = info
        self.values = values
        self.indices = indices
        self.indptr = indptr
        self.sequence_lengths = np.asarray(sequence_lengths, dtype=np.int64)
        self.end_of_sweep = bool(end_of_sweep)
        self._starts = starts  # per flat sample: begins a sequence (truncated BPTT rows hold several)
        self.provenance: Any = None  # set by the source: where each sequence comes from
        self.origin = 0  # the deserializer (in the source's list) that produced the stream
        self.sequence_axis = True  # False: every sequence is one item without a sequence axis (CNTK's Value shape)

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
        return self.info.shape

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

        Sparse streams are densified (use :attr:`csr` or :meth:`as_sequences` to stay sparse).
        """
        out = np.zeros(self.shape, dtype=self.values.dtype)
        if self.num_samples == 0:
            return out
        rows, steps = self.sample_positions()
        if self.is_sparse:
            assert self.indptr is not None and self.indices is not None
            flat = out.reshape(-1, *self.sample_shape)
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
            (self.values, self.indices, self.indptr), shape=(self.num_samples, self.sample_shape[0]), copy=False
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
    (2), valid steps (1) and padding (0). As CNTK's, ``asarray()`` of a sparse stream gives CSR matrices (one per
    sequence, or one for sample-mode items); ``np.asarray(value)`` is always the dense padded array.

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
        """Dense: the zero-padded array of :attr:`shape`. Sparse (as CNTK): a CSR matrix per sequence, or one CSR
        matrix ``(num_sequences, dim)`` for items without a sequence axis."""
        data = self._minibatch
        if data.is_sparse:
            return data.csr if not data.sequence_axis else data.as_sequences()
        if not data.sequence_axis:
            return data.values
        return data.asarray()

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        del copy  # the padded array is always a new array
        dense = self._minibatch.asarray()
        if not self._minibatch.sequence_axis:
            dense = dense.reshape(self.shape)
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
