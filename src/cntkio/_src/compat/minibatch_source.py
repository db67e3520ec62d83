"""``cntk.io.MinibatchSource`` as every CNTK generation spelled it: CNTK 2.0's keywords and deferred deserializers
translated here, at the edge, before the core :class:`~cntkio.MinibatchSource` is called."""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from cntkio._src.api.source import MinibatchSource as CoreMinibatchSource
from cntkio._src.assemble.minibatch import Minibatch, MinibatchData
from cntkio._src.common.deprecation import deprecated
from cntkio._src.common.sentinels import DEFAULT_RANDOMIZATION_WINDOW_IN_CHUNKS, INFINITELY_REPEAT
from cntkio._src.compat.legacy import build_deferred, sequence_limit, source_keywords
from cntkio._src.formats.protocol import Deserializer, DeserializerGroup


class MinibatchSource(CoreMinibatchSource):
    """:class:`cntkio.MinibatchSource` that also takes CNTK 2.0's spellings, each with a ``DeprecationWarning`` naming
    today's: ``epoch_size`` (= ``max_samples``; 0 = one sweep), ``randomization_window`` (chunks, or samples with
    ``sample_based_randomization_window=True``), ``distributed_after`` (ignored: partitions are chosen per call),
    deserializers whose streams are mapped after construction (``CTFDeserializer(path).map_input(...)``: built here,
    their streams final from then on), ``next_minibatch(samples, sequences)`` / ``minibatch_size_in_sequences`` and
    ``get_next_minibatch``."""

    def __init__(
        self,
        deserializers: Any,
        max_samples: int = INFINITELY_REPEAT,
        max_sweeps: int = INFINITELY_REPEAT,
        randomization_window_in_chunks: int = DEFAULT_RANDOMIZATION_WINDOW_IN_CHUNKS,
        randomization_window_in_samples: int = 0,
        *args: Any,
        **kwargs: Any,
    ):
        self._closed = True  # until construction succeeds
        cntk_2_0 = {key: kwargs.pop(key) for key in list(kwargs) if key not in _CORE_KEYWORDS}
        if cntk_2_0:  # epoch_size, distributed_after, randomization_window (an unknown keyword is a TypeError)
            max_samples, randomization_window_in_chunks, randomization_window_in_samples = source_keywords(
                cntk_2_0, max_samples, randomization_window_in_chunks, randomization_window_in_samples
            )
        built: Deserializer | Sequence[Deserializer | DeserializerGroup] = build_deferred(deserializers)
        super().__init__(
            built,
            max_samples,
            max_sweeps,
            randomization_window_in_chunks,
            randomization_window_in_samples,
            *args,
            **kwargs,
        )

    def next_minibatch(
        self,
        minibatch_size_in_samples: int | None = None,
        input_map: Mapping[Any, Any] | None = None,
        device: Any = None,
        num_data_partitions: int | None = None,
        partition_index: int | None = None,
        *,
        minibatch_size_in_sequences: int | None = None,
    ) -> Minibatch | dict[Any, MinibatchData]:
        """:meth:`cntkio.MinibatchSource.next_minibatch`; CNTK 2.0 beta's ``minibatch_size_in_sequences``
        (deprecated; also its second positional place) caps the sequences of the minibatch, with or without a
        sample budget."""
        del device  # arrays are returned on the host
        max_sequences = 0
        if isinstance(input_map, (int, np.integer)):  # CNTK 2.0 beta: next_minibatch(samples, sequences)
            minibatch_size_in_sequences, input_map = int(input_map), None
        if minibatch_size_in_sequences is not None or minibatch_size_in_samples is None:
            samples, max_sequences = sequence_limit(minibatch_size_in_samples, minibatch_size_in_sequences)
            minibatch_size_in_samples = samples or max_sequences * self._longest_unit * max(1, num_data_partitions or 1)
        return self._next_minibatch(
            minibatch_size_in_samples, input_map, num_data_partitions, partition_index, max_sequences
        )

    def get_next_minibatch(
        self, minibatch_size_in_samples: int, minibatch_size_in_sequences: int | None = None, device: Any = None
    ) -> Minibatch | dict[Any, MinibatchData]:
        """CNTK 2.0 beta's name of :meth:`next_minibatch` (deprecated)."""
        deprecated("MinibatchSource.get_next_minibatch", "next_minibatch")
        return self.next_minibatch(
            minibatch_size_in_samples, device=device, minibatch_size_in_sequences=minibatch_size_in_sequences
        )


_CORE_KEYWORDS = frozenset(inspect.signature(CoreMinibatchSource.__init__).parameters) - {"self"}
