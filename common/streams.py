"""Requests on one long-lived gRPC stream instead of a unary call each: a follower's and a consumer's fetches
(:class:`LockstepStream`), a producer's Produce requests (:class:`OrderedStream`).

A unary call sets up a gRPC call each time (headers, trailers, a call object on both sides); on a stream a
request is one message each way. Measured on this machine with grpcio's synchronous client against its
``asyncio`` server (one process, 3,000 lockstep round trips of 200 B): a unary call 330-390 µs of CPU and
400-900 µs of wall time, a message pair on a stream 190-250 µs and 260-360 µs.

Both keep the semantics of the unary calls they replace:

- **Answers in order.** The server answers a stream's requests one by one, in the order they came (as a
  Kafka broker answers the requests of one connection), so no request needs an id.
- **Deadlines.** A request is answered within its timeout or fails: a watchdog thread cancels a stream
  whose awaited answer is late (a paused or cut-off peer), which fails every request waiting on it with
  the stream's ``grpc.RpcError`` (CANCELLED), as a unary call fails with DEADLINE_EXCEEDED; Kafka's client
  does the same with a connection whose request timed out.
- **A broken stream** (the peer restarted, the connection was reset, the peer ended it) fails the requests
  waiting on it (:class:`StreamEnded` when the peer ended the stream without an error), which their
  callers retry with their usual backoff; the next request opens a new stream.
- **Fallback.** A peer without the streaming method (UNIMPLEMENTED, before any answer: an older broker, a
  proxy for unary calls only, a broker with the stream switched off) gets unary calls from then on; an
  :class:`OrderedStream` sends the requests that were waiting on the refused stream again as unary calls,
  in their order (the peer never saw them). A stream that fails otherwise before its first answer is
  followed by unary calls until one ends (a probe): answered, the path breaks streams but not calls (a
  proxy, a middlebox); not answered, the peer is down. After ``BROKEN_STREAMS`` such streams in a row with
  the unary calls answered, unary calls are used for ``UNARY_FALLBACK_S`` and then the stream is tried
  again; a peer that was merely down gets the stream again at once. Requests never overtake each other
  across a switch: the switch back to the stream waits until no unary call is in flight, and the switch to
  unary calls comes when the failed stream's requests have all failed.

Thread-safety: :meth:`LockstepStream.call` from one thread at a time; :meth:`OrderedStream.start` from one
thread (the producer's sender, which keeps the order); ``close`` from any.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, InvalidStateError
from typing import Any

import grpc

logger = logging.getLogger(__name__)

WATCHDOG_INTERVAL_S = 0.1  # how often the watchdog looks for a late answer
BROKEN_STREAMS = 3  # streams in a row broken before their first answer, unary calls answered: a fallback
UNARY_FALLBACK_S = 30.0  # ... to unary calls for this long, then the stream again
_END = object()  # ends the request stream
_Pending = tuple[Future[Any], Any, float, float]  # an OrderedStream's request: (future, request, timeout, deadline)
_REFUSALS = (grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED)


class StreamEnded(grpc.RpcError):  # type: ignore[misc]
    """The peer ended the stream while a request waited for its answer (as a lost connection: retriable)."""


def is_unimplemented(exc: BaseException) -> bool:
    return bool(_code(exc) == grpc.StatusCode.UNIMPLEMENTED)


class _Stream:
    """What both kinds share: the stream's request queue and response iterator, opened on demand, ended on a
    failure; the watchdog that cancels a stream whose answer is late; and when to make unary calls instead
    (the module docstring, "Fallback")."""

    def __init__(self, stub: Any, name: str, stream_method: str, unary_method: str) -> None:
        self._stub = stub
        self._name = name
        self._stream_method = stream_method
        self._unary_method = unary_method
        self._requests: queue.SimpleQueue[object] | None = None
        self._responses: Any = None  # the stream's response iterator (a grpc call object)
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._watchdog: threading.Thread | None = None
        self.unary = False  # the peer has no such stream: unary calls from now on
        self._probing = False  # a stream failed before its first answer: unary calls until they are answered
        self._probe_answered = False  # a unary call made while probing was answered
        self._broken = 0  # streams in a row that failed before an answer while unary calls were answered
        self._unary_until = 0.0  # a stream-breaking path: unary calls until this monotonic time
        self._unary_in_flight = 0

    # ------------------------------------------------------------------------ stream or unary

    def _unary_now_locked(self) -> bool:
        """Whether the next request goes as a unary call (counted in flight if so). The switch back to the
        stream waits until no unary call is in flight, so a later request never overtakes an earlier one."""
        if self.unary or self._probing:
            use = True
        elif self._unary_until:
            use = time.monotonic() < self._unary_until or self._unary_in_flight > 0
            if not use:
                logger.info("%s: trying the %s stream again", self._name, self._stream_method)
                self._unary_until, self._broken = 0.0, 0
        else:
            use = False
        if use:
            self._unary_in_flight += 1
        return use

    def _unary_done(self, answered: bool) -> None:
        """A unary call counted by :meth:`_unary_now_locked` ended (``answered``: with an answer)."""
        with self._lock:
            self._unary_in_flight -= 1
            self._probe_answered |= answered
            if self._unary_in_flight or not self._probing:
                return
            self._probing = False
            if not self._probe_answered:  # the peer is unreachable, not the stream broken: the stream again
                self._broken = 0
                return
            self._probe_answered = False
            self._broken += 1
            if self._broken >= BROKEN_STREAMS:
                self._unary_until = time.monotonic() + UNARY_FALLBACK_S
                logger.warning("%s: %d %s streams in a row failed before an answer while unary calls were "
                               "answered: unary calls for %.0f s", self._name, self._broken, self._stream_method,
                               UNARY_FALLBACK_S)  # fmt: skip

    def _stream_failed_locked(self, answered: bool, error: BaseException) -> BaseException:
        """A stream ended with ``error`` (``answered``: after at least one answer); what the requests waiting
        on it fail with. Before its first answer, a failure other than a refusal is retriable whatever its
        status (:class:`StreamEnded`): a path that breaks streams can fail them with any status, and the
        retry goes as a unary call, which gets the peer's own answer."""
        if answered or self._closed.is_set() or _code(error) in _REFUSALS:  # a refusal is the peer's answer
            return error
        if is_unimplemented(error):
            logger.info("%s: the peer has no %s: unary calls from now on", self._name, self._stream_method)
            self.unary = True
            return error
        self._probing = True
        if isinstance(error, StreamEnded):
            return error
        details = error.details() if isinstance(error, grpc.Call) else str(error)
        return StreamEnded(f"{self._name}: the {self._stream_method} stream failed before its first answer "
                           f"({_code(error)}: {details})")  # fmt: skip

    # ------------------------------------------------------------------------------ the stream

    def _open_locked(self) -> tuple[queue.SimpleQueue[object], Any]:
        if self._closed.is_set():
            raise RuntimeError(f"{self._name}: the stream is closed")
        requests: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._requests = requests
        self._responses = getattr(self._stub, self._stream_method)(_drain(requests))
        if self._watchdog is None:
            self._watchdog = threading.Thread(target=self._watch, name=f"{self._name}-watchdog", daemon=True)
            self._watchdog.start()
        return requests, self._responses

    def _end_locked(self) -> None:
        if self._requests is not None:
            self._requests.put(_END)
        if self._responses is not None:
            self._responses.cancel()
        self._requests = self._responses = None

    def _late_deadline(self) -> float:
        """The deadline of the awaited answer that is due first (0: none awaited)."""
        raise NotImplementedError

    def _watch(self) -> None:
        """Cancel the stream whose awaited answer is late (the waiting requests then fail)."""
        while not self._closed.wait(WATCHDOG_INTERVAL_S):
            with self._lock:
                deadline = self._late_deadline()
                if deadline and time.monotonic() > deadline and self._responses is not None:
                    logger.info("%s: no answer on the %s stream in time: cancelling it", self._name,
                                self._stream_method)  # fmt: skip
                    self._responses.cancel()

    def close(self) -> None:
        """End the stream (waiting requests fail) and the watchdog."""
        with self._lock:
            self._closed.set()
            self._end_locked()
        watchdog = self._watchdog
        if watchdog is not None and watchdog is not threading.current_thread():
            watchdog.join(1.0)


class LockstepStream(_Stream):
    """One request at a time on one stream, each waiting for its answer: a unary call's semantics
    (a follower's ``ReplicaFetch``); see the module docstring."""

    def __init__(self, stub: Any, name: str, stream_method: str = "ReplicaFetch", unary_method: str = "Fetch") -> None:
        super().__init__(stub, name, stream_method, unary_method)
        self._deadline = 0.0  # monotonic time by which the awaited answer is late; 0: none awaited
        self._answered = False  # the current stream answered at least once

    def _late_deadline(self) -> float:
        return self._deadline

    def call(self, request: Any, timeout: float) -> Any:
        """Send ``request`` and return its answer; ``grpc.RpcError`` on failure (the same signature as a unary
        stub method's, so it can run where one does)."""
        with self._lock:
            unary = self._unary_now_locked()
            if not unary:
                if self._responses is None:
                    self._open_locked()
                requests, responses = self._requests, self._responses
                self._deadline = time.monotonic() + timeout
        if unary:
            answered = False
            try:
                response = getattr(self._stub, self._unary_method)(request, timeout=timeout)
                answered = True
                return response
            finally:
                self._unary_done(answered)
        assert requests is not None
        requests.put(request)
        try:
            response = next(responses)
        except StopIteration:  # the peer ended the stream: as a lost connection
            raise self._failed(responses, StreamEnded(f"{self._name}: the peer ended the {self._stream_method} "
                                                      "stream")) from None  # fmt: skip
        except grpc.RpcError as exc:
            delivered = self._failed(responses, exc)
            if delivered is exc:
                raise
            raise delivered from exc
        finally:
            self._deadline = 0.0
        self._answered = True
        self._broken = 0
        return response

    def _failed(self, responses: Any, error: BaseException) -> BaseException:
        with self._lock:
            if self._responses is responses:
                self._end_locked()
            answered, self._answered = self._answered, False
            return self._stream_failed_locked(answered, error)


class OrderedStream(_Stream):
    """Requests pipelined on one stream (several awaiting their answers), answered in order (a producer's
    ``ProduceStream``, a consumer's ``FetchStream``); see the module docstring. :meth:`start` returns a
    future as a unary stub's ``.future()`` does: ``result()`` is the answer or raises, done-callbacks get the
    future, ``cancel()`` gives up on the answer (the request may still have been handled).

    A refusal (PERMISSION_DENIED, UNAUTHENTICATED: ``controller/security/interceptor.py``) is the answer of
    the oldest waiting request: the peer answered every request before it and read none after it, so the
    later ones are sent again on a new stream, in their order."""

    def __init__(
        self, stub: Any, name: str, stream_method: str, unary_method: str,
        unary_start: Callable[[Any, float], Any] | None = None,
    ) -> None:  # fmt: skip
        """``unary_start(request, timeout)`` starts a unary call where the stream is not used (a future as
        ``.future()`` returns; by default the unary stub method's ``.future``, which starts calls in order)."""
        super().__init__(stub, name, stream_method, unary_method)
        self._pending: deque[_Pending] = deque()
        self._unary_start = unary_start or (
            lambda request, timeout: getattr(stub, unary_method).future(request, timeout=timeout)
        )

    def _late_deadline(self) -> float:
        return min((entry[3] for entry in self._pending), default=0.0)

    def start(self, request: Any, timeout: float) -> Any:
        """Send ``request`` now (after those started before it); its answer completes the returned future."""
        with self._lock:
            if self._unary_now_locked():
                try:
                    call = self._unary_start(request, timeout)
                except BaseException:
                    self._unary_in_flight -= 1
                    raise
            else:
                future: Future[Any] = Future()
                self._send_locked((future, request, timeout, time.monotonic() + timeout))
                return future
        call.add_done_callback(self._unary_finished)  # outside the lock: a finished call runs it at once
        return call

    def _unary_finished(self, call: Any) -> None:
        self._unary_done(_answered(call))

    def _resent_finished(self, future: Future[Any], call: Any) -> None:
        self._unary_finished(call)
        _settle_from(future, call)

    def _send_locked(self, entry: _Pending) -> None:
        if self._responses is None:
            _, responses = self._open_locked()
            self._pending = deque()
            reader = threading.Thread(target=self._read, args=(responses, self._pending),
                                      name=f"{self._name}-reader", daemon=True)  # fmt: skip
            reader.start()
        self._pending.append(entry)
        assert self._requests is not None
        self._requests.put(entry[1])

    def _read(self, responses: Any, pending: deque[_Pending]) -> None:
        """The stream's reader thread: each answer completes the oldest waiting request."""
        answered = 0
        error: BaseException
        try:
            for response in responses:
                with self._lock:
                    if not pending:  # more answers than requests: a broken peer
                        error = StreamEnded(f"{self._name}: an answer no request waits for")
                        break
                    future = pending.popleft()[0]
                    self._broken = 0
                answered += 1
                _settle(future, response, None)
            else:
                error = StreamEnded(f"{self._name}: the peer ended the {self._stream_method} stream")
        except grpc.RpcError as exc:
            error = exc
        resent: list[tuple[Future[Any], Any]] = []
        with self._lock:
            if self._responses is responses:
                self._end_locked()
            failed = list(pending)
            pending.clear()
            error = self._stream_failed_locked(answered > 0, error)
            if self._closed.is_set():
                pass
            elif self.unary:  # refused as UNIMPLEMENTED: never read, so sent again, in order, before any later one
                for future, request, timeout, _ in failed:
                    self._unary_in_flight += 1
                    try:
                        resent.append((future, self._unary_start(request, timeout)))
                    except Exception as exc:  # a closed channel, ...: the request failed before it left
                        resent.append((future, _Failed(exc)))
                failed = []
            elif failed and _code(error) in _REFUSALS:
                for entry in failed[1:]:  # never read by the peer: again, in order, before any later request
                    self._send_locked(entry)
                failed = failed[:1]
        for future, call in resent:
            call.add_done_callback(lambda done, future=future: self._resent_finished(future, done))
        for future, *_ in failed:
            _settle(future, None, error)


def _answered(call: Any) -> bool:
    """Whether a finished unary call got an answer."""
    try:
        return call.exception() is None
    except BaseException:  # cancelled
        return False


def _code(exc: BaseException) -> Any:
    code = getattr(exc, "code", None)
    return code() if callable(code) else None


class _Failed:
    """A unary call that could not start, as a finished call for :func:`_settle_from`."""

    def __init__(self, error: Exception) -> None:
        self._error = error

    def add_done_callback(self, fn: Callable[[Any], None]) -> None:
        fn(self)

    def result(self) -> Any:
        raise self._error

    def exception(self) -> BaseException:
        return self._error


def _settle(future: Future[Any], result: Any, error: BaseException | None) -> None:
    """Complete ``future`` unless its caller gave up on it (cancelled)."""
    try:
        if error is None:
            future.set_result(result)
        else:
            future.set_exception(error)
    except InvalidStateError:
        pass


def _settle_from(future: Future[Any], call: Any) -> None:
    try:
        result = call.result()
    except BaseException as exc:  # grpc.RpcError, cancelled, ...: the caller's to handle
        _settle(future, None, exc)
    else:
        _settle(future, result, None)


def _drain(requests: queue.SimpleQueue[object]) -> Iterator[Any]:
    """The request side of a stream: what is put, until the end marker."""
    while True:
        item = requests.get()
        if item is _END:
            return
        yield item

