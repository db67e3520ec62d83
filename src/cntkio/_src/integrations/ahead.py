"""Minibatches assembled ahead on a background thread, in the process that trains.

The reading path runs in C++ with the GIL released (parse, gather) and so does a framework's step (a matmul, a
convolution): one thread that reads and converts the next minibatches while the step runs overlaps the two without
worker processes — no copy across a process boundary, no second copy of the index and the chunks. :class:`Ahead`
runs an iterator on a daemon thread, at most ``depth`` items ahead of the consumer (a bounded queue: the memory of
``depth`` minibatches), and hands them over in order; an exception in the producer is raised in the consumer where
the synchronous iterator would have raised it (after the items before it). :meth:`Ahead.close` (also when the
consumer lets go of it) stops the thread and closes the producer's iterator; items made and not delivered are
dropped — the integrations keep the state of the last *delivered* item, so a checkpoint never skips them.

Whether the thread helps depends on the consumer: a step that releases the GIL (a framework's kernels) overlaps the
making of the next item; a loop with no step, or one whose work holds the GIL, gains nothing and pays a thread
hand-off per item. So :class:`Ahead` measures: it times the items it hands over (the consumer's whole cycle, its
own work included) with the thread making them and with the consumer making them itself (in the same order), keeps
the faster way by the median cycle (the thread's unless the consumer's is clearly faster: :data:`INLINE_MARGIN`) and
tries the other again now and then (:data:`PROBE_ITEMS`, :data:`REPROBE_ITEMS`). Whoever makes an item holds the turn
lock until it is queued, so items are made one at a time and handed over in order.
"""

from __future__ import annotations

import contextlib
import queue
import statistics
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Generic, TypeVar

T = TypeVar("T")

_END = object()  # the producer's iterator is exhausted
_POLL_SECONDS = 0.1  # how often a waiting producer looks for a stop
PROBE_ITEMS = 16  # items timed in each way (after _WARM_ITEMS that are not: a change settles)
REPROBE_ITEMS = 512  # items made the faster way before both are timed again
INLINE_MARGIN = 0.9  # the consumer makes the items only when that is clearly faster: the thread also hides the
# occasional long wait (a chunk being parsed) that a short timing may not see
_WARM_ITEMS = 4
_clock = time.perf_counter


class _Failure:
    """The producer's exception, raised in the consumer in its place."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException):
        self.error = error


class _Turn:
    """What the producer thread and the consumer share: the iterator, the turn lock held while an item is made and
    queued, and whether the thread makes the items (``threaded``)."""

    def __init__(self, items: Iterator[T], depth: int):
        self.items = items
        self.out: queue.Queue[object] = queue.Queue(maxsize=depth)
        self.lock = threading.Lock()
        self.threaded = threading.Event()
        self.threaded.set()
        self.stop = threading.Event()

    def make(self) -> object:
        """The next item, or the end or failure marker (the turn lock is held)."""
        try:
            return next(self.items)
        except StopIteration:
            return _END
        except BaseException as error:
            return _Failure(error)


class Ahead(Generic[T]):
    """Iterates ``items`` on a background thread, up to ``depth`` items ahead (``depth >= 1``)."""

    def __init__(
        self,
        items: Iterator[T],
        depth: int,
        name: str = "cntkio-ahead",
        inline: Callable[[], AbstractContextManager[object]] | None = None,
    ):
        if depth < 1:
            raise ValueError(f"depth must be >= 1, got {depth}")
        self._turn = turn = _Turn(items, depth)
        # (the context the consumer makes items in: the state a fresh thread has, e.g. torch's inference mode off)
        self._inline = inline if inline is not None else contextlib.nullcontext
        self._done = False
        self._items = 0  # items handed over in this phase
        self._phase = 0  # 0: timing the way items are made now, 1: timing the other, 2: keeping the faster
        self._handed = 0.0  # perf_counter when the last item was handed over
        self._cycles: list[float] = []  # the timed items' cycles (seconds from the item before)
        self._per_item: dict[bool, float] = {}  # median seconds per item handed over, by threaded, as last timed
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
        try:
            item = turn.out.get_nowait()
        except queue.Empty:
            item = turn.out.get() if turn.threaded.is_set() else self._make_here()
        if item is _END or isinstance(item, _Failure):
            self.close()
            if isinstance(item, _Failure):
                raise item.error
            raise StopIteration
        self._timed()
        return item  # type: ignore[return-value]  # (anything but the markers is the producer's item)

    def _make_here(self) -> object:
        """The next item, made by the consumer — or queued by the thread, which holds the turn lock until then."""
        turn = self._turn
        with turn.lock:
            try:
                return turn.out.get_nowait()
            except queue.Empty:
                with self._inline():
                    return turn.make()

    def _timed(self) -> None:
        """Times the items handed over and keeps the faster way of making them: the way it makes them now is timed,
        then the other, then the faster is kept for :data:`REPROBE_ITEMS` items (see the module)."""
        self._items += 1
        if self._phase < 2:
            now = _clock()
            if self._items > _WARM_ITEMS:
                self._cycles.append(now - self._handed)
            self._handed = now
        if self._items == _WARM_ITEMS + PROBE_ITEMS and self._phase < 2:
            turn = self._turn
            threaded = turn.threaded.is_set()
            # (the median: a chunk parse waited for once in the timing, whichever way makes the items, is not the
            # way's doing — with the mean it chose the consumer's way for a whole pass after the pass start's waits)
            self._per_item[threaded] = statistics.median(self._cycles)
            self._cycles = []
            self._items = 0
            self._phase += 1
            if self._phase == 1 or (self._per_item[False] < INLINE_MARGIN * self._per_item[True]) == threaded:
                if threaded:
                    turn.threaded.clear()
                else:
                    turn.threaded.set()
        elif self._phase == 2 and self._items >= REPROBE_ITEMS:
            self._items = self._phase = 0

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
            with turn.lock:  # (not while the consumer makes an item)
                close()  # (a generator's finally blocks run here, on this thread)


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
