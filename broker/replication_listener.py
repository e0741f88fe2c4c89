"""The ``REPLICATION`` listener: followers' fetches over plain TCP (the wire and the rules are
:mod:`broker.replication_link`'s docstring).

It is an ``asyncio`` server on the event loop of the broker's inter-broker gRPC listener
(:class:`~broker.loop_listener.LoopListener`), and each request is answered by that listener's
:meth:`BrokerService.Fetch <broker.service.BrokerService.Fetch>` coroutine: the same
reads, long poll (a :class:`~controller.long_poll.Wakeup`, no thread held), metrics and ``fe`` trace events
(``log.trace``) as a gRPC ReplicaFetch message. Being on that loop matters: the Produce requests of clients on
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
import contextlib
import logging
import socket
from typing import Any

from google.protobuf.message import DecodeError

from broker.context import BrokerContext
from broker.errors import error
from broker.fetch_session import LeaderSession, SessionError
from broker.handlers import fetch
from broker.loop_listener import IdleTimer, LoopListener, NoContext
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
        self._writers: set[asyncio.StreamWriter] = set()

    async def _close_all(self) -> None:
        for writer in list(self._writers):
            writer.transport.abort()

    # --- connections (the loop) ---------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername") or ("?", 0)
        who = f"{peer[0]}:{peer[1]}"
        if len(self._writers) >= self.max_connections:
            logger.warning("broker %d: %s at max.connections=%d, refusing %s", self.ctx.broker_id, self.name,
                           self.max_connections, peer[0])  # fmt: skip
            writer.transport.abort()
            return
        self._writers.add(writer)
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        idle = IdleTimer(self._loop, self.idle_timeout_s, writer.transport.abort)
        session = LeaderSession(self.ctx)  # the connection's fetch session (broker.fetch_session)
        try:
            principal = self._principal(writer)
            while True:
                head = await reader.readexactly(SIZE.size)
                (size,) = SIZE.unpack(head)
                if size > self.max_request_bytes:
                    logger.info("replication listener: closing %s: a request of %d bytes is over "
                                "socket.request.max.bytes (%d)", who, size, self.max_request_bytes)  # fmt: skip
                    return
                try:
                    request = pb.FetchRequest.FromString(await reader.readexactly(size))
                except DecodeError as exc:
                    logger.info("replication listener: closing %s: a request that is not a FetchRequest: %s", who,
                                exc)  # fmt: skip
                    return
                idle.busy()  # the long poll has a deadline of its own
                response = await self._answer(request, principal, str(peer[0]), session)
                idle.idle()  # the answer read (drain waits for that) and the next request: within the idle time
                writer.write(frame(response.SerializeToString()))
                await writer.drain()
        except (asyncio.IncompleteReadError, OSError) as exc:  # the peer closed, idled out, reset; a TLS error
            logger.debug("replication listener: connection from %s ended: %r", who, exc)
        except Exception:
            logger.exception("broker %d: replication listener: a fetch from %s failed", self.ctx.broker_id, who)
        finally:
            idle.cancel()
            session.close()
            self._writers.discard(writer)
            writer.transport.abort()

    async def _answer(
        self, request: pb.FetchRequest, principal: str, host: str, session: LeaderSession
    ) -> pb.FetchResponse:
        if request.replica_id < 0:
            return fetch.refused(request, "INVALID_REQUEST", "the REPLICATION listener serves follower fetches only "
                                 f"(replica_id >= 0), got replica_id {request.replica_id}: consumers fetch on a "
                                 "client listener")  # fmt: skip
        try:
            view = session.apply(request)
        except SessionError as exc:
            logger.info("broker %d: replication listener: fetch session of broker %d: %s: %s", self.ctx.broker_id,
                        request.replica_id, exc.code, exc)  # fmt: skip
            return pb.FetchResponse(error=error(exc.code, str(exc)))
        guard = self.ctx.guard
        if guard is not None and guard.authorizer is not None:
            denial = BROKER_RULES[RULE](request, Check(guard.authorizer.current(), principal, host))
            if denial is not None:
                refusal = fetch.refused(view, denial.code, denial.message)  # every partition of the session
                session.answered(refusal)
                return refusal
        response: pb.FetchResponse = await self._service.Fetch(view, NoContext(), session)
        session.answered(response)
        return response
