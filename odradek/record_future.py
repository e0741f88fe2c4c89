"""The futures of produced records: one :class:`BatchOutcome` per batch, one light :class:`RecordFuture` per
record that reads it (``odradek.accumulator`` makes and completes them; ``Producer.send`` returns them).

The boundary with CPython's ``concurrent.futures``
--------------------------------------------------

``Producer.send`` returns a ``concurrent.futures.Future`` (docs/INTERFACE.md), so :class:`RecordFuture` is
one (``isinstance`` holds), but creating and completing a standard future per record is a large part of a
record's cost (a ``threading.Condition`` per record, a lock and a notify per record at completion). So a
:class:`RecordFuture` does not run ``Future.__init__`` and keeps no state of its own: it reads its batch's
:class:`BatchOutcome`. Every public method of ``Future`` (and ``__repr__``) is overridden here and works
from the outcome alone; none of ``Future``'s own code ever runs on a record's future.

What cannot be overridden is ``concurrent.futures.wait`` and ``as_completed``: they are module functions
that use three private attributes of each future they are given, and a waiter protocol. This module
provides exactly these, and nothing else of ``Future``'s internals:

- ``_condition``: acquired and released around reading the state and installing or removing a waiter
  (here: the batch's condition, a property);
- ``_state``: compared with ``FINISHED`` (and ``CANCELLED_AND_NOTIFIED``) of ``concurrent.futures._base``
  (here: a property read from the outcome);
- ``_waiters``: a list a waiter is appended to and removed from under ``_condition`` (here: created on
  first use; the future is then "watched" by its outcome);
- the waiters: completing a future calls ``waiter.add_result(future)`` or ``waiter.add_exception(future)``
  for each waiter, under ``_condition`` (:meth:`BatchOutcome.resolve`), as ``Future.set_result`` and
  ``Future.set_exception`` do.

``tests/clients/test_record_future_boundary.py`` pins this boundary: it reads the source of
``concurrent.futures._base`` (``wait``, ``as_completed`` and their helpers, ``Future.set_result``,
``Future.set_exception``) and fails, naming what changed, when the private attributes they use or the
waiter calls differ from the list above, or when ``Future`` gains a public method this class does not
override. On such a Python this module must be revisited before the producer is used.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from concurrent.futures._base import FINISHED, PENDING  # the states wait() and as_completed() compare
from operator import attrgetter
from typing import Any

from odradek.types import RecordMetadata, TopicPartition


class BatchOutcome:
    """How one batch ended, shared by its records' futures: its base offset (and log append time), or the
    error that failed it. It holds no record and no bytes, so a future kept by the application does not
    keep its batch's data alive.

    Completing a batch is O(1) in its records: each :class:`RecordFuture` builds its RecordMetadata from
    the outcome when asked. Only the futures that have a callback or a waiter (``watched``) are visited,
    and their callbacks run in record order. The futures are done (``done``) before their callbacks run,
    as ``concurrent.futures`` has it; the batch is ``settled`` once they have run, which ``flush`` waits
    for, as Kafka's does.

    Thread-safety: ``resolve`` runs once, from the sender thread, under ``condition`` (the callbacks
    outside it); the futures read the outcome under it (or after seeing ``done`` under it).
    """

    __slots__ = ("tp", "condition", "done", "settled", "base_offset", "log_append_time_ms", "error", "watched")

    def __init__(self, tp: TopicPartition) -> None:
        self.tp = tp
        self.condition = threading.Condition()
        self.done = False
        self.settled = False  # done, and the callbacks have run
        self.base_offset = -1  # the first record's offset; -1 with acks=0 or for a duplicate
        self.log_append_time_ms = -1  # >= 0: the broker's LogAppendTime, every record's timestamp
        self.error: BaseException | None = None
        self.watched: list[RecordFuture] = []  # futures with a callback or a waiter (registered under condition)

    def resolve(self, base_offset: int, log_append_time_ms: int, error: BaseException | None) -> None:
        """Complete every future of the batch (once): wake its waiters, then run its callbacks in order."""
        with self.condition:
            if self.done:
                return
            self.base_offset = base_offset
            self.log_append_time_ms = log_append_time_ms
            self.error = error
            self.done = True
            watched = self.watched
            self.watched = []
            for future in watched:
                if future._has_waiters:  # the waiter protocol of wait() and as_completed() (module docstring)
                    for waiter in future._waiters:
                        if error is None:
                            waiter.add_result(future)
                        else:
                            waiter.add_exception(future)
            self.settled = not watched
            self.condition.notify_all()
        if not watched:
            return
        try:
            watched.sort(key=_INDEX)  # registration order may differ from send order: callbacks go in send order
            for future in watched:
                future._invoke_callbacks()
        finally:
            with self.condition:
                self.settled = True
                self.condition.notify_all()

    def wait_done(self, timeout_s: float | None) -> bool:
        """Wait until the batch is done (not its callbacks); False when ``timeout_s`` passed first."""
        with self.condition:
            return self.condition.wait_for(self._is_done, timeout_s)

    def _is_done(self) -> bool:
        return self.done


class RecordFuture(Future[RecordMetadata]):
    """The future of one produced record: its batch's :class:`BatchOutcome` (``batch_outcome``, public:
    ``odradek perf produce`` counts outcomes per batch with it), its index in the batch and its
    timestamp. Not cancellable (a record handed to the producer cannot be taken back): ``cancel``
    returns False; only the producer completes it (``set_result`` and ``set_exception`` raise).

    Creating a future sets three attributes; completing a batch touches none of its futures but the
    watched ones. The first callback is kept in ``_callback``; the ``_waiters`` list (for ``wait`` and
    ``as_completed``) and the ``_more_callbacks`` list are created on first use. See the module docstring
    for what of ``concurrent.futures.Future`` this class relies on (its boundary).
    """

    _callback: Callable[[Future[RecordMetadata]], object] | None = None  # the first callback, once added
    _more_callbacks: list[Callable[[Future[RecordMetadata]], object]] | None = None  # the later ones
    _has_waiters = False  # True once _waiters exists
    # Watched by its outcome (in ``BatchOutcome.watched``): once it has a callback or _waiters.

    def __init__(self, outcome: BatchOutcome, index: int, timestamp_ms: int) -> None:
        # Future.__init__ is not called on purpose: no per-record condition (module docstring).
        self.batch_outcome = outcome
        self._index = index
        self._timestamp_ms = timestamp_ms

    # ----------------------------------------------------- the state wait() and as_completed() read

    @property
    def _condition(self) -> threading.Condition:
        return self.batch_outcome.condition

    @_condition.setter
    def _condition(self, value: threading.Condition) -> None:
        raise _only_the_producer()  # only Future's own code writes it, and none of it runs here

    @property
    def _state(self) -> str:
        return FINISHED if self.batch_outcome.done else PENDING

    @_state.setter
    def _state(self, value: str) -> None:
        raise _only_the_producer()

    def __getattr__(self, name: str) -> Any:
        if name == "_waiters":  # first use, by wait() or as_completed(), under the condition
            if self._callback is None:
                self.batch_outcome.watched.append(self)
            waiters: list[Any] = []
            self._waiters = waiters
            self._has_waiters = True
            return waiters
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    # ------------------------------------------------------------------------- Future's public API

    def done(self) -> bool:
        return self.batch_outcome.done

    def cancelled(self) -> bool:
        return False

    def running(self) -> bool:
        return False

    def cancel(self) -> bool:
        return False

    def result(self, timeout: float | None = None) -> RecordMetadata:
        """As ``Future.result``: the record's RecordMetadata, or its batch's error raised; TimeoutError when
        ``timeout`` seconds pass first."""
        error = self.exception(timeout)
        if error is not None:
            try:
                raise error
            finally:
                del error  # as Future: no reference cycle through the traceback
        outcome = self.batch_outcome
        topic, partition = outcome.tp
        base = outcome.base_offset
        stamp = outcome.log_append_time_ms
        return RecordMetadata(
            topic, partition, base + self._index if base >= 0 else -1, stamp if stamp >= 0 else self._timestamp_ms
        )

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """As ``Future.exception``: the batch's error, or None once done; TimeoutError when ``timeout`` seconds
        pass first."""
        outcome = self.batch_outcome
        if not outcome.done and not outcome.wait_done(timeout):
            raise TimeoutError()
        return outcome.error

    def add_done_callback(self, fn: Callable[[Future[RecordMetadata]], object]) -> None:
        """As ``Future.add_done_callback`` (run at once if done), with the condition's C-level lock calls.
        The first callback is kept in a plain attribute (no list: one object less per record)."""
        outcome = self.batch_outcome
        condition = outcome.condition
        condition.acquire()
        try:
            if not outcome.done:
                if self._callback is None:
                    if not self._has_waiters:
                        outcome.watched.append(self)
                    self._callback = fn
                elif self._more_callbacks is None:
                    self._more_callbacks = [fn]
                else:
                    self._more_callbacks.append(fn)
                return
        finally:
            condition.release()
        _call(fn, self)

    def _invoke_callbacks(self) -> None:
        """Run the callbacks in the order they were added (the first one, then the others)."""
        fn = self._callback
        if fn is not None:
            _call(fn, self)
            more = self._more_callbacks
            if more is not None:
                for fn in more:
                    _call(fn, self)

    def set_running_or_notify_cancel(self) -> bool:
        raise _only_the_producer()

    def set_result(self, result: RecordMetadata) -> None:
        raise _only_the_producer()

    def set_exception(self, exception: BaseException | None) -> None:
        raise _only_the_producer()

    def __repr__(self) -> str:
        """As ``Future.__repr__``."""
        outcome = self.batch_outcome
        with outcome.condition:
            if not outcome.done:
                return f"<{type(self).__name__} at {id(self):#x} state=pending>"
            if outcome.error:
                return f"<{type(self).__name__} at {id(self):#x} state=finished raised {type(outcome.error).__name__}>"
            return f"<{type(self).__name__} at {id(self):#x} state=finished returned RecordMetadata>"


def _call(fn: Callable[[Future[RecordMetadata]], object], future: RecordFuture) -> None:
    """Run a done-callback; an exception is logged, as ``concurrent.futures`` does."""
    try:
        fn(future)
    except Exception:
        _futures_log.exception("exception calling callback for %r", future)


def _only_the_producer() -> InvalidStateError:
    return InvalidStateError("a record's future is completed by the producer only")


_futures_log = logging.getLogger("concurrent.futures")
_INDEX = attrgetter("_index")


FOLD_EVERY = 1 << 16  # records noted between two folds of an OutcomeTally (bounds its memory)


class OutcomeTally:
    """Every record's outcome, counted per batch, without a callback per record (``odradek perf produce``, the
    Spark sink). The send loop appends each record's ``batch_outcome`` to
    ``outcomes``; ``fold`` (main thread) counts them by batch, and tallies the batches that are done:
    delivered, or failed (``first_error``: the first failure folded). Folding every FOLD_EVERY records
    keeps the memory to the batches still in flight.

    The sender thread resolves an outcome (``error``, then ``done``) while the main thread folds: an
    outcome seen ``done`` has its ``error`` set."""

    def __init__(self) -> None:
        self.outcomes: list[BatchOutcome] = []  # per record noted since the last fold
        self.pending: Counter[BatchOutcome] = Counter()  # records per batch outcome not done when last folded
        self.delivered = 0
        self.failed = 0
        self.first_error: BaseException | None = None

    def fold(self) -> None:
        pending = self.pending
        pending.update(self.outcomes)
        self.outcomes.clear()
        for outcome, records in list(pending.items()):
            if not outcome.done:
                continue
            del pending[outcome]
            if outcome.error is None:
                self.delivered += records
            else:
                self.failed += records
                self.first_error = self.first_error or outcome.error
