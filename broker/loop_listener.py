"""What the ``REPLICATION`` and ``DATA`` listeners share (:mod:`broker.replication_listener`,
:mod:`broker.data_listener`): an ``asyncio`` server of framed requests (:mod:`common.framing`) on the event loop
of the broker's inter-broker gRPC listener, whose requests are answered by that listener's
:class:`~broker.service.BrokerService` coroutines themselves.

The loop matters: appends of clients, follower fetches and consumer fetches then all run on it, so an append
wakes the parked fetches and a follower's report completes the waiting acks=all produces without a thread
switch (docs/LATENCY.md). Each listener takes ``max.connections``, ``socket.request.max.bytes`` and
``connections.max.idle.ms`` from the broker's config, and TLS from ``listener.security.protocol.map`` (the
principal of a TLS connection is its client certificate's, ``User:ANONYMOUS`` without one or in plaintext).

Thread-safety: ``start`` and ``stop`` from the broker's thread; everything else runs on the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from collections.abc import Callable
from typing import Any

from broker.context import BrokerContext
from broker.kafka import security
from common.framing import split_host_port

START_TIMEOUT_S = 10.0
ANONYMOUS = "User:ANONYMOUS"


class NoContext:
    """What a :class:`~broker.service.BrokerService` coroutine gets instead of a gRPC context: its handlers'
    ``abort`` on an unexpected error, after which the error itself propagates (to the listener, which logs it
    and answers or closes the connection)."""

    async def abort(self, _code: object, _details: str) -> None:
        return None


class IdleTimer:
    """``connections.max.idle.ms`` of one connection: ``on_idle()`` once the connection has been idle (no
    request in progress) for ``timeout_s``. A connection is busy from :meth:`busy` to :meth:`idle` (a long
    poll has a deadline of its own). One timer handle, re-armed only when it fires, instead of a handle armed
    and cancelled per request (two heap operations on the way of every replicated and consumed record): it
    fires at most once per ``timeout_s`` of activity, and then either closes or looks again when the idle
    time would end."""

    __slots__ = ("_loop", "_timeout_s", "_on_idle", "_busy", "_idle_since", "_handle")

    def __init__(self, loop: asyncio.AbstractEventLoop, timeout_s: float, on_idle: Callable[[], object]) -> None:
        self._loop = loop
        self._timeout_s = timeout_s
        self._on_idle = on_idle
        self._busy = 0
        self._idle_since = loop.time()
        self._handle: asyncio.TimerHandle | None = loop.call_at(self._idle_since + timeout_s, self._check)

    def busy(self) -> None:
        self._busy += 1

    def idle(self) -> None:
        self._busy -= 1
        if not self._busy:
            self._idle_since = self._loop.time()

    def _check(self) -> None:
        if self._handle is None:
            return
        now = self._loop.time()
        due = (now if self._busy else self._idle_since) + self._timeout_s
        if not self._busy and due <= now:
            self._handle = None
            self._on_idle()
            return
        self._handle = self._loop.call_at(due, self._check)

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


class LoopListener:
    """The listener named ``name`` on ``listen``, served on ``loop`` by ``service``; ``tls``: whether its protocol
    is TLS. A subclass serves each connection with a :class:`Connection` of its own (:meth:`_protocol`: frames parsed
    as they arrive, each request answered from a callback, no task per request)."""

    def __init__(
        self, ctx: BrokerContext, name: str, listen: str, service: Any, loop: asyncio.AbstractEventLoop, tls: bool
    ) -> None:
        self.ctx = ctx
        self.name = name
        self.listen = listen
        config = ctx.config
        self.max_connections = int(config.get("max.connections"))
        self.max_request_bytes = int(config.get("socket.request.max.bytes"))
        self.idle_timeout_s = int(config.get("connections.max.idle.ms")) / 1000.0
        self.tls = security.listener_context(ctx.security, name) if tls else None
        self._service = service
        self._loop = loop
        self._server: asyncio.AbstractServer | None = None
        self.port = 0
        self.connections: set[Connection] = set()  # the admitted ones (on the loop)

    def start(self) -> None:
        """Bind and serve; ``RuntimeError`` when the address cannot be bound."""
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(START_TIMEOUT_S)

    async def _start(self) -> None:
        host, port = split_host_port(self.listen)
        try:
            self._server = await self._loop.create_server(
                self._protocol, host, port, ssl=self.tls, reuse_address=True,
                ssl_handshake_timeout=self.idle_timeout_s if self.tls is not None else None,
            )  # fmt: skip
        except OSError as exc:
            raise RuntimeError(f"cannot listen on {self.listen}: {exc}") from None
        self.port = self._server.sockets[0].getsockname()[1]

    def stop(self) -> None:
        """Stop accepting and close every connection (before the loop stops: the gRPC listener's stop); returns
        at once when the loop no longer runs (nothing would do the work)."""
        if self._server is None or self._loop.is_closed() or not self._loop.is_running():
            return
        with contextlib.suppress(Exception):  # the loop stopped meanwhile: what it served stopped with it
            asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(START_TIMEOUT_S)

    async def _stop(self) -> None:
        assert self._server is not None
        self._server.close()
        await self._close_all()

    def _protocol(self) -> Connection:
        """A new connection's protocol (one per connection, on the loop)."""
        raise NotImplementedError

    async def _close_all(self) -> None:
        for connection in list(self.connections):
            connection.abort()  # what it was answering is dropped (each listener says how)
        await asyncio.sleep(0)  # connection_lost of each (scheduled by abort) before the loop may stop

    def admit(self, transport: asyncio.Transport, open_connections: int, log: logging.Logger) -> str | None:
        """A new connection (``connection_made``): its principal (:meth:`principal_of`), with TCP_NODELAY set; or
        None when it is refused and aborted, logged on ``log``: ``open_connections`` at ``max.connections``, or
        a client certificate the mapping rules refuse."""
        peer = transport.get_extra_info("peername") or ("?", 0)
        if open_connections >= self.max_connections:
            log.warning("broker %d: %s at max.connections=%d, refusing %s", self.ctx.broker_id, self.name,
                        self.max_connections, peer[0])  # fmt: skip
            transport.abort()
            return None
        try:
            principal = self.principal_of(transport)
        except ssl.SSLError as exc:
            log.info("%s listener: closing %s:%s: %s", self.name, peer[0], peer[1], exc)
            transport.abort()
            return None
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return principal

    def principal_of(self, connection: asyncio.BaseTransport) -> str:
        """The connection's principal: its client certificate's under TLS (``ssl.SSLError`` when the mapping rules
        refuse it), else ``User:ANONYMOUS``."""
        ssl_object = connection.get_extra_info("ssl_object")
        if ssl_object is None:
            return ANONYMOUS
        return security.certificate_principal(ssl_object, self.ctx.security.principal_mapper)


class Connection(asyncio.Protocol):
    """What a connection of either listener does on arrival: :meth:`LoopListener.admit` (refused and aborted, or its
    principal, and counted in ``listener.connections``), then :meth:`_admitted`. ``log`` is the listener module's
    logger (its tests capture it)."""

    log = logging.getLogger(__name__)

    def __init__(self, listener: LoopListener) -> None:
        self._transport: asyncio.Transport | None = None
        self.who = self.host = "?"  # host:port for the logs; the host for the authorizer's match
        self.principal: str | None = ANONYMOUS
        self._closed = False
        self._listener = listener  # a subclass names its listener's class (``_listener: DataListener``)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        listener = self._listener
        peer = transport.get_extra_info("peername") or ("?", 0)
        self.host, self.who = str(peer[0]), f"{peer[0]}:{peer[1]}"
        principal = listener.admit(transport, len(listener.connections), self.log)
        if principal is None:
            self._closed = True
            return
        self.principal = principal
        listener.connections.add(self)
        self._admitted(transport)

    def _admitted(self, transport: asyncio.Transport) -> None:
        """The connection is admitted, ``principal`` set: what the listener's connection starts with."""

    def abort(self) -> None:
        """Close at once (what is not written is dropped); ``connection_lost`` follows."""
        if self._transport is not None:
            self._transport.abort()
