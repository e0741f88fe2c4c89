"""The futures of produced records: one :class:`BatchOutcome` per batch, one light :class:`RecordFuture` per
record that reads it (``odradek.accumulator`` makes and completes them; ``Producer.send`` returns them).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
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
                if future._lists:  # a waiter (concurrent.futures.wait, as_completed) or a second callback
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
            log = _futures_log
            for future in watched:
                if future._lists:
                    future._invoke_callbacks()
                    continue
                fn = future._callback
                if fn is not None:
                    try:
                        fn(future)
                    except Exception:
                        log.exception("exception calling callback for %r", future)
        finally:
            with self.condition:
                self.settled = True
                self.condition.notify_all()


class RecordFuture(Future[RecordMetadata]):
    """The future of one produced record: its batch's :class:`BatchOutcome` (``batch_outcome``, public:
    ``odradek perf produce`` counts outcomes per batch with it), its index in the batch and its
    timestamp. Not cancellable (a record handed to the producer cannot be taken back): ``cancel``
    returns False; only the producer completes it (``set_result`` and ``set_exception`` raise).

    Creating and completing a future per record is a large part of a record's cost, so this class
    replaces the per-future state of :class:`concurrent.futures.Future` (CPython 3.11+ attributes) with
    views of the shared outcome: ``_condition`` is the outcome's condition, ``_state``, ``_exception`` and
    ``_result`` are read from it (``_result`` builds the RecordMetadata when asked), so creating a future
    sets three attributes and completing a batch touches none of its futures but the watched ones. The
    first callback is kept in ``_callback``; the ``_waiters`` and ``_done_callbacks`` lists are created on
    first use (``_lists`` says so): no list, and no instance ``__dict__``, for a future without them.
    tests/clients/test_accumulator.py checks the public behavior (result, exception, callbacks,
    ``concurrent.futures.wait`` and ``as_completed``) so a change in CPython shows up there.
    """

    _callback: Callable[[Future[RecordMetadata]], object] | None = None  # the first callback, once added
    _lists = False  # True once _waiters or _done_callbacks exists (the instance then is watched)

    def __init__(self, outcome: BatchOutcome, index: int, timestamp_ms: int) -> None:
        self.batch_outcome = outcome
        self._index = index
        self._timestamp_ms = timestamp_ms

    def __getattr__(self, name: str) -> Any:
        if name in _LAZY_LISTS:  # first use of _waiters or _done_callbacks (under the condition)
            if self._callback is None and not self._lists:
                self.batch_outcome.watched.append(self)
            created: list[Any] = []
            setattr(self, name, created)
            self._lists = True
            return created
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    # The state of concurrent.futures.Future, read from the outcome. Only Future.set_result and its kin
    # would write it: they raise (below), and so do these setters.

    @property
    def _condition(self) -> threading.Condition:
        return self.batch_outcome.condition

    @_condition.setter
    def _condition(self, value: threading.Condition) -> None:
        raise _only_the_producer()

    @property
    def _state(self) -> str:
        return _FINISHED if self.batch_outcome.done else _PENDING

    @_state.setter
    def _state(self, value: str) -> None:
        raise _only_the_producer()

    @property
    def _exception(self) -> BaseException | None:
        return self.batch_outcome.error

    @_exception.setter
    def _exception(self, value: BaseException | None) -> None:
        raise _only_the_producer()

    @property
    def _result(self) -> RecordMetadata | None:
        outcome = self.batch_outcome
        if not outcome.done or outcome.error is not None:
            return None
        topic, partition = outcome.tp
        base = outcome.base_offset
        stamp = outcome.log_append_time_ms
        return RecordMetadata(
            topic, partition, base + self._index if base >= 0 else -1, stamp if stamp >= 0 else self._timestamp_ms
        )

    @_result.setter
    def _result(self, value: RecordMetadata | None) -> None:
        raise _only_the_producer()

    def add_done_callback(self, fn: Callable[[Future[RecordMetadata]], object]) -> None:
        """As ``Future.add_done_callback`` (run at once if done), with the condition's C-level lock calls.
        The first callback is kept in a plain attribute (no list: one object less per record)."""
        outcome = self.batch_outcome
        condition = outcome.condition
        condition.acquire()
        try:
            if not outcome.done:
                if self._callback is None and not self._lists:
                    self._callback = fn
                    outcome.watched.append(self)
                else:
                    self._done_callbacks.append(fn)
                return
        finally:
            condition.release()
        try:
            fn(self)
        except Exception:
            _futures_log.exception("exception calling callback for %r", self)

    def _invoke_callbacks(self) -> None:
        """Run the callbacks in the order they were added (the first one, then the list)."""
        fn = self._callback
        if fn is not None:
            try:
                fn(self)
            except Exception:
                _futures_log.exception("exception calling callback for %r", self)
        if self._lists:
            for fn in self._done_callbacks:
                try:
                    fn(self)
                except Exception:
                    _futures_log.exception("exception calling callback for %r", self)

    def cancel(self) -> bool:
        return False

    def set_running_or_notify_cancel(self) -> bool:
        raise _only_the_producer()

    def set_result(self, result: RecordMetadata) -> None:
        raise _only_the_producer()

    def set_exception(self, exception: BaseException | None) -> None:
        raise _only_the_producer()


def _only_the_producer() -> InvalidStateError:
    return InvalidStateError("a record's future is completed by the producer only")


_futures_log = logging.getLogger("concurrent.futures")
_LAZY_LISTS = frozenset(("_waiters", "_done_callbacks"))
_INDEX = attrgetter("_index")
_PENDING = "PENDING"
_FINISHED = "FINISHED"
