"""The ``REPLICATION`` listener: followers' fetches over plain TCP (the wire and the rules are
:mod:`broker.replication_link`'s docstring).

It is an ``asyncio`` server on the event loop of the broker's inter-broker gRPC listener
(:class:`~broker.loop_listener.LoopListener`), one ``asyncio.Protocol`` per connection (:class:`_Connection`):
frames are parsed as they arrive and each request is answered from a callback,
:meth:`BrokerService.fetch_then <broker.service.BrokerService.fetch_then>`: the same reads, long poll
(a timer and the parked operation's callback, no thread or task held), metrics and ``fe`` trace events
(``log.trace``) as a gRPC ReplicaFetch message, without a task, a stream read or a future per request (a
follower's report is on the way of every acks=all record: measured in docs/LATENCY.md, e2e p50 0.8-0.9x of the
stream-and-task version). Being on that loop matters: the Produce requests of clients on
that listener append there, so an append wakes the parked follower fetches, and a follower's report moves
the high watermark and completes the waiting acks=all produces, without a thread switch (measured in
docs/LATENCY.md: a thread per connection cost each of those hand-offs ~0.1 ms).

Each connection holds a fetch session (:class:`~broker.fetch_session.LeaderSession`): a request is taken into
it and answered for the whole session, which decides what is read and how the fetch waits; an epoch out of
order is answered with the session error alone (the follower starts over with a full fetch).

Admission: at most ``max.connections`` connections; a connection idle for ``connections.max.idle.ms`` (no
request, or an answer the follower does not read) is closed.

Thread-safety: ``start`` and ``stop`` from the broker's thread; everything else runs on the loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from google.protobuf.message import DecodeError

from broker.context import BrokerContext
from broker.errors import error
from broker.fetch_session import LeaderSession, SessionError
from broker.handlers import fetch
from broker.loop_listener import ANONYMOUS, Connection, IdleTimer, LoopListener
from common.framing import SIZE, frame
from controller.security.rules import BROKER_RULES, Check
from metadata.configs import ConfigError
from proto import broker_pb2 as pb

logger = logging.getLogger(__name__)

RULE = "ReplicaFetch"  # each request is checked as a message of the gRPC ReplicaFetch stream


class ReplicationListener(LoopListener):
    """The ``REPLICATION`` listener named ``name`` on ``listen``, served on ``loop`` by ``service`` (see the
    module docstring). ``ConfigError`` at construction for SASL_PLAINTEXT (no SASL exchange here)."""

    def __init__(self, ctx: BrokerContext, name: str, listen: str, service: Any, loop: asyncio.AbstractEventLoop):
        protocol = ctx.security.protocol(name)
        if protocol == "SASL_PLAINTEXT":
            raise ConfigError("listener.security.protocol.map", f"listener {name} is SASL_PLAINTEXT: the replication "
                              "listener authenticates brokers by TLS certificate, so it must be PLAINTEXT, SSL or "
                              "SASL_SSL")  # fmt: skip
        super().__init__(ctx, name, listen, service, loop, tls=protocol in ("SSL", "SASL_SSL"))
        self.protocol = protocol

    def _protocol(self) -> Connection:
        return _Connection(self)

    def _answer(
        self, request: pb.FetchRequest, principal: str, host: str, session: LeaderSession,
        done: Callable[[pb.FetchResponse | BaseException], None],
    ) -> None:  # fmt: skip
        """``done(answer)`` once the request is answered (on the loop; at once for a refusal), or ``done(error)``
        for an unexpected error."""
        if request.replica_id < 0:
            done(fetch.refused(request, "INVALID_REQUEST", "the REPLICATION listener serves follower fetches only "
                               f"(replica_id >= 0), got replica_id {request.replica_id}: consumers fetch on a "
                               "client listener"))  # fmt: skip
            return
        try:
            view = session.apply(request)
        except SessionError as exc:
            logger.info("broker %d: replication listener: fetch session of broker %d: %s: %s", self.ctx.broker_id,
                        request.replica_id, exc.code, exc)  # fmt: skip
            done(pb.FetchResponse(error=error(exc.code, str(exc))))
            return
        guard = self.ctx.guard
        if guard is not None and guard.authorizer is not None:
            denial = BROKER_RULES[RULE](request, Check(guard.authorizer.current(), principal, host))
            if denial is not None:
                refusal = fetch.refused(view, denial.code, denial.message)  # every partition of the session
                session.answered(refusal)
                done(refusal)
                return

        def answered(response: pb.FetchResponse | BaseException) -> None:
            if not isinstance(response, BaseException):
                session.answered(response)
            done(response)

        self._service.fetch_then(view, answered, session)


class _Connection(Connection):
    """One follower's connection, on the loop: frames parsed as they arrive (``data_received``), one request at a
    time (the follower's lockstep), each answered from the callback of its fetch; no task, stream read or future
    per request (docs/LATENCY.md). Back-pressure: while the transport's write buffer is above its high-water mark
    (a follower not reading its answers) no further request is taken, and the connection counts as idle, so
    ``connections.max.idle.ms`` closes it."""

    log = logger
    _listener: ReplicationListener

    def __init__(self, listener: ReplicationListener) -> None:
        super().__init__(listener)
        self._inbox = bytearray()
        self._idle: IdleTimer | None = None
        self._session: LeaderSession | None = None
        self._busy = False  # a request taken, not answered yet
        self._paused = False  # the write buffer is full
        self._taking = False  # inside _next's loop

    def _admitted(self, transport: asyncio.Transport) -> None:
        listener = self._listener
        self._idle = IdleTimer(listener._loop, listener.idle_timeout_s, transport.abort)
        self._session = LeaderSession(listener.ctx)  # the connection's fetch session (broker.fetch_session)

    def data_received(self, data: bytes) -> None:
        self._inbox += data
        self._next()

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self._next()

    def _next(self) -> None:
        """Take the requests that have arrived whole, one at a time: each once the one before is answered. A loop,
        not a recursion, when answers come at once (refusals): a client that pipelines many costs no stack."""
        if self._taking:  # called back from an answer given inside the loop below: it goes on by itself
            return
        self._taking = True
        try:
            while not (self._busy or self._paused or self._closed) and self._take():
                pass
        finally:
            self._taking = False

    def _take(self) -> bool:
        """Start answering the next request if it has arrived whole (True), else False."""
        inbox = self._inbox
        if len(inbox) < SIZE.size:
            return False
        (size,) = SIZE.unpack_from(inbox)
        listener = self._listener
        if size > listener.max_request_bytes:
            logger.info("replication listener: closing %s: a request of %d bytes is over socket.request.max.bytes "
                        "(%d)", self.who, size, listener.max_request_bytes)  # fmt: skip
            self.abort()
            return False
        end = SIZE.size + size
        if len(inbox) < end:
            return False
        try:
            request = pb.FetchRequest.FromString(bytes(inbox[SIZE.size : end]))
        except DecodeError as exc:
            logger.info("replication listener: closing %s: a request that is not a FetchRequest: %s", self.who, exc)
            self.abort()
            return False
        del inbox[:end]
        assert self._idle is not None
        assert self._session is not None
        self._idle.busy()  # the long poll has a deadline of its own
        self._busy = True
        try:
            listener._answer(request, self.principal or ANONYMOUS, self.host, self._session, self._answered)
        except Exception as exc:
            self._answered(exc)
        return True

    def _answered(self, response: pb.FetchResponse | BaseException) -> None:
        assert self._idle is not None
        assert self._transport is not None
        self._busy = False
        self._idle.idle()  # the answer read and the next request: within the idle time
        if self._closed:
            self._end_session()
            return
        if isinstance(response, BaseException):
            logger.error("broker %d: replication listener: a fetch from %s failed; closing the connection",
                         self._listener.ctx.broker_id, self.who, exc_info=response)  # fmt: skip
            self.abort()
            return
        self._transport.write(frame(response.SerializeToString()))
        self._next()

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None:
            logger.debug("replication listener: connection from %s ended: %r", self.who, exc)
        self._closed = True
        self._listener.connections.discard(self)
        if self._idle is not None:
            self._idle.cancel()
        if not self._busy:  # else when its fetch is answered: the session is in use until then
            self._end_session()

    def _end_session(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None
