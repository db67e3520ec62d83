"""Structured errors shared by all deserializers (the ``max_errors`` ledger:
:mod:`cntkio._src.formats.error_ledger`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cntkio._src.common.keys import shorten


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

    def __reduce__(self) -> tuple[Any, ...]:  # (crosses process boundaries: DataLoader workers, Ray tasks)
        return type(self), (self.reason, self.location), self.__dict__

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

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.first_error, self.max_errors), self.__dict__
