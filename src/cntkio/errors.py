"""Structured errors and the error budget (``max_errors``) shared by all deserializers."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from .keys import shorten

logger = logging.getLogger("cntkio")


class CNTKIOError(Exception):
    """Base class of every error raised by cntkio."""


class ConfigError(CNTKIOError, ValueError):
    """An invalid configuration (stream definitions, options, reader sections)."""


@dataclass(frozen=True)
class Location:
    """Where a problem was found in an input file. ``line`` and ``column`` are 1-based."""

    file: str
    offset: int
    line: int | None = None
    column: int | None = None
    sequence_key: object = None
    input: str | None = None

    def __str__(self) -> str:
        where = self.file
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        details = [f"byte offset {self.offset}"]
        if self.sequence_key is not None:
            details.append(f"sequence {shorten(self.sequence_key)}")
        if self.input is not None:
            details.append(f"input '{self.input}'")
        return f"{where} ({', '.join(details)})"


class FormatError(CNTKIOError, ValueError):
    """Malformed input data. Carries ``file, offset, line, column, sequence_key, input, reason``."""

    def __init__(self, reason: str, location: Location):
        self.reason = reason
        self.location = location
        super().__init__(f"{location}: {reason}")

    file = property(lambda self: self.location.file)
    offset = property(lambda self: self.location.offset)
    line = property(lambda self: self.location.line)
    column = property(lambda self: self.location.column)
    sequence_key = property(lambda self: self.location.sequence_key)
    input = property(lambda self: self.location.input)


class MaxErrorsExceeded(FormatError):
    """More distinct bad records than ``max_errors`` allows; names the record that broke the budget."""

    def __init__(self, error: FormatError, max_errors: int):
        self.first_error = error
        self.max_errors = max_errors
        self.reason = error.reason
        self.location = error.location
        Exception.__init__(
            self,
            f"Reached the maximum number of allowed errors while reading the input file "
            f"({error.location.file}) (max_errors={max_errors}): {error}",
        )


class ErrorBudget:
    """Counts distinct bad records against ``max_errors``; thread-safe.

    Each record is identified by a key (e.g. file offset and kind), so re-reading a chunk in a later
    sweep does not count its errors again. With ``count_repeats`` (CNTK compat) every occurrence counts.
    """

    def __init__(self, max_errors: int, trace_level: int = 1, count_repeats: bool = False):
        if max_errors < 0:
            raise ConfigError(f"max_errors must be >= 0, got {max_errors}")
        self.max_errors = max_errors
        self.trace_level = trace_level
        self.count_repeats = count_repeats
        self._seen: set[Hashable] = set()
        self._count = 0
        self._lock = threading.Lock()
        self.errors: list[FormatError] = []

    @property
    def count(self) -> int:
        """Number of errors counted so far."""
        return self._count

    def add(self, key: Hashable, make_error: Callable[[], FormatError]) -> None:
        """Counts the error identified by ``key``; ``make_error()`` builds it when it is new."""
        with self._lock:
            if key in self._seen and not self.count_repeats:
                return
            error = make_error()
            if self._count >= self.max_errors:
                raise MaxErrorsExceeded(error, self.max_errors)
            self._seen.add(key)
            self._count += 1
            self.errors.append(error)
        if self.trace_level >= 1:
            logger.warning("skipped bad record (%d of max_errors=%d): %s", self._count, self.max_errors, error)
        elif self._count == 1:
            logger.warning("skipping bad records (max_errors=%d); set trace_level >= 1 to see each", self.max_errors)
