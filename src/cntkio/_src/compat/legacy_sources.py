"""CNTK 2.0's ways to make a source, each deprecated in favour of ``MinibatchSource(deserializers, ...)``:
``text_format_minibatch_source``, ``CNTKTextFormatMinibatchSource``, ``ReaderConfig(...).minibatch_source()``,
``minibatch_source(config)`` and ``MinibatchSourceConfig`` (2.0 RC's fluent setters and 2.1's attributes)."""

from __future__ import annotations

import os
from typing import Any

from cntkio._src.api.source import TraceLevel
from cntkio._src.common.sentinels import DEFAULT_RANDOMIZATION_WINDOW_IN_CHUNKS, INFINITELY_REPEAT
from cntkio._src.compat.legacy import MAX_UI64, deprecated, max_samples_of_epoch_size, window_keywords
from cntkio._src.compat.minibatch_source import MinibatchSource
from cntkio._src.formats.ctf import CTFDeserializer

INFINITE_SAMPLES = INFINITELY_REPEAT  # CNTK 2.0 beta: distributed_after's "never"
DEFAULT_RANDOMIZATION_WINDOW = DEFAULT_RANDOMIZATION_WINDOW_IN_CHUNKS  # CNTK 2.0 beta's default window (chunks)


def text_format_minibatch_source(
    path: str | os.PathLike[str], stream_configs: Any, epoch_size: int = MAX_UI64, randomize: bool = True
) -> MinibatchSource:
    """CNTK 2.0 beta's CTF source: ``stream_configs`` is a list of :class:`~cntkio.StreamConfiguration`;
    ``epoch_size`` is ``max_samples`` (0: one sweep).

    Example::

        source = text_format_minibatch_source("train.ctf", [StreamConfiguration("features", 3)], randomize=False)
    """
    deprecated(
        "text_format_minibatch_source(path, stream_configs, epoch_size, randomize)",
        "MinibatchSource(CTFDeserializer(path, streams), max_samples=..., randomize=...)",
    )
    return MinibatchSource(
        CTFDeserializer(path, stream_configs), max_samples=max_samples_of_epoch_size(epoch_size), randomize=randomize
    )


def CNTKTextFormatMinibatchSource(  # CNTK's name
    path: str | os.PathLike[str], streams: Any, epoch_size: int | None = None
) -> MinibatchSource:
    """CNTK 2.0 beta's CTF source of ``StreamDefs``; ``epoch_size`` is ``max_samples`` (None: no end)."""
    deprecated("CNTKTextFormatMinibatchSource(path, streams)", "MinibatchSource(CTFDeserializer(path, streams))")
    return MinibatchSource(CTFDeserializer(path, streams), max_samples=max_samples_of_epoch_size(epoch_size))


class ReaderConfig:
    """CNTK 2.0 beta's reader configuration; :meth:`minibatch_source` makes the source.

    ``epoch_size`` is ``max_samples`` (0: one sweep); ``randomization_window`` counts chunks, or samples with
    ``sample_based_randomization_window``; ``distributed_after`` and ``multithreaded_deserializer`` are ignored.

    Example::

        config = ReaderConfig([images, rois], randomize=False, epoch_size=FULL_DATA_SWEEP)
        source = config.minibatch_source()
    """

    def __init__(
        self,
        deserializers: Any = None,
        randomize: bool = True,
        randomization_window: int = DEFAULT_RANDOMIZATION_WINDOW,
        sample_based_randomization_window: bool = False,
        epoch_size: int = INFINITELY_REPEAT,
        distributed_after: int = INFINITE_SAMPLES,
        multithreaded_deserializer: bool | None = None,
    ):
        deprecated("ReaderConfig(...).minibatch_source()", "MinibatchSource(deserializers, max_samples=..., ...)")
        del distributed_after, multithreaded_deserializer  # partitions are chosen per read; parsing is threaded
        listed = deserializers if isinstance(deserializers, (list, tuple)) else [deserializers]
        self.deserializers = [d for d in listed if d is not None]
        self.randomize = bool(randomize)
        self.max_samples = max_samples_of_epoch_size(epoch_size)
        self.window_in_chunks, self.window_in_samples = window_keywords(
            randomization_window, bool(sample_based_randomization_window)
        )

    def minibatch_source(self) -> MinibatchSource:
        """A :class:`~cntkio.MinibatchSource` reading the deserializers as configured."""
        return MinibatchSource(
            self.deserializers,
            max_samples=self.max_samples,
            randomization_window_in_chunks=self.window_in_chunks,
            randomization_window_in_samples=self.window_in_samples,
            randomize=self.randomize,
        )


def minibatch_source(config: ReaderConfig) -> MinibatchSource:
    """CNTK 2.0 beta's ``minibatch_source(config)`` of a :class:`ReaderConfig` (a raw configuration dict is not
    supported)."""
    if not isinstance(config, ReaderConfig):
        raise NotImplementedError(
            "minibatch_source(config) takes a ReaderConfig; a raw reader configuration dict is not supported "
            "(use MinibatchSource(deserializers, ...))"
        )
    return config.minibatch_source()


class MinibatchSourceConfig:
    """CNTK's configuration object of a source (deprecated: give the same values to ``MinibatchSource``).

    Both generations work: 2.0 RC's ``MinibatchSourceConfig(randomize)`` with fluent ``set_*`` methods and
    ``add_deserializer``, and 2.1's ``MinibatchSourceConfig(deserializers, randomize)`` with attributes;
    :meth:`create_minibatch_source` makes the source (which checks the combination, as CNTK's did).
    ``is_multithreaded`` is kept but ignored (chunks are always parsed on a thread pool).

    Example::

        source = MinibatchSourceConfig(randomize=False).add_deserializer(ctf).set_max_sweeps(1)
        source = source.create_minibatch_source()
    """

    def __init__(self, deserializers: Any = None, randomize: bool = True):
        deprecated("MinibatchSourceConfig", "MinibatchSource(deserializers, max_samples=..., ...)")
        if isinstance(deserializers, bool):  # 2.0 RC: MinibatchSourceConfig(randomize)
            deserializers, randomize = None, deserializers
        listed = deserializers if isinstance(deserializers, (list, tuple)) else [deserializers]
        self.deserializers: list[Any] = [d for d in listed if d is not None]
        self.max_samples: int = INFINITELY_REPEAT
        self.max_sweeps: int = INFINITELY_REPEAT
        self.randomization_window_in_chunks = DEFAULT_RANDOMIZATION_WINDOW_IN_CHUNKS if randomize else 0
        self.randomization_window_in_samples = 0
        self.randomization_seed = 0
        self.trace_level: int = TraceLevel.Warning
        self.is_multithreaded = False
        self.is_frame_mode_enabled = False
        self.truncation_length = 0

    def add_deserializer(self, deserializer: Any) -> MinibatchSourceConfig:
        self.deserializers.append(deserializer)
        return self

    def set_max_samples(self, value: int) -> MinibatchSourceConfig:
        self.max_samples = value
        return self

    def get_max_samples(self) -> int:
        return self.max_samples

    def set_max_sweeps(self, value: int) -> MinibatchSourceConfig:
        self.max_sweeps = value
        return self

    def get_max_sweeps(self) -> int:
        return self.max_sweeps

    def set_randomization_window_in_chunks(self, value: int) -> MinibatchSourceConfig:
        """Randomizes over ``value`` chunks (replacing a window in samples)."""
        self.randomization_window_in_chunks, self.randomization_window_in_samples = value, 0
        return self

    def set_randomization_window_in_samples(self, value: int) -> MinibatchSourceConfig:
        """Randomizes over ``value`` samples (replacing a window in chunks)."""
        self.randomization_window_in_chunks, self.randomization_window_in_samples = 0, value
        return self

    def set_trace_level(self, value: int) -> MinibatchSourceConfig:
        self.trace_level = int(value)
        return self

    def set_truncation_length(self, value: int) -> MinibatchSourceConfig:
        self.truncation_length = value
        return self

    def set_frame_mode(self, value: bool = True) -> MinibatchSourceConfig:
        self.is_frame_mode_enabled = bool(value)
        return self

    def set_multithreaded(self, value: bool = True) -> MinibatchSourceConfig:
        self.is_multithreaded = bool(value)
        return self

    def create_minibatch_source(self) -> MinibatchSource:
        """The :class:`~cntkio.MinibatchSource` of this configuration."""
        return MinibatchSource(
            self.deserializers,
            max_samples=self.max_samples,
            max_sweeps=self.max_sweeps,
            randomization_window_in_chunks=self.randomization_window_in_chunks,
            randomization_window_in_samples=self.randomization_window_in_samples,
            randomization_seed=self.randomization_seed,
            trace_level=self.trace_level,
            frame_mode=self.is_frame_mode_enabled,
            truncation_length=self.truncation_length,
        )
