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

Each connection is an ``asyncio.Protocol`` (:class:`_Connection`): frames are parsed as they arrive, and each
request is answered from a callback, :meth:`BrokerService.produce_then <broker.service.BrokerService.produce_then>`
and ``fetch_then`` (the appends on the loop, an acks=all wait or a long poll a timer and a callback of the parked
purgatory operation): no task, queue, semaphore or stream read per request (measured in docs/LATENCY.md).

Pipelining, as :meth:`BrokerService.ProduceStream <broker.service.BrokerService.ProduceStream>`: each request's
handling starts as soon as it is read, in the order they came (the appends of a Produce run first and without a
pause, so consecutive Produce requests append in order), and the answers are written in the order the requests
came. At most :data:`MAX_PIPELINED` requests are read and not yet answered per connection; beyond that the
connection is not read until its oldest request is answered (back-pressure: TCP's window then holds the client).
While the client leaves its answers unread (the transport's write buffer over its high-water mark) the next
answers wait in their slots, unwritten, and the requests behind them are still read and started (a consumer's
next fetch reads while the last answer drains), up to the same bound. A
request whose handler fails unexpectedly answers ERROR UNKNOWN_SERVER_ERROR after the answers before it, then the
connection closes (a gRPC stream ends at its first failing request). A client that ends its side of the
connection (a half-close at a frame's end) gets the answers to what it sent, then the connection closes.

Admission: at most ``max.connections`` connections. A frame over ``socket.request.max.bytes``, an empty one, an
unknown kind or a message that does not parse closes the connection (nothing of that request ran; answers not
yet written are dropped, the requests still waiting are cancelled), as does ``connections.max.idle.ms`` with no
request read and none waiting for its answer (a long poll is not idle), or with an answer the client does not
read.

Thread-safety: ``start`` and ``stop`` from the broker's thread; everything else runs on the loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any, cast

from google.protobuf.message import DecodeError

from broker.context import BrokerContext
from broker.loop_listener import ANONYMOUS, Connection, IdleTimer, LoopListener
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
_HEAD = SIZE.size + 1  # a frame's size and its kind byte


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


def _nothing() -> None:
    """What cancels a request answered at once."""


class _Closing(Exception):
    """What the client sent breaks the wire: the connection closes (logged at INFO)."""


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

    def _protocol(self) -> Connection:
        return _Connection(self)

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

    def _handle(
        self, kind: int, request: Any, conn: _Connection, done: Callable[[_Answer], None]
    ) -> Callable[[], None]:
        """Start answering one request: ``done(answer)`` on the loop, once (maybe inside this call); an unexpected
        error answers UNKNOWN_SERVER_ERROR and closes. Returns what cancels it (``done`` is then not called)."""
        if kind == FETCH and request.replica_id != CONSUMER:
            done((error_frame("INVALID_REQUEST", "the DATA listener serves consumers' fetches only (replica_id -1), "
                              f"got replica_id {request.replica_id}: followers fetch on the REPLICATION listener"),
                  False))  # fmt: skip
            return _nothing
        guard = self.ctx.guard
        if guard is not None and guard.authorizer is not None:
            assert conn.principal is not None
            denial = BROKER_RULES[KINDS[kind]](request, Check(guard.authorizer.current(), conn.principal, conn.host))
            if denial is not None:
                done((error_frame(denial.code, denial.message), False))
                return _nothing

        def answered(response: Any) -> None:
            if isinstance(response, BaseException):
                logger.error("broker %d: data listener: a %s from %s failed", self.ctx.broker_id, KINDS[kind],
                             conn.who, exc_info=response)  # fmt: skip
                done((error_frame("UNKNOWN_SERVER_ERROR", f"unexpected error: {response!r}"), True))
            else:
                done((answer_frame(OK, response.SerializeToString()), False))

        start = self._service.produce_then if kind == PRODUCE else self._service.fetch_then
        try:
            cancel: Callable[[], None] = start(request, answered)
        except Exception as exc:
            answered(exc)
            return _nothing
        return cancel


class _Slot:
    """One request read and not yet written back: its answer once ready (``answer``), what cancels it."""

    __slots__ = ("answer", "close", "cancel", "_connection")

    def __init__(self, connection: _Connection) -> None:
        self.answer: bytes | None = None
        self.close = False
        self.cancel: Callable[[], None] = _nothing
        self._connection = connection

    def done(self, answer: _Answer) -> None:
        self.answer, self.close = answer
        self._connection.flush()


class _Connection(Connection):
    """One client's connection, on the loop: frames parsed as they arrive (``data_received``), each request
    started at once in the order read (at most :data:`MAX_PIPELINED` waiting), the answers written in that order
    as they become ready (:meth:`flush`)."""

    log = logger
    _listener: DataListener

    def __init__(self, listener: DataListener) -> None:
        super().__init__(listener)
        self._inbox: bytes | bytearray = b""
        self._at = 0  # where the next frame starts in _inbox
        self._idle: IdleTimer | None = None
        self._slots: deque[_Slot] = deque()  # read, not yet written, in request order
        self._stalled: asyncio.TimerHandle | None = None  # the client not reading its answers
        self.expires_ms: int | None = None  # when its SASL session ends (wall clock, ms); None: no session
        self._reading = True
        self._writing = True  # False: the write buffer is over its high-water mark
        self._taking = False  # inside _take_all's loop
        self._eof = False  # the client ended its side
        self._ending = False  # no more requests taken: closes once the answers before are written
        self._abort_when_written = False  # TLS: the last answer is on its way (_close_when_written)

    # --- asyncio.Protocol ------------------------------------------------------------------------------

    def _admitted(self, transport: asyncio.Transport) -> None:
        listener = self._listener
        if listener.signer is not None and (self.principal == ANONYMOUS or listener.protocol == "SASL_PLAINTEXT"):
            self.principal = None  # SASL: a session token first (a verified certificate will do on SASL_SSL)
        self._idle = IdleTimer(listener._loop, listener.idle_timeout_s, transport.abort)

    def data_received(self, data: bytes) -> None:
        if self._at >= len(self._inbox):
            self._inbox, self._at = data, 0  # the common case: no partial frame waiting, no copy
        else:
            inbox = self._inbox if isinstance(self._inbox, bytearray) else bytearray(self._inbox)
            del inbox[: self._at]
            inbox += data
            self._inbox, self._at = inbox, 0
        self._take_all()

    def eof_received(self) -> bool:
        self._eof = True
        self._take_all()
        # keep the transport open to write the answers (plain TCP; TLS cannot half-close: it closes now)
        return not self._closed and self._listener.tls is None

    def pause_writing(self) -> None:
        self._writing = False
        assert self._transport is not None
        self._stalled = self._listener._loop.call_later(self._listener.idle_timeout_s, self._transport.abort)

    def resume_writing(self) -> None:
        if self._abort_when_written:
            self.abort()
            return
        self._writing = True
        if self._stalled is not None:
            self._stalled.cancel()
            self._stalled = None
        self.flush()

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None:
            logger.debug("data listener: connection from %s ended: %r", self.who, exc)
        self._end()

    def abort(self) -> None:
        """Close at once (what is not written is dropped), and cancel the requests still waiting."""
        super().abort()
        self._end()

    def _end(self) -> None:
        self._closed = True
        self._listener.connections.discard(self)
        for handle in (self._idle, self._stalled):
            if handle is not None:
                handle.cancel()
        slots, self._slots = self._slots, deque()
        for slot in slots:  # closed early: the requests still running have no one to answer
            if slot.answer is None:
                slot.cancel()

    # --- requests --------------------------------------------------------------------------------------

    def _take_all(self) -> None:
        """Take the requests that have arrived whole while there is room; then read on, or not (back-pressure);
        at the client's end, close once everything it sent is answered. A loop, not a recursion, when answers
        come at once: a client that pipelines many costs no stack."""
        if self._taking or self._closed:
            return
        self._taking = True
        try:
            while not self._ending and len(self._slots) < MAX_PIPELINED and self._take():
                pass
        except _Closing as exc:
            logger.info("data listener: closing %s: %s", self.who, exc)
            self.abort()
            return
        except Exception:
            logger.exception("broker %d: data listener: the connection from %s failed", self._listener.ctx.broker_id,
                             self.who)  # fmt: skip
            self.abort()
            return
        finally:
            self._taking = False
        if self._closed:
            return
        transport = self._transport
        assert transport is not None
        if self._eof and not self._ending and len(self._slots) < MAX_PIPELINED:
            if self._at < len(self._inbox):  # the end came inside a frame
                logger.debug("data listener: connection from %s ended inside a request", self.who)
                self.abort()
                return
            self._ending = True  # everything it sent is taken
        room = not self._ending and len(self._slots) < MAX_PIPELINED
        if room != self._reading and not self._eof:
            self._reading = room
            transport.resume_reading() if room else transport.pause_reading()
        if self._ending and not self._slots:
            transport.close()

    def _take(self) -> bool:
        """Start the next request if it has arrived whole (True), else False; ``_Closing`` when it breaks the
        wire."""
        inbox, at = self._inbox, self._at
        if len(inbox) - at < SIZE.size:
            return False
        (size,) = SIZE.unpack_from(inbox, at)
        listener = self._listener
        if size == 0 or size > listener.max_request_bytes:
            raise _Closing(f"a request of {size} bytes (socket.request.max.bytes is {listener.max_request_bytes})")
        end = at + SIZE.size + size
        if len(inbox) < end:
            return False
        kind = inbox[at + SIZE.size]
        if isinstance(inbox, bytes):  # protobuf parses any buffer: no copy
            message = cast(bytes, memoryview(inbox)[at + _HEAD : end])
        else:  # a bytearray changes under a view: one copy out of it
            with memoryview(inbox) as view:
                message = bytes(view[at + _HEAD : end])
        self._at = end
        idle = self._idle
        assert idle is not None
        if kind == AUTH or self.principal is None or self.expires_ms is not None:
            refusal = listener._authenticate(self, message) if kind == AUTH else listener._unauthenticated(self)
            if refusal is not None or kind == AUTH:
                idle.busy()
                slot = _Slot(self)
                self._slots.append(slot)
                if refusal is not None:
                    self._ending = True  # the answers before it, then the refusal, then the connection closes
                slot.done((refusal or answer_frame(OK, b""), refusal is not None))
                return refusal is None
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
        idle.busy()
        slot = _Slot(self)
        self._slots.append(slot)
        # started now, in the order read: a Produce's appends run before the next request's (ProduceStream)
        cancel = listener._handle(kind, request, self, slot.done)
        if slot.answer is None:
            slot.cancel = cancel
        return True

    def _close_when_written(self) -> None:
        """Close after the answers written so far: on plain TCP a FIN once they are sent (``close``); under TLS an
        abort once they are sent, without a close_notify, as this listener always closed (the DATA link of
        releases before 2026-11-28 read a close_notify as empty data forever: ``odradek/net/data_link.py``)."""
        transport = self._transport
        assert transport is not None
        if self._listener.tls is None:
            transport.close()
            return
        self._abort_when_written = True
        if transport.get_write_buffer_size() == 0:
            self.abort()
        else:
            transport.set_write_buffer_limits(high=0)  # resume_writing once all is sent: the abort then

    def flush(self) -> None:
        """Write the answers ready at the head, in request order; then take more requests (room was made)."""
        if self._closed:
            return
        transport = self._transport
        assert transport is not None
        assert self._idle is not None
        if transport.is_closing():
            return  # aborted or lost: no one to answer
        slots = self._slots
        while slots and self._writing and (head := slots[0]).answer is not None:
            slots.popleft()
            transport.write(head.answer)
            self._idle.idle()
            if head.close:
                self._ending = True
                self._close_when_written()
                return
        self._take_all()
