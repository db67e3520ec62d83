"""Minibatches assembled ahead on a background thread, in the process that trains.

The reading path runs in C++ with the GIL released (parse, gather) and so does a framework's step (a matmul, a
convolution): one thread that reads and converts the next minibatches while the step runs overlaps the two without
worker processes — no copy across a process boundary, no second copy of the index and the chunks. :class:`Ahead`
runs an iterator on a daemon thread, at most ``depth`` items ahead of the consumer (a bounded queue: the memory of
``depth`` minibatches), and hands them over in order; an exception in the producer is raised in the consumer where
the synchronous iterator would have raised it (after the items before it). :meth:`Ahead.close` (also when the
consumer lets go of it) stops the thread and closes the producer's iterator; items made and not delivered are
dropped — the integrations keep the state of the last *delivered* item, so a checkpoint never skips them.
"""

from __future__ import annotations

import queue
import threading
import weakref
from collections.abc import Iterator
from typing import Generic, TypeVar

T = TypeVar("T")

_END = object()  # the producer's iterator is exhausted
_POLL_SECONDS = 0.1  # how often a producer blocked on a full queue looks for a stop


class _Failure:
    """The producer's exception, raised in the consumer in its place."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException):
        self.error = error


class Ahead(Generic[T]):
    """Iterates ``items`` on a background thread, up to ``depth`` items ahead (``depth >= 1``)."""

    def __init__(self, items: Iterator[T], depth: int, name: str = "cntkio-ahead"):
        if depth < 1:
            raise ValueError(f"depth must be >= 1, got {depth}")
        self._queue: queue.Queue[object] = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._done = False
        self._thread = threading.Thread(target=_produce, args=(items, self._queue, self._stop), name=name, daemon=True)
        self._thread.start()
        # (the thread holds the queue and the event, not this object: dropping the consumer stops the producer)
        self._finalizer = weakref.finalize(self, _stop_producer, self._stop, self._queue, self._thread)
        self._finalizer.atexit = False  # (at exit the daemon thread just ends: no join behind a read in progress)

    def __iter__(self) -> Ahead[T]:
        return self

    def __next__(self) -> T:
        if self._done:
            raise StopIteration
        item = self._queue.get()
        if item is _END:
            self._done = True
            self._thread.join()
            raise StopIteration
        if isinstance(item, _Failure):
            self._done = True
            self._thread.join()
            raise item.error
        return item  # type: ignore[return-value]  # (anything but the markers is the producer's item)

    def close(self) -> None:
        """Stops the producer (its iterator is closed on its thread) and waits for it; undelivered items go."""
        self._done = True
        self._finalizer()


def _produce(items: Iterator[T], out: queue.Queue[object], stop: threading.Event) -> None:
    try:
        for item in items:
            if not _put(out, item, stop) or stop.is_set():
                return
            del item  # (the consumer alone holds a delivered item: a reader reusing its memory may take it back)
        _put(out, _END, stop)
    except BaseException as error:
        _put(out, _Failure(error), stop)
    finally:
        close = getattr(items, "close", None)
        if close is not None:
            close()  # (a generator's finally blocks run here, on the thread that ran it)


def _put(out: queue.Queue[object], item: object, stop: threading.Event) -> bool:
    """Puts ``item`` once there is room; False if told to stop first."""
    while not stop.is_set():
        try:
            out.put(item, timeout=_POLL_SECONDS)
            return True
        except queue.Full:
            continue
    return False


def _stop_producer(stop: threading.Event, out: queue.Queue[object], thread: threading.Thread) -> None:
    stop.set()
    while True:  # (room for a producer blocked on a full queue; what it made is dropped)
        try:
            out.get_nowait()
        except queue.Empty:
            break
    if thread is not threading.current_thread():
        thread.join()
