"""Minibatches assembled ahead on a background thread, in the process that trains.

The reading path runs in C++ with the GIL released (parse, gather) and so does a framework's step (a matmul, a
convolution): one thread that reads and converts the next minibatches while the step runs overlaps the two without
worker processes — no copy across a process boundary, no second copy of the index and the chunks. :class:`Ahead`
runs an iterator on a daemon thread, at most ``depth`` items ahead of the consumer (a bounded queue: the memory of
``depth`` minibatches), and hands them over in order; an exception in the producer is raised in the consumer where
the synchronous iterator would have raised it (after the items before it). :meth:`Ahead.close` (also when the
consumer lets go of it) stops the thread and closes the producer's iterator; items made and not delivered are
dropped — the integrations keep the state of the last *delivered* item, so a checkpoint never skips them.

A consumer that comes back for the next item sooner than an item takes to make (a loop with no step, an evaluation
that only counts) gains nothing from the thread and pays a thread hand-off per item: then the consumer makes the
items itself, in the same order, and the thread waits until the consumer again spends longer away than an item
takes (:data:`INLINE_BELOW`, :data:`THREADED_ABOVE`, exponential averages of both times). Whoever makes an item holds
the turn lock until it is queued, so items are made one at a time and handed over in order.
"""

from __future__ import annotations

import queue
import threading
import time
import weakref
from collections.abc import Iterator
from typing import Generic, TypeVar

T = TypeVar("T")

_END = object()  # the producer's iterator is exhausted
_POLL_SECONDS = 0.1  # how often a waiting producer looks for a stop
INLINE_BELOW = 0.5  # the consumer makes the items when it is away less than this share of an item's making time
THREADED_ABOVE = 1.0  # ... and gives them back to the thread when it is away more than this share
_SETTLE = 8  # items delivered before the first switch (the averages settle)
_WEIGHT = 0.2  # the weight of the newest time in the averages


class _Failure:
    """The producer's exception, raised in the consumer in its place."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException):
        self.error = error


class _Turn:
    """What the producer thread and the consumer share: the iterator, the turn lock held while an item is made and
    queued, whether the thread makes the items (``threaded``), and the average seconds an item takes to make."""

    def __init__(self, items: Iterator[T], depth: int):
        self.items = items
        self.out: queue.Queue[object] = queue.Queue(maxsize=depth)
        self.lock = threading.Lock()
        self.threaded = threading.Event()
        self.threaded.set()
        self.stop = threading.Event()
        self.making = 0.0

    def make(self) -> object:
        """The next item, or the end or failure marker (the turn lock is held)."""
        started = time.perf_counter()
        try:
            item: object = next(self.items)
        except StopIteration:
            return _END
        except BaseException as error:
            return _Failure(error)
        self.making += _WEIGHT * (time.perf_counter() - started - self.making)
        return item


class Ahead(Generic[T]):
    """Iterates ``items`` on a background thread, up to ``depth`` items ahead (``depth >= 1``)."""

    def __init__(self, items: Iterator[T], depth: int, name: str = "cntkio-ahead"):
        if depth < 1:
            raise ValueError(f"depth must be >= 1, got {depth}")
        self._turn = turn = _Turn(items, depth)
        self._done = False
        self._delivered = 0
        self._away = 0.0  # average seconds the consumer spends between items
        self._returned = 0.0  # perf_counter when the last item was handed over
        self._thread = threading.Thread(target=_produce, args=(turn,), name=name, daemon=True)
        self._thread.start()
        # (the thread holds the turn, not this object: dropping the consumer stops the producer)
        self._finalizer = weakref.finalize(self, _stop_producer, turn, self._thread)
        self._finalizer.atexit = False  # (at exit the daemon thread just ends: no join behind a read in progress)

    @property
    def threaded(self) -> bool:
        """Whether the background thread makes the items now (else the consumer does, see the module)."""
        return self._turn.threaded.is_set()

    def __iter__(self) -> Ahead[T]:
        return self

    def __next__(self) -> T:
        if self._done:
            raise StopIteration
        turn = self._turn
        if self._delivered:
            self._away += _WEIGHT * (time.perf_counter() - self._returned - self._away)
        try:
            item = turn.out.get_nowait()
        except queue.Empty:
            if turn.threaded.is_set():
                item = turn.out.get()
            else:
                with turn.lock:  # (a thread making an item holds it until the item is queued)
                    try:
                        item = turn.out.get_nowait()
                    except queue.Empty:
                        item = turn.make()
        if item is _END or isinstance(item, _Failure):
            self.close()
            if isinstance(item, _Failure):
                raise item.error
            raise StopIteration
        self._delivered += 1
        if self._delivered >= _SETTLE:
            self._switch()
        self._returned = time.perf_counter()
        return item  # type: ignore[return-value]  # (anything but the markers is the producer's item)

    def _switch(self) -> None:
        """Gives the making of items to the consumer or back to the thread (see the module)."""
        turn = self._turn
        if turn.threaded.is_set():
            if self._away < INLINE_BELOW * turn.making:
                turn.threaded.clear()
        elif self._away > THREADED_ABOVE * turn.making:
            turn.threaded.set()

    def close(self) -> None:
        """Stops the producer (its iterator is closed on its thread) and waits for it; undelivered items go."""
        self._done = True
        self._finalizer()


def _produce(turn: _Turn) -> None:
    try:
        while not turn.stop.is_set():
            if not turn.threaded.wait(_POLL_SECONDS):
                continue
            with turn.lock:
                if turn.stop.is_set() or not turn.threaded.is_set():
                    continue  # (the consumer took over the making meanwhile)
                item = turn.make()
                if not _put(turn, item) or item is _END or isinstance(item, _Failure):
                    return
            del item  # (the consumer alone holds a delivered item: a reader reusing its memory may take it back)
    finally:
        close = getattr(turn.items, "close", None)
        if close is not None:
            close()  # (a generator's finally blocks run here, on the thread that ran it)


def _put(turn: _Turn, item: object) -> bool:
    """Puts ``item`` once there is room; False if told to stop first."""
    while not turn.stop.is_set():
        try:
            turn.out.put(item, timeout=_POLL_SECONDS)
            return True
        except queue.Full:
            continue
    return False


def _stop_producer(turn: _Turn, thread: threading.Thread) -> None:
    turn.stop.set()
    turn.threaded.set()  # (wakes a producer waiting for its turn)
    while True:  # (room for a producer blocked on a full queue; what it made is dropped)
        try:
            turn.out.get_nowait()
        except queue.Empty:
            break
    if thread is not threading.current_thread():
        thread.join()
