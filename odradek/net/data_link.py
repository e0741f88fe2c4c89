"""A client's connection to a broker's ``DATA`` listener: Produce and Fetch requests as length-prefixed frames on
plain TCP (the wire is :mod:`common.framing`'s docstring; the server is ``broker.data_listener``).

Why: on gRPC each request costs the broker about three times the CPU of a frame and a thread hop on each side
(``bench/rpc_floor.py``, docs/LATENCY.md). :class:`DataLink` keeps the contract of the gRPC stream it replaces
(``common.streams.OrderedStream``): :meth:`DataLink.start` returns a future completed with the answer, the
futures of one connection complete in the order their requests were started, and a late answer fails every
request waiting on the connection.

- **Pipelined, answered in order.** :meth:`~DataLink.start` sends on the caller's thread and does not wait for
  earlier answers; the request joins the connection's FIFO under the same lock as its send, so the FIFO is the
  order on the wire, and each answer completes the oldest waiting request.
- **One reader thread per connection** (daemon, ``<name>-reader``) reads the answers and completes the futures;
  their done-callbacks run there (the callers only hand the answer over to their own thread).
- **Failures.** An ERROR answer (``"CODE: message"``: the request refused as a whole) fails its future with the
  code's :class:`~odradek.errors.KafkaError` and the connection goes on. Anything that breaks the wire (EOF, a
  socket error, an answer over ``max_answer_bytes``, an empty answer, an unknown status, a message that does not
  parse, an answer no request waits for) closes the connection and fails every waiting request with
  :class:`~odradek.errors.NetworkError`, which the callers retry; the next :meth:`~DataLink.start` connects
  again. A connection that cannot be opened fails with :class:`DataLinkUnreachable` (a NetworkError), on which
  the callers use gRPC for a while. The broker closing an idle connection is seen by the reader at once (it
  always reads), so the next request simply opens a new one.
- **Deadlines.** A request not answered ``timeout_s`` after it was started closes the connection and fails
  every waiting request (Kafka's client disconnects on a request timeout the same way). The reader waits for
  the socket with a timeout that ends at the earliest deadline waiting; with nothing waiting, it ends after the
  shortest timeout seen on the connection (at least :data:`MIN_IDLE_WAIT_S`), which is no later than the
  deadline of any request started meanwhile with that timeout or a longer one (the usual case: one timeout per
  caller). So the reader wakes only for answers, for deadlines and once per such timeout while idle; only a
  request whose deadline comes before the reader's wake-up time (a shorter timeout than any before) writes a
  byte to a wake-up socket pair the reader also waits on. No polling, and no wake-up per request.
- **SASL** (a ``session``: the client's SASL session with the same broker, ``odradek.security.sasl_client``): a
  connection authenticates with an AUTH frame carrying the session's token ahead of its first request, and again
  ahead of the first request after the session renewed its token (KIP-368's re-authentication, before the old
  one expires); the frames go out together and are answered in order. A refused AUTH makes the session forget
  its token (the broker restarted, or the session expired) and the broker closes the connection: the requests
  behind it fail with NetworkError and are retried, the next one authenticating anew. A token that cannot be
  had (the SASL exchange failed: wrong credentials, the broker unreachable) fails the request with that error,
  unsent.
- **TLS** runs on memory BIOs (``ssl.SSLContext.wrap_bio``), the socket's I/O outside them: an OpenSSL
  connection must not be read on one thread while written on another, and the reader and the callers do both
  at once (an ``SSLSocket`` shared that way can corrupt or crash). Encryption and decryption take a short
  per-connection lock; the caller's ``sendall`` and the reader's ``recv`` on the raw socket need none.
- **Sockets are closed by their reader only** (after a ``shutdown``, which anyone may do to wake it and any
  blocked send), under the connection's send lock, so no file descriptor is closed under a thread using it.

Thread-safety: every method from any thread; :meth:`~DataLink.close` does not wait for the reader (it may run on
it), which ends as soon as it sees the socket shut down.
"""

from __future__ import annotations

import contextlib
import logging
import re
import selectors
import socket
import ssl
import threading
import time
from collections import deque
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass
from typing import Any, Protocol, cast

from google.protobuf.message import DecodeError

from common.framing import AUTH, ERROR, FETCH, KINDS, OK, PRODUCE, SIZE, split_host_port
from odradek.errors import KafkaError, NetworkError, SaslAuthenticationFailedError, error_from_code
from proto import broker_pb2 as pb

logger = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 5.0  # at most, for the TCP connect and the TLS handshake together
MIN_IDLE_WAIT_S = 1.0  # the reader's wait with nothing pending is never shorter (see the module docstring)
MAX_WAIT_S = 300.0  # nor any of its waits longer (a selector takes no infinite timeout)
CHUNK = 256 * 1024  # the most one read takes from the socket
_ANSWERS: dict[int, Any] = {PRODUCE: pb.ProduceResponse, FETCH: pb.FetchResponse}  # AUTH's answer is empty
_CODE = re.compile(r"[A-Z][A-Z0-9_]*")


class DataLinkUnreachable(NetworkError):
    """No connection to the DATA listener could be opened (refused, unreachable, no TLS handshake in time or a
    refused one): the request was not sent, and the caller may send on gRPC instead for a while."""


class SaslTokens(Protocol):
    """A SASL session with one broker (``odradek.security.sasl_client.SaslSession``)."""

    def token(self) -> str:
        """A current session token (authenticating first when there is none or it is due for renewal); raises
        the KafkaError of a failed exchange."""
        ...

    def forget(self, token: str) -> None:
        """The broker refused ``token``: the next :meth:`token` authenticates again."""
        ...


class _Broken(Exception):
    """What the peer sent breaks the wire: the connection closes (the message says why)."""


@dataclass(slots=True)
class _Request:
    future: Future[Any]
    kind: int
    timeout_s: float
    deadline: float  # time.monotonic()


def _fail_requests(requests: list[_Request], reason: str) -> None:
    """Fail each with a NetworkError of its own (``reason`` names the address)."""
    for request in requests:
        _settle(request.future, error=NetworkError(f"{KINDS[request.kind]}: {reason}"))


def _settle(future: Future[Any], result: Any = None, error: BaseException | None = None) -> None:
    """Complete ``future`` unless its caller gave up on it (cancelled)."""
    with contextlib.suppress(InvalidStateError):
        if error is None:
            future.set_result(result)
        else:
            future.set_exception(error)


class _Plain:
    """The socket itself."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    def send(self, data: bytes) -> None:
        self._sock.sendall(data)

    def read(self, inbox: bytearray, scratch: memoryview) -> bool:
        """Append what the (readable) socket holds to ``inbox``; False at EOF."""
        n = self._sock.recv_into(scratch)
        inbox += scratch[:n]
        return n > 0


class _Tls:
    """TLS on memory BIOs over the raw socket (why: the module docstring). :meth:`send` is called under the
    connection's send lock, so the records leave in the order they were made, those made by a read (a TLS 1.3
    KeyUpdate's answer, rare) with the next request."""

    def __init__(self, sock: socket.socket, context: ssl.SSLContext, host: str, deadline: float) -> None:
        self._sock = sock
        self._incoming, self._outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self._ssl = context.wrap_bio(self._incoming, self._outgoing, server_hostname=host)
        self._lock = threading.Lock()  # the SSLObject's: held to encrypt or decrypt, never during socket I/O
        while True:  # the handshake, on the caller's thread before the reader starts
            try:
                self._ssl.do_handshake()
                break
            except ssl.SSLWantReadError:
                pass
            sock.settimeout(max(0.001, deadline - time.monotonic()))
            sock.sendall(self._outgoing.read())
            raw = sock.recv(CHUNK)
            if not raw:
                raise ConnectionError("the peer closed the connection in the TLS handshake")
            self._incoming.write(raw)
        sock.settimeout(max(0.001, deadline - time.monotonic()))
        sock.sendall(self._outgoing.read())  # the client's Finished

    def send(self, data: bytes) -> None:
        with self._lock:
            view = memoryview(data)
            while view:  # a memory BIO takes it all; a loop all the same
                view = view[self._ssl.write(view) :]
            out = self._outgoing.read()
        self._sock.sendall(out)

    def read(self, inbox: bytearray, scratch: memoryview) -> bool:
        raw = self._sock.recv(CHUNK)
        if not raw:
            return False
        with self._lock:
            self._incoming.write(raw)
            while True:
                try:
                    n = cast(int, self._ssl.read(len(scratch), scratch))  # with a buffer: the count read
                except ssl.SSLWantReadError:  # all that arrived is decrypted
                    return True
                except ssl.SSLZeroReturnError:  # the peer's close_notify
                    return False
                if n == 0:  # the peer's close_notify, as the ssl module reports it on a memory BIO
                    return False
                inbox += scratch[:n]


class _Connection:
    """One open connection: its socket, the requests waiting on it in wire order, its reader's wake-up pair."""

    def __init__(self, sock: socket.socket, transport: _Plain | _Tls, idle_wait_s: float) -> None:
        self.sock = sock
        self.transport = transport
        self.pending: deque[_Request] = deque()  # guarded by DataLink._lock
        self.send_lock = threading.Lock()  # one send at a time; the reader closes the socket under it
        self.sock_closed = False  # guarded by send_lock
        self.dead = False  # guarded by DataLink._lock: failed or closed, no request joins any more
        self.wake_at = 0.0  # when the reader's current wait ends (written by the reader under DataLink._lock)
        self.woken = False  # a wake-up byte was written since the reader last looked
        self.idle_wait_s = max(MIN_IDLE_WAIT_S, idle_wait_s)  # the reader's wait with nothing pending
        self.token = ""  # the SASL session token last sent on it (guarded by DataLink._start_lock)
        self.wake_r, self.wake_w = socket.socketpair()
        self.wake_r.setblocking(False)
        self.wake_w.setblocking(False)  # written under DataLink._lock: never blocks

    def shutdown(self) -> None:
        """Wake the reader and any blocked send (the socket is closed by the reader)."""
        with contextlib.suppress(OSError):  # not connected any more, or closed already
            self.sock.shutdown(socket.SHUT_RDWR)

    def close_socket(self) -> None:
        with self.send_lock:
            self.sock_closed = True
            with contextlib.suppress(OSError):
                self.sock.close()

    def discard(self) -> None:
        """Close everything of a connection no reader runs for."""
        self.close_socket()
        self.wake_r.close()
        self.wake_w.close()


class DataLink:
    """A connection to the DATA listener at ``address`` (``host:port``), opened by the first :meth:`start` and
    again after a failure; ``tls``: the client's TLS context (None: plaintext); ``max_answer_bytes``: the largest
    answer frame accepted; ``name`` names the reader threads (``<name>-reader``) and the log lines; ``session``:
    the client's SASL session with this broker (None: no SASL)."""

    def __init__(
        self, address: str, tls: ssl.SSLContext | None, max_answer_bytes: int, name: str,
        session: SaslTokens | None = None,
    ) -> None:  # fmt: skip
        self.address = address
        self._session = session
        self._tls = tls
        self._max_answer_bytes = max_answer_bytes
        self._name = name
        self._lock = threading.Lock()  # the link's and its connections' state; never held during I/O
        self._start_lock = threading.Lock()  # one start() at a time: connect, join the FIFO, send
        self._conn: _Connection | None = None  # the open connection, None when there is none
        self._closed = False

    @property
    def pending(self) -> int:
        """Requests sent and not yet answered on the open connection."""
        with self._lock:
            return len(self._conn.pending) if self._conn is not None else 0

    def start(self, kind: int, message: Any, timeout_s: float) -> Future[Any]:
        """Send ``message`` (``kind`` :data:`~common.framing.PRODUCE`: a ProduceRequest, or
        :data:`~common.framing.FETCH`: a FetchRequest) after the requests started before it; the future
        completes with its ProduceResponse or FetchResponse, or fails (the module docstring): a KafkaError for
        a refusal, :class:`DataLinkUnreachable` when no connection could be opened, NetworkError when the link
        is closed or the connection failed or was not answered within ``timeout_s``; with SASL, the error of a
        session token that could not be had."""
        if kind not in (PRODUCE, FETCH):
            raise ValueError(f"unknown DATA request kind {kind}")
        future: Future[Any] = Future()
        token = ""
        if self._session is not None:
            try:
                token = self._session.token()
            except KafkaError as exc:
                future.set_exception(exc)
                return future
        deadline = time.monotonic() + timeout_s
        request = _Request(future, kind, timeout_s, deadline)
        body = message.SerializeToString()
        data = b"".join((SIZE.pack(len(body) + 1), bytes((kind,)), body))
        what = f"{KINDS[kind]} to {self.address}"
        with self._start_lock:
            with self._lock:
                if self._closed:
                    future.set_exception(NetworkError(f"{what}: the DATA link is closed"))
                    return future
                conn = self._conn
                if conn is not None:
                    self._enqueue_locked(conn, request)
            if conn is None:
                try:
                    conn = self._open(timeout_s)
                except OSError as exc:  # TimeoutError and ssl.SSLError are OSErrors
                    future.set_exception(DataLinkUnreachable(f"{what}: cannot connect to the DATA listener: {exc}"))
                    return future
                with self._lock:
                    installed = not self._closed
                    if installed:
                        self._conn = conn
                        self._enqueue_locked(conn, request)
                if not installed:  # closed while connecting
                    conn.discard()
                    future.set_exception(NetworkError(f"{what}: the DATA link is closed"))
                    return future
                reader = threading.Thread(target=self._read, args=(conn,), name=f"{self._name}-reader", daemon=True)
                try:
                    reader.start()
                except RuntimeError as exc:  # no thread (interpreter shutdown, ...): nothing would read
                    self._fail(conn, f"no reader for the connection to {self.address}: {exc}")
                    conn.discard()
                    return future
            if token != conn.token:  # a new connection, or a renewed session: authenticate first
                data = self._authenticate(conn, request, token) + data
            try:
                with conn.send_lock:
                    if conn.sock_closed:
                        raise ConnectionError("the connection is closed")
                    conn.transport.send(data)
            except OSError as exc:  # reset, or shut down by close() or a deadline (the request failed already)
                self._fail(conn, f"sending to {self.address} failed: {exc!r}; the connection was closed")
        return future

    def _authenticate(self, conn: _Connection, request: _Request, token: str) -> bytes:
        """The AUTH frame carrying ``token``, its request placed in ``conn``'s FIFO ahead of ``request``, the one
        being started (under ``_start_lock``, on a connection that has its reader)."""
        auth: _Request = _Request(Future(), AUTH, request.timeout_s, request.deadline)
        with self._lock:
            pending = conn.pending
            if conn.dead or not pending or pending[-1] is not request:  # failed meanwhile, or a stray answer took
                return b""  # the request (a broken wire): no AUTH goes out, the broker refuses what does
            self._enqueue_locked(conn, auth)
            pending[-1], pending[-2] = pending[-2], pending[-1]  # ahead of the request just queued, as they go out
        session = self._session
        assert session is not None

        def refused(done: Future[Any]) -> None:
            if isinstance(done.exception(), SaslAuthenticationFailedError):
                session.forget(token)  # the broker does not take it (it restarted, or the session ended)

        auth.future.add_done_callback(refused)
        conn.token = token
        encoded = token.encode("utf-8")
        return b"".join((SIZE.pack(len(encoded) + 1), bytes((AUTH,)), encoded))

    def _enqueue_locked(self, conn: _Connection, request: _Request) -> None:
        conn.pending.append(request)
        conn.idle_wait_s = max(MIN_IDLE_WAIT_S, min(conn.idle_wait_s, request.timeout_s))
        if request.deadline < conn.wake_at and not conn.woken:  # the reader would wake too late for it
            conn.woken = True
            with contextlib.suppress(OSError):  # full: a byte is there already
                conn.wake_w.send(b"\0")

    def _open(self, timeout_s: float) -> _Connection:
        host, port = split_host_port(self.address)
        deadline = time.monotonic() + min(CONNECT_TIMEOUT_S, timeout_s)
        sock = socket.create_connection((host, port), timeout=max(0.001, deadline - time.monotonic()))
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            transport = _Plain(sock) if self._tls is None else _Tls(sock, self._tls, host, deadline)
            sock.settimeout(None)  # blocking: sends wait for room, the reader waits in its selector
            return _Connection(sock, transport, timeout_s)
        except BaseException:
            sock.close()
            raise

    def close(self) -> None:
        """Close the connection and fail every waiting request; every later :meth:`start` fails. Idempotent."""
        with self._lock:
            self._closed = True
            conn = self._conn
        if conn is not None:
            self._fail(conn, f"the DATA link to {self.address} was closed")

    # ------------------------------------------------------------------------------------- failures

    def _kill_locked(self, conn: _Connection) -> list[_Request]:
        """Mark ``conn`` failed; the requests waiting on it, to fail (none when it failed before)."""
        if conn.dead:
            return []
        conn.dead = True
        if self._conn is conn:
            self._conn = None
        failed = list(conn.pending)
        conn.pending.clear()
        return failed

    def _fail(self, conn: _Connection, reason: str) -> None:
        """Fail ``conn`` and what waits on it (``reason`` names the address), shut it down for its reader."""
        with self._lock:
            failed = self._kill_locked(conn)
        conn.shutdown()
        _fail_requests(failed, reason)

    # -------------------------------------------------------------------------------------- reader

    def _read(self, conn: _Connection) -> None:
        """The connection's reader thread: waits for answers (or the earliest deadline, or a wake-up), completes
        the oldest waiting request with each; at the end fails what still waits and closes the socket."""
        inbox = bytearray()  # bytes read and not yet taken as answers
        scratch = memoryview(bytearray(CHUNK))
        reason = "the connection was closed"
        selector = selectors.DefaultSelector()
        try:
            selector.register(conn.sock, selectors.EVENT_READ, False)
            selector.register(conn.wake_r, selectors.EVENT_READ, True)
            while True:
                with self._lock:
                    if conn.dead:
                        return
                    now = time.monotonic()
                    late = min(conn.pending, key=lambda r: r.deadline, default=None)
                    if late is not None and late.deadline <= now:
                        reason = f"{self.address} did not answer within {late.timeout_s:g} s; the connection was closed"
                        return
                    until = late.deadline if late is not None else now + conn.idle_wait_s
                    conn.wake_at = min(until, now + MAX_WAIT_S)
                    conn.woken = False
                    wait = conn.wake_at - now
                for key, _ in selector.select(wait):
                    if key.data:  # woken: the loop looks at the deadlines again
                        with contextlib.suppress(OSError):
                            conn.wake_r.recv(64)
                    elif not conn.transport.read(inbox, scratch):
                        self._take_answers(conn, inbox)  # what came with the end (TLS: ahead of a close_notify)
                        inside = f", inside a frame ({len(inbox)} bytes of it read)" if inbox else ""
                        reason = f"{self.address} closed the connection{inside}"
                        return
                    else:
                        self._take_answers(conn, inbox)
        except _Broken as exc:
            reason = f"{exc}; the connection was closed"
        except OSError as exc:  # reset, a TLS error, ...
            reason = f"the connection to {self.address} failed: {exc!r}"
        except Exception as exc:
            logger.exception("%s: the reader failed", self._name)
            reason = f"the connection to {self.address} failed: {exc!r}"
        finally:
            selector.close()
            with self._lock:
                failed = self._kill_locked(conn)
                conn.wake_r.close()  # under the lock: start() writes to wake_w under it, on a live connection only
                conn.wake_w.close()
            conn.shutdown()
            conn.close_socket()
            if failed:
                logger.info("%s: %s (%d requests failed)", self._name, reason, len(failed))
            else:
                logger.debug("%s: %s", self._name, reason)
            _fail_requests(failed, reason)

    def _take_answers(self, conn: _Connection, inbox: bytearray) -> None:
        """Complete the waiting requests with the whole answers in ``inbox`` (taken from it); ``_Broken``."""
        while len(inbox) >= SIZE.size:
            (size,) = SIZE.unpack_from(inbox)
            if size > self._max_answer_bytes:
                raise _Broken(f"{self.address} answered {size} bytes, over the limit of {self._max_answer_bytes}")
            if size == 0:
                raise _Broken(f"{self.address} sent an empty answer")
            end = SIZE.size + size
            if len(inbox) < end:
                return
            with self._lock:
                head = conn.pending[0] if conn.pending else None
            if head is None:
                raise _Broken(f"{self.address} sent an answer no request waits for")
            outcome = self._outcome(head.kind, inbox, end)
            del inbox[:end]
            with self._lock:  # only this thread takes from pending; close() may have emptied it
                if conn.dead:
                    return
                conn.pending.popleft()
            if isinstance(outcome, KafkaError):
                _settle(head.future, error=outcome)
            else:
                _settle(head.future, outcome)

    def _outcome(self, kind: int, inbox: bytearray, end: int) -> Any:
        """The answer in ``inbox[:end]`` to a request of ``kind``: its response, or the refusal's KafkaError."""
        status = inbox[SIZE.size]
        what = f"{KINDS[kind]} to {self.address}"
        with memoryview(inbox) as view, view[SIZE.size + 1 : end] as body:
            if status == OK and kind == AUTH:
                return None
            if status == OK:
                response = _ANSWERS[kind]()
                try:
                    response.ParseFromString(body)
                except DecodeError as exc:
                    raise _Broken(f"{self.address} answered with a message that does not parse ({exc})") from None
                return response
            if status == ERROR:
                text = bytes(body).decode("utf-8", "replace")
        if status != ERROR:
            raise _Broken(f"{self.address} answered with the unknown status {status}")
        code, sep, message = text.partition(": ")
        if sep and _CODE.fullmatch(code):
            return error_from_code(code, f"{what}: {message}")
        return error_from_code("UNKNOWN_SERVER_ERROR", f"{what}: {text}")
