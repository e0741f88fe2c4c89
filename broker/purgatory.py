"""The purgatory: requests that wait for a condition or a timeout (Kafka's ``DelayedOperation``).

One generic mechanism (docs/CONVENTIONS.md §5). A :class:`DelayedOperation` says when it can complete
(:meth:`~DelayedOperation.try_complete`), what completing does (:meth:`~DelayedOperation.on_complete`, run
exactly once) and what an expiry adds (:meth:`~DelayedOperation.on_expiration`). A :class:`Purgatory` holds
the operations that could not complete at once, watched under keys (a ``(topic, partition)``), and a timer:

* ``try_complete_else_watch(op, keys)``: try; else watch ``op`` under ``keys`` and start its timer. It tries
  once more after watching, so an event that happened between the first try and the watch is not missed
  (Kafka's order).
* ``check_and_complete(key)``: something changed under ``key`` (an append, a high watermark move, a
  leadership change): every operation watching it tries again.
* ``hold(op)``: an operation whose owner hears of the changes it waits for by other means (a fetch session's
  listener) is kept under no key: its timer, a shutdown or its owner completes it.
* the timer expires operations whose ``delay_ms`` passed: ``force_complete`` then ``on_expiration``.

Exactly once: completion is a test-and-set (a non-blocking ``Lock.acquire``); whichever of a check, the
timer or a shutdown wins runs ``on_complete``, the others do nothing. ``try_complete`` itself runs under the
operation's own lock, so two checkers never evaluate one operation at the same time.

Bounded: at most ``max_operations`` operations are watched; an operation over the bound completes at once
(its ``on_complete`` answers with what there is, as if it had expired immediately).

Time comes from an injected :class:`~common.clock.Clock` (monotonic milliseconds). :meth:`Purgatory.expire_due`
expires what is due by that clock, so tests drive expiry with a ``ManualClock`` and no thread; a running
broker calls :meth:`Purgatory.start`, which starts the one reaper thread (a heap of deadlines).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Iterable
from typing import Any, Generic, TypeVar

from common.clock import Clock

logger = logging.getLogger(__name__)

Key = Hashable
Op = TypeVar("Op", bound="DelayedOperation")
_REAPER_MAX_SLEEP_S = 1.0  # the reaper re-reads the clock at least this often


class DelayedOperation(ABC):
    """A request waiting in a purgatory. Subclasses implement the three hooks below.

    Thread-safety: ``try_complete`` is called under the operation's lock (one checker at a time, from any
    thread); ``force_complete`` may race from any number of threads and runs ``on_complete`` exactly once;
    ``wait`` may be called from any thread (the request's own, typically).
    """

    def __init__(self, delay_ms: float) -> None:
        self.delay_ms = max(0.0, float(delay_ms))
        self._check_lock = threading.RLock()  # re-entrant: on_complete may take it to read try_complete's work
        self._completion = threading.Lock()  # acquired exactly once: by whoever completes the operation
        self._done = False  # guarded by _check_lock; set once completed
        self._waiter: threading.Event | None = None  # made by the first wait() (most operations have none)
        self._callbacks: list[Callable[[], None]] = []  # run once completed (a long poll's wakeup)
        self._expired = False
        self._purgatory: Purgatory[Any] | None = None
        self._keys: tuple[Key, ...] = ()

    # --- the hooks -------------------------------------------------------------------------------

    @abstractmethod
    def try_complete(self) -> bool:
        """Check the completion condition; if it holds, ``return self.force_complete()``, else False."""

    @abstractmethod
    def on_complete(self) -> None:
        """Complete the operation (build its answer). Runs exactly once, on the thread that completed it."""

    def on_expiration(self) -> None:  # noqa: B027 (a hook with a default: most operations need nothing)
        """Called once after ``on_complete`` when the timer completed the operation."""

    # --- completion ------------------------------------------------------------------------------

    def force_complete(self) -> bool:
        """Complete now unless already completed; True when this call did it (and ran ``on_complete``)."""
        return self._complete(expired=False)

    def _complete(self, *, expired: bool) -> bool:
        if not self._completion.acquire(blocking=False):
            return False
        self._expired = expired
        try:
            self.on_complete()
        finally:
            with self._check_lock:
                self._done = True
                waiter = self._waiter
                callbacks, self._callbacks = self._callbacks, []
            if waiter is not None:
                waiter.set()
            purgatory = self._purgatory
            if purgatory is not None:
                purgatory._forget(self)
            for callback in callbacks:
                callback()
        return True

    def safe_try_complete(self) -> bool:
        """``try_complete`` under the operation's lock; False at once when already completed."""
        with self._check_lock:
            return not self.is_completed and self.try_complete()

    def expire(self) -> bool:
        """The timer's path: complete as expired, then ``on_expiration``; True when this call completed it."""
        if not self._complete(expired=True):
            return False
        self.on_expiration()
        return True

    @property
    def is_completed(self) -> bool:
        return self._completion.locked()

    @property
    def expired(self) -> bool:
        """Whether the timer (or the bound) completed the operation rather than its condition."""
        return self._expired

    def wait(self, timeout_s: float | None) -> bool:
        """Block until completed (True) or ``timeout_s`` passes (False)."""
        with self._check_lock:
            if self._done:
                return True
            if self._waiter is None:  # an Event costs ~2 µs: only an operation a thread waits for gets one
                self._waiter = threading.Event()
            waiter = self._waiter
        return waiter.wait(timeout_s)

    def add_done_callback(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` once completed (at once when already): how an ``asyncio`` long poll waits
        without a thread. It runs on the completing thread and must not block."""
        with self._check_lock:
            if not self._done:
                self._callbacks.append(callback)
                return
        callback()


class DeadlineHeap:
    """Deadlines of operations, earliest first (the timer's data structure). Pure; not thread-safe.

    Completed operations are dropped lazily when they reach the top, and all at once when they outnumber
    the live ones (so a purgatory whose operations mostly complete early stays small).
    """

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, DelayedOperation]] = []
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._heap)

    def add(self, op: DelayedOperation, deadline_ms: float) -> None:
        heapq.heappush(self._heap, (deadline_ms, next(self._seq), op))

    def next_deadline(self) -> float | None:
        while self._heap and self._heap[0][2].is_completed:
            heapq.heappop(self._heap)
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now_ms: float) -> list[DelayedOperation]:
        """Every live operation whose deadline is at or before ``now_ms``, earliest first."""
        due = []
        while self._heap and self._heap[0][0] <= now_ms:
            op = heapq.heappop(self._heap)[2]
            if not op.is_completed:
                due.append(op)
        return due

    def purge(self, live: int) -> None:
        if len(self._heap) > 2 * live + 1024:
            self._heap = [entry for entry in self._heap if not entry[2].is_completed]
            heapq.heapify(self._heap)


class Purgatory(Generic[Op]):
    """Operations of one kind (fetch, produce, ...) waiting under keys, with their timer.

    Thread-safety: every method may be called from any thread. One lock guards the watcher map, the live
    set and the timer heap; no operation hook ever runs under it (hooks take partition locks).
    """

    def __init__(self, name: str, clock: Clock, max_operations: int) -> None:
        if max_operations < 0:
            raise ValueError(f"max_operations must be >= 0, got {max_operations}")
        self.name = name
        self.max_operations = max_operations
        self._clock = clock
        self._lock = threading.Lock()  # taken directly: ``with`` on the Condition adds a Python call each time
        self._cond = threading.Condition(self._lock)  # the reaper's wait for the next deadline
        self._watchers: dict[Key, dict[int, Op]] = {}
        self._live: dict[int, Op] = {}
        self._timer = DeadlineHeap()
        # when the reaper, waiting, will look at the heap again by itself (-inf while it is not waiting): a new
        # deadline wakes it only when earlier, so parking an operation costs no thread switch (a long poll's
        # deadline is almost always later than the reaper's next look)
        self._reaper_looks_ms = -math.inf
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._listeners: dict[Key, dict[int, Callable[[Key], None]]] = {}

    # --- watching --------------------------------------------------------------------------------

    def try_complete_else_watch(self, op: Op, keys: Iterable[Key], *, first_try: bool = True) -> bool:
        """Complete ``op`` now if it can; else watch it under ``keys`` until it completes or expires.

        True when ``op`` is completed on return (including over the bound, where it completes at once).
        ``first_try`` False: the caller has just looked and found it cannot complete (a fetch whose read found
        nothing), so it is watched at once and tried once after (an event since the caller looked is caught
        there, as by the second try of the usual order).
        """
        keys = tuple(dict.fromkeys(keys))
        if not keys:
            raise ValueError("an operation is watched under at least one key")
        if first_try and op.safe_try_complete():
            return True
        with self._lock:
            over = self._stopping or len(self._live) >= self.max_operations
            if not over:
                op._purgatory = self
                op._keys = keys
                self._live[id(op)] = op
                for key in keys:
                    self._watchers.setdefault(key, {})[id(op)] = op
        if over:
            return self._over_bound(op)
        if op.safe_try_complete():  # an event between the first try and the watch
            return True
        with self._lock:
            if not op.is_completed:
                self._start_timer(op)
        return op.is_completed

    def hold(self, op: Op) -> bool:
        """Watch ``op`` under no key: only its timer, a shutdown, the bound or its owner completes it. For an
        operation whose owner hears of every change it waits for by other means and completes it then (a fetch
        session's parked fetch: its listener of the session's partitions, ``broker.fetch_session``), so no
        :meth:`check_and_complete` tries it. True when ``op`` is completed on return (over the bound it
        completes at once, as in :meth:`try_complete_else_watch`)."""
        with self._lock:
            over = self._stopping or len(self._live) >= self.max_operations
            if not over:
                op._purgatory = self
                op._keys = ()
                self._live[id(op)] = op
                self._start_timer(op)
        if over:
            return self._over_bound(op)
        return op.is_completed

    def _start_timer(self, op: Op) -> None:
        """``op``'s deadline on the timer (under our lock); the reaper is woken only when it is earlier than the
        reaper's next look."""
        deadline = self._clock.monotonic_ms() + op.delay_ms
        self._timer.add(op, deadline)
        if deadline < self._reaper_looks_ms:
            self._cond.notify()

    def _over_bound(self, op: Op) -> bool:
        """``op`` was not watched (the bound, or shutting down): it completes at once, as if expired."""
        if not self._stopping:
            logger.warning("%s purgatory holds %d operations: answering at once", self.name, self.max_operations)
        return op.expire() or True

    def check_and_complete(self, key: Key) -> int:
        """Every operation watching ``key`` tries to complete, then every listener of ``key`` hears of it;
        returns how many operations completed."""
        with self._lock:
            watching = self._watchers.get(key)
            ops = list(watching.values()) if watching else ()
            heard = self._listeners.get(key)
            listeners = list(heard.values()) if heard else ()
        completed = sum(1 for op in ops if op.safe_try_complete())
        for listener in listeners:
            try:
                listener(key)
            except Exception:  # a bug in a listener: the change itself (an append, a move) must not fail
                logger.exception("%s purgatory: a listener of %s failed", self.name, key)
        return completed

    def listen(self, key: Key, token: int, listener: Callable[[Key], None]) -> None:
        """Call ``listener(key)`` after each :meth:`check_and_complete` of ``key`` until :meth:`unlisten` with
        the same ``token`` (a fetch session's interest in its partitions: ``broker.fetch_session``). It runs
        on the thread that made the change, never under this purgatory's lock, and must be short."""
        with self._lock:
            self._listeners.setdefault(key, {})[token] = listener

    def listeners(self, key: Key) -> int:
        """How many listen to ``key`` now."""
        with self._lock:
            return len(self._listeners.get(key, ()))

    def unlisten(self, key: Key, token: int) -> None:
        with self._lock:
            heard = self._listeners.get(key)
            if heard is not None:
                heard.pop(token, None)
                if not heard:
                    del self._listeners[key]

    def _forget(self, op: DelayedOperation) -> None:
        """A completed operation leaves the watcher lists (called by the operation, never under our lock)."""
        with self._lock:
            if self._live.pop(id(op), None) is None:
                return
            for key in op._keys:
                watching = self._watchers.get(key)
                if watching is not None:
                    watching.pop(id(op), None)
                    if not watching:
                        del self._watchers[key]

    @property
    def size(self) -> int:
        """Operations watched now (not yet completed)."""
        return len(self._live)

    def watched(self, key: Key) -> int:
        with self._lock:
            return len(self._watchers.get(key, ()))

    # --- the timer -------------------------------------------------------------------------------

    def expire_due(self) -> int:
        """Expire every operation whose deadline passed by the clock; returns how many this call expired."""
        with self._lock:
            due = self._timer.pop_due(self._clock.monotonic_ms())
            self._timer.purge(len(self._live))
        return sum(1 for op in due if op.expire())

    def next_deadline_ms(self) -> float | None:
        with self._lock:
            return self._timer.next_deadline()

    def start(self) -> None:
        """Start the reaper thread (a real clock's job; ManualClock tests call ``expire_due``)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._reap, name=f"purgatory-{self.name}", daemon=True)
            self._thread.start()

    def _reap(self) -> None:
        while True:
            with self._lock:
                if self._stopping:
                    return
                deadline = self._timer.next_deadline()
                now_ms = self._clock.monotonic_ms()
                wait_ms = _REAPER_MAX_SLEEP_S * 1000 if deadline is None else deadline - now_ms
                if wait_ms > 0:
                    wait_ms = min(wait_ms, _REAPER_MAX_SLEEP_S * 1000)
                    self._reaper_looks_ms = now_ms + wait_ms
                    self._cond.wait(wait_ms / 1000.0)
                    self._reaper_looks_ms = -math.inf
                    continue
            try:
                self.expire_due()
            except Exception:  # a bug in a hook: keep the reaper alive, the others still need it
                logger.exception("%s purgatory: an expiration failed", self.name)

    def shutdown(self) -> None:
        """Stop the reaper and complete every waiting operation now (each answers with what there is)."""
        with self._lock:
            self._stopping = True
            self._cond.notify_all()
            ops = list(self._live.values())
        for op in ops:
            op.expire()
        if self._thread is not None:
            self._thread.join(5.0)
