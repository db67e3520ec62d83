"""A minibatch stream as PyTorch tensors, in two stages: the arrays of the layout asked for (NumPy:
:func:`stream_arrays`, where the work is) and the tensors over them (:func:`tensors_of`: no copy, a few microseconds).

The process that trains runs both; a ``DataLoader`` worker runs the first and sends the arrays, and the process that
trains runs the second when they arrive (see ``torch_transport``) — so a batch is the same tensors whichever way it
was made, and no tensor crosses a process boundary.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch
from torch.nn.utils.rnn import pack_padded_sequence

from cntkio._src.assemble import layouts
from cntkio._src.assemble.minibatch import Minibatch, MinibatchData

# CSR tensors are made over the reader's arrays (also in the main process for a loader worker's batch): say once,
# explicitly, that their invariants are not checked (they hold by construction), and keep torch's "beta" note out
# of the log.
torch.sparse.check_sparse_tensor_invariants.disable()
warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta", category=UserWarning)

LAYOUTS = {
    "auto": "dense: [batch, *shape] when every sequence has one sample, else padded; sparse: CSR — but in a "
    "MinibatchDataset an image deserializer's label stream (one-hot, one sample per sequence) is int64 class ids "
    "[batch], as per_sequence ('csr' keeps it CSR)",
    "flat": "dense: every sample as a row [samples, *shape]; sparse: CSR",
    "padded": "[batch, max_len, *shape] (sparse streams densified), with masks[name]",
    "csr": "sparse only: a CSR tensor, one row per sample",
    "token_ids": "one-hot sparse only: int64 ids [batch, max_len] padded with pad_id, with masks[name]",
    "token_offsets": "one-hot sparse only: int64 ids [samples] and offsets[name] [batch] (nn.EmbeddingBag)",
    "packed": "a PackedSequence of the padded stream (nn.RNN/LSTM/GRU)",
    "nested": "a jagged nested tensor, one [len, *shape] component per sequence",
    "per_sequence": "one sample per sequence: dense [batch, *shape]; one-hot sparse: int64 class ids [batch]",
}


@dataclass(frozen=True)
class StreamTensors:
    """A stream of a minibatch in one layout: the tensor (or PackedSequence) and, for padded and EmbeddingBag
    layouts, its mask or offsets."""

    value: Any
    mask: torch.Tensor | None = None
    offsets: torch.Tensor | None = None


class StreamArrays(NamedTuple):
    """A stream of a minibatch in one layout, as the arrays its tensors are made over: ``form`` says how —
    ``"dense"`` (``parts``: the array), ``"csr"`` (crow, col, values; ``size``: the CSR shape), ``"packed"`` (the
    padded array and int64 lengths) or ``"nested"`` (one array per sequence) — with the mask or offsets of its
    layout. Small and picklable: the arrays are the bulk."""

    form: str
    parts: tuple[np.ndarray, ...]
    size: tuple[int, ...] = ()
    mask: np.ndarray | None = None
    offsets: np.ndarray | None = None


_INT32_LIMIT = 2**31 - 1


def stream_arrays(data: MinibatchData, layout: str = "auto", pad_id: int = 0) -> StreamArrays:
    """The arrays of a stream in ``layout`` (one of :data:`LAYOUTS`); ``pad_id`` fills the padding of token ids."""
    name = data.info.name
    if layout not in LAYOUTS:
        raise ValueError(f"stream '{name}': unknown layout {layout!r}; one of {', '.join(LAYOUTS)}")
    if layout in ("auto", "flat", "csr"):
        if layout == "csr" and not data.is_sparse:
            raise ValueError(f"stream '{name}' is dense: layout 'csr' is for sparse streams")
        return _plain(data, "flat" if layout == "csr" else layout)
    if layout in ("token_ids", "token_offsets") or (layout == "per_sequence" and data.is_sparse):
        ids = layouts.one_hot_ids(data, layout)
        if layout == "token_offsets":
            return StreamArrays("dense", (ids,), offsets=data.sequence_offsets[:-1])
        if layout == "per_sequence":
            return StreamArrays("dense", (layouts.one_per_sequence(data, ids),))
        return StreamArrays("dense", (layouts.padded_ids(data, pad_id),), mask=layouts.mask(data))
    if layout == "per_sequence":
        return StreamArrays("dense", (layouts.one_per_sequence(data, data.values),))
    if layout == "nested":
        parts = data.as_sequences() if not data.is_sparse else list(data.asarray())
        lengths = data.sequence_lengths.tolist()
        return StreamArrays("nested", tuple(np.ascontiguousarray(p[:n]) for p, n in zip(parts, lengths, strict=True)))
    padded = data.asarray()
    if layout == "packed":
        lengths_array = data.sequence_lengths.astype(np.int64)
        if not len(lengths_array) or int(lengths_array.min()) < 1:
            raise ValueError(f"stream '{name}': layout 'packed' needs every sequence to have a sample")
        return StreamArrays("packed", (padded, lengths_array))
    return StreamArrays("dense", (padded,), mask=layouts.mask(data))


def _plain(data: MinibatchData, layout: str) -> StreamArrays:
    """CSR rows for a sparse stream — the column indices as they are (int32), the row offsets narrowed to int32 (one
    per sample: a small copy), or both int64 past 2**31 entries — else the samples flat or padded (``layout``)."""
    if data.is_sparse:
        indptr, indices = data.indptr, data.indices
        assert indptr is not None and indices is not None
        if len(indices) <= _INT32_LIMIT and indices.dtype == np.int32:
            crow, col = indptr.astype(np.int32), indices
        else:
            crow, col = indptr.astype(np.int64, copy=False), indices.astype(np.int64)
        # (the CSR rows: a stream declared (1, dim) is dim wide)
        return StreamArrays("csr", (crow, col, data.values), (len(indptr) - 1, *data.info.shape))
    flat = layout == "flat" or (layout == "auto" and len(data.values) == len(data.sequence_lengths))
    return StreamArrays("dense", (data.values if flat else data.asarray(),))


def tensors_of(arrays: StreamArrays) -> StreamTensors:
    """The tensors over a stream's arrays (no copy, except what ``pack_padded_sequence`` and nested tensors make)."""
    form, parts = arrays.form, arrays.parts
    if form == "dense":
        value: Any = torch.from_numpy(parts[0])
    elif form == "csr":
        crow, col, values = parts
        value = torch.sparse_csr_tensor(
            torch.from_numpy(crow),
            torch.from_numpy(col),
            torch.from_numpy(values),
            size=arrays.size,
            device="cpu",  # (not the calling thread's default device: batches are made on any thread, see Ahead)
            check_invariants=False,  # the reader's CSR is valid by construction
        )
    elif form == "packed":
        padded, lengths = (torch.from_numpy(part) for part in parts)
        value = pack_padded_sequence(padded, lengths, batch_first=True, enforce_sorted=False)
    else:
        value = torch.nested.as_nested_tensor([torch.from_numpy(part) for part in parts], layout=torch.jagged)
    mask = None if arrays.mask is None else torch.from_numpy(arrays.mask)
    offsets = None if arrays.offsets is None else torch.from_numpy(arrays.offsets)
    return StreamTensors(value, mask, offsets)


def stream_tensors(data: MinibatchData, layout: str = "auto", pad_id: int = 0) -> StreamTensors:
    """A stream's samples in ``layout`` (one of :data:`LAYOUTS`); ``pad_id`` fills the padding of token ids.

    Example::

        ids = stream_tensors(minibatch["S0"], "token_ids")   # int64 [batch, max_len], ids.mask: bool
        labels = stream_tensors(minibatch["S1"], "per_sequence").value   # int64 [batch]
    """
    return tensors_of(stream_arrays(data, layout, pad_id))


def to_tensor(data: MinibatchData, layout: str = "auto") -> torch.Tensor:
    """A stream's samples as a tensor: CSR rows for sparse streams, else flat or padded (see layout)."""
    return tensors_of(_plain(data, layout)).value


class Converter:
    """Makes the arrays of a minibatch's streams in the layout chosen for each (decided once per pass), by stream
    name."""

    def __init__(self, chosen: Mapping[str, str], pad_id: int):
        self.chosen = dict(chosen)
        self.pad_id = pad_id
        self.auto = all(layout == "auto" for layout in self.chosen.values())

    def __call__(self, minibatch: Minibatch) -> dict[str, StreamArrays]:
        if self.auto:  # (the common case: no layout asked for)
            return {info.name: _plain(data, "auto") for info, data in minibatch.items()}
        return {info.name: stream_arrays(data, self.chosen[info.name], self.pad_id) for info, data in minibatch.items()}
