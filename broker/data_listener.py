"""The ``DATA`` listener: Odradek's own producers and consumers sending Produce and Fetch as length-prefixed
frames on plain TCP (the wire is :mod:`common.framing`'s docstring; the client is ``odradek.net.data_link``).

Why: a round trip on a frame costs about a third of the server CPU of a message on a gRPC stream, and well
under half its wall time (``bench/rpc_floor.py``, docs/LATENCY.md), and an acks=all record crosses the leader
as several such messages. The messages are the same protobufs, and each request is answered by the coroutine a
gRPC call reaches (:meth:`BrokerService.Produce <broker.service.BrokerService.Produce>` and ``Fetch``: the same
appends, long polls, metrics and traces) on the same event loop, the inter-broker gRPC listener's, as the
``REPLICATION`` listener (:mod:`broker.replication_listener`): a client's append wakes the parked follower
fetches there, and a follower's report completes the waiting acks=all produces, without a thread switch.

A broker may have several: ``DATA``, and ``DATA_<LISTENER>`` for the clients of ``<LISTENER>`` when they are on
another network (Metadata names each client the one of its listener, ``broker.handlers.metadata``).

Security, by ``listener.security.protocol.map``, as a gRPC listener of the same protocol: PLAINTEXT is
``User:ANONYMOUS``; SSL is the client certificate's principal (``ssl.principal.mapping.rules``; ``User:ANONYMOUS``
without a certificate), and a certificate the rules refuse closes the connection. SASL_PLAINTEXT and SASL_SSL
take the principal of a session token (``common.framing``: an AUTH frame carrying what SaslAuthenticate on this
broker's gRPC listener answered, checked with the node's key as the gRPC guard checks ``authorization: Bearer``);
on SASL_SSL a verified client certificate also names the principal, as on gRPC. Without either, a request
answers ERROR SASL_AUTHENTICATION_FAILED and the connection closes; so does a refused AUTH (forged, from another
node or a restarted one, expired; or a re-authentication naming another principal, KIP-368). A request that
arrives after the session's expiry closes the connection unanswered (Kafka closes a connection whose session
expired; the client re-authenticates before that, with a new token in an AUTH frame ahead of its next request).
With an authorizer, each request is checked by its gRPC RPC's rule (``controller/security/rules.py``); a refusal
answers ERROR ``"<KAFKA_ERROR_CODE>: <message>"`` (the details of a refused gRPC call), changes nothing, and the
connection stays open. A Fetch with ``replica_id`` other than -1 answers ERROR INVALID_REQUEST: followers fetch
on ``REPLICATION``.

Pipelining, as :meth:`BrokerService.ProduceStream <broker.service.BrokerService.ProduceStream>`: each request's
handling starts as soon as it is read (a task each, started in the order they came: the appends of a Produce
run first and without a pause, so consecutive Produce requests append in order), and the answers are written
in the order the requests came. At most :data:`MAX_PIPELINED` requests are read and not yet answered per
connection; beyond that the connection is not read until its oldest request is answered (back-pressure: TCP's
window then holds the client). A request whose handler fails unexpectedly answers ERROR UNKNOWN_SERVER_ERROR
after the answers before it, then the connection closes (a gRPC stream ends at its first failing request).

Admission: at most ``max.connections`` connections. A frame over ``socket.request.max.bytes``, an empty one, an
unknown kind or a message that does not parse closes the connection (nothing of that request ran; answers not
yet written are dropped), as does ``connections.max.idle.ms`` with no request read and none waiting for its
answer (a long poll is not idle), or with an answer the client does not read.

Thread-safety: ``start`` and ``stop`` from the broker's thread; everything else runs on the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import time
from dataclasses import dataclass, field
from typing import Any, cast

from google.protobuf.message import DecodeError

from broker.context import BrokerContext
from broker.loop_listener import ANONYMOUS, START_TIMEOUT_S, IdleTimer, LoopListener, NoContext
from common.framing import AUTH, DATA, ERROR, FETCH, KINDS, OK, PRODUCE, SIZE
from controller.security.rules import BROKER_RULES, Check
from controller.security.token import TokenError, TokenSigner
from metadata.configs import ConfigError
from proto import broker_pb2 as pb

logger = logging.getLogger(__name__)

NAME = DATA
MAX_PIPELINED = 16  # requests read and not yet answered, per connection
CONSUMER = -1  # the replica_id of a consumer's fetch

_STATUS = {OK: bytes((OK,)), ERROR: bytes((ERROR,))}
_Answer = tuple[bytes, bool]  # (the answer frame, close the connection after it)


def is_data_listener(name: str) -> bool:
    """``DATA``, or ``DATA_<LISTENER>``: the one the clients of ``<LISTENER>`` are told of
    (``broker.handlers.metadata``)."""
    return name == NAME or name.startswith(NAME + "_")


def answer_frame(status: int, body: bytes) -> bytes:
    """``status`` and ``body`` as one frame (:func:`common.framing.frame` of ``status + body``, one copy of the
    body instead of two: a fetch answer may be megabytes)."""
    return SIZE.pack(len(body) + 1) + _STATUS[status] + body


def error_frame(code: str, message: str) -> bytes:
    return answer_frame(ERROR, f"{code}: {message}".encode())


def _now_ms() -> int:
    return int(time.time() * 1000)


def _done(loop: asyncio.AbstractEventLoop, answer: _Answer) -> asyncio.Future[_Answer]:
    future: asyncio.Future[_Answer] = loop.create_future()
    future.set_result(answer)
    return future


class _Closing(Exception):
    """What the client sent breaks the wire: the connection closes (logged at INFO)."""


@dataclass(eq=False)
class _Connection:
    """One client connection's state, used on the loop only."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    who: str  # host:port, for the logs
    host: str  # for the authorizer's host match
    principal: str | None = ANONYMOUS  # None: a SASL listener's connection not authenticated yet
    expires_ms: int | None = None  # when its SASL session ends (wall clock, ms); None: no session
    answers: asyncio.Queue[asyncio.Future[_Answer] | None] = field(default_factory=asyncio.Queue)  # in request order
    slots: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(MAX_PIPELINED))
    idle: IdleTimer | None = None  # busy from a request read to its answer written


class DataListener(LoopListener):
    """The ``DATA`` listener named ``name`` on ``listen``, served on ``loop`` by ``service`` (a
    :class:`~broker.service.BrokerService`; see the module docstring). ``ConfigError`` at construction for a
    SASL protocol on a node without a SASL authority (no key to check session tokens with)."""

    def __init__(self, ctx: BrokerContext, name: str, listen: str, service: Any, loop: asyncio.AbstractEventLoop):
        protocol = ctx.security.protocol(name)
        self.signer: TokenSigner | None = None
        if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
            self.signer = getattr(getattr(ctx.guard, "authority", None), "signer", None)
            if self.signer is None:
                raise ConfigError("listener.security.protocol.map", f"listener {name} is {protocol}, but this node "
                                  "has no SASL authority to check session tokens with")  # fmt: skip
        super().__init__(ctx, name, listen, service, loop, tls=protocol in ("SSL", "SASL_SSL"))
        self.protocol = protocol
        self._connections: dict[asyncio.StreamWriter, asyncio.Task[None]] = {}  # each with its _serve task

    async def _close_all(self) -> None:
        connections = list(self._connections.items())
        for writer, task in connections:
            writer.transport.abort()
            task.cancel()  # its requests with it (each connection's task cancels its own)
        if connections:
            await asyncio.wait([task for _, task in connections], timeout=START_TIMEOUT_S / 2)

    # --- connections (the loop) ---------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername") or ("?", 0)
        who = f"{peer[0]}:{peer[1]}"
        if len(self._connections) >= self.max_connections:
            logger.warning("broker %d: %s at max.connections=%d, refusing %s", self.ctx.broker_id, self.name,
                           self.max_connections, peer[0])  # fmt: skip
            writer.transport.abort()
            return
        task = asyncio.current_task()
        assert task is not None
        self._connections[writer] = task
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = _Connection(reader, writer, who, str(peer[0]))
        conn.idle = IdleTimer(self._loop, self.idle_timeout_s, writer.transport.abort)
        reading: asyncio.Task[bool] | None = None
        writing: asyncio.Task[None] | None = None
        try:
            conn.principal = self.principal_of(writer)
            if self.signer is not None and (conn.principal == ANONYMOUS or self.protocol == "SASL_PLAINTEXT"):
                conn.principal = None  # SASL: a session token first (a verified certificate will do on SASL_SSL)
            reading = asyncio.ensure_future(self._read(conn))
            writing = asyncio.ensure_future(self._write(conn))
            done, _ = await asyncio.wait((reading, writing), return_when=asyncio.FIRST_COMPLETED)
            if reading in done:
                if reading.result():  # (its error, if reading failed)
                    await writing  # the client finished sending: answer what it sent, then close
            else:
                writing.result()  # its error, or it wrote an answer that closes the connection
        except _Closing as exc:
            logger.info("data listener: closing %s: %s", who, exc)
        except ssl.SSLError as exc:  # the principal mapping rules refuse the certificate (or TLS failed)
            logger.info("data listener: closing %s: %s", who, exc)
        except (asyncio.IncompleteReadError, OSError) as exc:  # the peer closed, idled out, reset
            logger.debug("data listener: connection from %s ended: %r", who, exc)
        except Exception:
            logger.exception("broker %d: data listener: the connection from %s failed", self.ctx.broker_id, who)
        except asyncio.CancelledError:  # stop(): end quietly (3.11's start_server logs a connection task that
            pass  # ends cancelled as an unhandled error)
        finally:
            if conn.idle is not None:
                conn.idle.cancel()
            self._connections.pop(writer, None)
            writer.transport.abort()
            for side in (reading, writing):
                if side is not None:
                    side.cancel()
            while not conn.answers.empty():  # closed early: the requests still running have no one to answer
                left = conn.answers.get_nowait()
                if left is not None:
                    left.cancel()

    async def _read(self, conn: _Connection) -> bool:
        """Read requests and start each one's handling, in order, until the client closes (True: it closed at
        a frame's end, its requests are still answered). ``_Closing`` on a frame that breaks the wire."""
        reader = conn.reader
        while True:
            await conn.slots.acquire()  # back-pressure: read no further until the oldest is answered
            try:
                head = await reader.readexactly(SIZE.size)
            except asyncio.IncompleteReadError as exc:
                if exc.partial:
                    raise
                conn.answers.put_nowait(None)
                return True
            (size,) = SIZE.unpack(head)
            if size == 0 or size > self.max_request_bytes:
                raise _Closing(f"a request of {size} bytes (socket.request.max.bytes is {self.max_request_bytes})")
            payload = memoryview(await reader.readexactly(size))
            kind, message = payload[0], cast(bytes, payload[1:])  # protobuf parses any buffer: no copy
            assert conn.idle is not None
            if kind == AUTH or conn.principal is None or conn.expires_ms is not None:
                refusal = self._authenticate(conn, message) if kind == AUTH else self._unauthenticated(conn)
                if refusal is not None or kind == AUTH:
                    conn.idle.busy()
                    answer = refusal or answer_frame(OK, b"")
                    conn.answers.put_nowait(_done(self._loop, (answer, refusal is not None)))
                    if refusal is not None:
                        conn.answers.put_nowait(None)
                        return True  # the answers before it, then the refusal, then the connection closes
                    continue
            request: pb.ProduceRequest | pb.FetchRequest
            try:
                if kind == PRODUCE:
                    request = pb.ProduceRequest.FromString(message)
                elif kind == FETCH:
                    request = pb.FetchRequest.FromString(message)
                else:
                    raise _Closing(f"a request of unknown kind {kind}")
            except DecodeError as exc:
                raise _Closing(f"a {KINDS[kind]} request that does not parse: {exc}") from None
            conn.idle.busy()
            # started now, in the order read: a Produce's appends run before the next request's (ProduceStream)
            conn.answers.put_nowait(asyncio.ensure_future(self._handle(kind, request, conn, conn.principal)))

    def _authenticate(self, conn: _Connection, message: bytes) -> bytes | None:
        """An AUTH frame: the connection's principal and session from its token; the refusal's frame, if any."""
        if self.signer is None:
            return error_frame("ILLEGAL_SASL_STATE", f"listener {self.name} is {self.protocol}: no SASL here")
        try:
            session = self.signer.verify(bytes(message).decode("utf-8"), _now_ms())
        except UnicodeDecodeError:
            reason = "malformed session token"
        except TokenError as exc:
            reason = str(exc)
        else:
            if conn.expires_ms is not None and session.principal != conn.principal:
                reason = (f"re-authentication as {session.principal} on a connection of {conn.principal}: the "
                          "principal of a connection cannot change (KIP-368)")  # fmt: skip
            else:
                conn.principal, conn.expires_ms = session.principal, session.expires_ms
                return None
        logger.info("data listener: closing %s: SASL authentication failed: %s", conn.who, reason)
        return error_frame("SASL_AUTHENTICATION_FAILED", reason)

    def _unauthenticated(self, conn: _Connection) -> bytes | None:
        """A request on a connection of a SASL listener: None when its session allows it, else the refusal's frame
        (not authenticated), or ``_Closing`` (the session expired: closed unanswered, as Kafka does)."""
        if conn.principal is None:
            logger.info("data listener: closing %s: a request before SASL authentication", conn.who)
            return error_frame("SASL_AUTHENTICATION_FAILED", f"listener {self.name} is {self.protocol}: "
                               "authenticate first (an AUTH frame with a session token)")  # fmt: skip
        if conn.expires_ms is not None and _now_ms() >= conn.expires_ms:
            raise _Closing(f"the SASL session of {conn.principal} expired (connections.max.reauth.ms)")
        return None

    async def _write(self, conn: _Connection) -> None:
        """Write the answers in request order until the reader's end (None) or an answer that closes."""
        transport = conn.writer.transport
        while (answer := await conn.answers.get()) is not None:
            data, close = await answer
            if transport.is_closing():
                return  # aborted (idle, stop) or lost: no one to answer
            conn.writer.write(data)
            if transport.get_write_buffer_size() > 0:  # the kernel did not take it all: drain can block
                stalled = self._loop.call_later(self.idle_timeout_s, transport.abort)  # an answer not read
                try:
                    await conn.writer.drain()
                finally:
                    stalled.cancel()
            if close:
                return
            conn.slots.release()
            assert conn.idle is not None
            conn.idle.idle()

    async def _handle(self, kind: int, request: Any, conn: _Connection, principal: str | None) -> _Answer:
        """One request's answer frame; an unexpected error answers UNKNOWN_SERVER_ERROR and closes."""
        try:
            if kind == FETCH and request.replica_id != CONSUMER:
                return error_frame("INVALID_REQUEST", "the DATA listener serves consumers' fetches only "
                                   f"(replica_id -1), got replica_id {request.replica_id}: followers fetch on "
                                   "the REPLICATION listener"), False  # fmt: skip
            guard = self.ctx.guard
            if guard is not None and guard.authorizer is not None:
                assert principal is not None
                check = Check(guard.authorizer.current(), principal, conn.host)
                denial = BROKER_RULES[KINDS[kind]](request, check)
                if denial is not None:
                    return error_frame(denial.code, denial.message), False
            if kind == PRODUCE:
                response = await self._service.Produce(request, NoContext())
            else:
                response = await self._service.Fetch(request, NoContext())
            return answer_frame(OK, response.SerializeToString()), False
        except Exception as exc:
            logger.exception("broker %d: data listener: a %s from %s failed", self.ctx.broker_id, KINDS[kind],
                             conn.who)  # fmt: skip
            return error_frame("UNKNOWN_SERVER_ERROR", f"unexpected error: {exc!r}"), True
