"""One client connection: read a request, answer it, read the next (Kafka's order guarantee).

Frames (Kafka's protocol guide): every request and response is ``int32 size`` + that many bytes.

Request header (v1; v2 adds tagged fields; the header is v2 exactly when the request's version is
flexible)::

    int16   request_api_key
    int16   request_api_version
    int32   correlation_id
    string  client_id           int16 length, -1 for null (not compact even in v2)
    tagged  fields              v2 only: uvarint count, then (uvarint tag, uvarint size, bytes) each

Response header: ``int32 correlation_id``, plus an empty tagged-field section (one 0 byte) when the
request was flexible, except for ApiVersions, whose response header is always v0 (so a client can read
it whatever version it asked for).

Answers go out in request order. A request is handled before the next one is read, so appends keep the
connection's order; most are answered at once. An acks=all Produce whose appends are done answers a
:class:`~broker.kafka.api.Pending` (it waits for the ISR): the connection then goes on reading while a
writer thread of its own waits for it and sends every answer in request order, at most
:data:`MAX_PIPELINED` answers waiting (the reader stops reading beyond: back-pressure). Kafka mutes a
connection until its answer is sent instead, which caps a connection at one acks=all round trip per
request: a client that sends a request every ``linger.ms`` (librdkafka sends many in flight) then queues
without bound as soon as a round trip takes longer than that. On a TLS connection the answer is waited
for on the reading thread, as Kafka does (an SSL object is used by one thread at a time).
An unknown API or version, a malformed header or body, a frame over ``socket.request.max.bytes``, or an
exception escaping a handler closes the connection (Kafka's behaviour; the client reconnects and
re-negotiates); ApiVersions at an unknown version is answered at v0 with UNSUPPORTED_VERSION.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import select
import socket
import ssl
import struct
import threading
import time
from typing import Any

from broker.context import BrokerContext
from broker.kafka import codec, security
from broker.kafka.api import NO_RESPONSE, Api, CloseConnection, FileRegion, Pending, RawResponse, Request, Session
from controller.security.rules import Denial

logger = logging.getLogger(__name__)

SIZE = struct.Struct(">i")
HEADER_FIXED = struct.Struct(
    ">h"  # request_api_key
    "h"  # request_api_version
    "i"  # correlation_id
    "h"  # client_id length (-1: null)
)
API_VERSIONS_KEY = 18
SENDFILE_CHUNK = 1 << 30
MAX_PIPELINED = 16  # answers waiting to be sent on one connection; the reader stops reading beyond
_Answer = tuple[int, bool, Any, str, float]  # correlation id, flexible, answer or Pending, API name, started


class ProtocolError(Exception):
    """The client broke the protocol: the connection closes."""


def parse_header(frame: memoryview, flexible_of: Any) -> tuple[int, int, int, str, int]:
    """``(api_key, version, correlation_id, client_id, body_offset)``; ``flexible_of(key, version)`` tells
    whether the header has tagged fields (None: unknown API or version, read as v1)."""
    if len(frame) < HEADER_FIXED.size:
        raise ProtocolError(f"a request header needs {HEADER_FIXED.size} bytes, got {len(frame)}")
    api_key, version, correlation_id, length = HEADER_FIXED.unpack_from(frame, 0)
    pos = HEADER_FIXED.size
    client_id = ""
    if length > 0:
        if pos + length > len(frame):
            raise ProtocolError("the client id runs past the end of the request")
        client_id = bytes(frame[pos : pos + length]).decode("utf-8", "replace")
        pos += length
    elif length < -1:
        raise ProtocolError(f"client id length {length}")
    if flexible_of(api_key, version):
        count, pos = read_uvarint(frame, pos)
        for _ in range(count):
            _tag, pos = read_uvarint(frame, pos)
            size, pos = read_uvarint(frame, pos)
            pos += size
        if pos > len(frame):
            raise ProtocolError("the header's tagged fields run past the end of the request")
    return api_key, version, correlation_id, client_id, pos


def read_uvarint(buf: memoryview | bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf) or shift > 28:
            raise ProtocolError("a malformed unsigned varint")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


class Connection:
    """Serves one socket until the client closes it, breaks the protocol, idles out, or the server stops.

    Thread-safety: one thread runs :meth:`serve`; :meth:`close` may be called from any (it shuts the
    socket down, which ends the loop).
    """

    def __init__(
        self, ctx: BrokerContext, sock: socket.socket, session: Session, table: dict[int, Api],
        max_request_bytes: int, idle_timeout_s: float,
    ) -> None:  # fmt: skip
        self.ctx = ctx
        self.sock = sock
        self.session = session
        self.table = table
        self.max_request_bytes = max_request_bytes
        self.idle_timeout_s = idle_timeout_s
        # the writer: started by the first Pending answer; from then on every answer goes through it, in order
        self._answers: queue.SimpleQueue[_Answer | None] | None = None
        self._slots = threading.BoundedSemaphore(MAX_PIPELINED)
        self._writer: threading.Thread | None = None

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)

    def serve(self) -> None:
        try:
            while True:
                frame = self._read_frame()
                if frame is None:
                    return
                self._serve_one(frame)
        except ProtocolError as exc:
            logger.info("kafka listener: closing %s:%d: %s", self.session.client_host, self.session.client_port, exc)
        except (OSError, TimeoutError) as exc:
            logger.debug("kafka listener: connection from %s ended: %s", self.session.client_host, exc)
        finally:
            if self._answers is not None:  # the writer closes the socket once the answers before this end are out
                self._answers.put(None)
            else:
                self.sock.close()

    def _read_frame(self) -> memoryview | None:
        self.sock.settimeout(self.idle_timeout_s)
        head = self._recv_exactly(SIZE.size, allow_eof=True)
        if head is None:
            return None
        (size,) = SIZE.unpack(head)
        if size < HEADER_FIXED.size or size > self.max_request_bytes:
            raise ProtocolError(f"request size {size} outside [{HEADER_FIXED.size}, {self.max_request_bytes}] "
                                "(socket.request.max.bytes)")  # fmt: skip
        body = self._recv_exactly(size, allow_eof=False)
        assert body is not None
        return memoryview(body).toreadonly()  # kio reads read-only buffers (it copies each records field out once)

    def _recv_exactly(self, size: int, *, allow_eof: bool) -> bytearray | None:
        buf = bytearray(size)
        view = memoryview(buf)
        got = 0
        while got < size:
            n = self.sock.recv_into(view[got:], size - got)
            if n == 0:
                if allow_eof and got == 0:
                    return None
                raise ProtocolError(f"the client closed the connection in the middle of a request ({got}/{size})")
            got += n
        return buf

    def _flexible(self, api_key: int, version: int) -> bool | None:
        api = self.table.get(api_key)
        if api is None or not api.min_version <= version <= api.max_version:
            return api_key == API_VERSIONS_KEY and version >= 3  # an unknown ApiVersions version: v2 header
        return bool(codec.request_class(api_key, version).__flexible__)

    def _serve_one(self, frame: memoryview) -> None:
        api_key, version, correlation_id, client_id, offset = parse_header(frame, self._flexible)
        api = self.table.get(api_key)
        if api_key == API_VERSIONS_KEY and (api is None or not api.min_version <= version <= api.max_version):
            from broker.kafka.api_versions import unsupported_version  # the one answer outside the table

            self._answer(correlation_id, False, unsupported_version(self.table))
            return
        if api is None:
            raise ProtocolError(f"unknown API key {api_key}")
        if not api.min_version <= version <= api.max_version:
            raise ProtocolError(f"{api.name} v{version} is not supported (v{api.min_version}-v{api.max_version})")
        if not self.session.authenticated and not api.before_auth:
            raise ProtocolError(f"{api.name} before authentication")
        try:
            body = codec.read_request(api_key, version, frame, offset)
        except Exception as exc:
            raise ProtocolError(f"malformed {api.name} v{version} request: {exc}") from None
        self.session.client_id = client_id
        request = Request(self.ctx, self.session, api_key, version, correlation_id, client_id, body)
        metrics = self.ctx.metrics
        started = time.perf_counter() if metrics is not None else 0.0
        check = None if api.before_auth else security.check_of(request)
        if check is not None:  # the authorizer (broker/kafka/security.py): before the handler, nothing changes
            rule = security.KAFKA_RULES.get(api_key)
            denial = Denial("CLUSTER_AUTHORIZATION_FAILED", f"{api.name}: no rule") if rule is None else rule(
                body, check)  # fmt: skip
            if denial is not None:
                refused = security.refusal(request, denial)
                if refused is None:
                    raise ProtocolError(f"{api.name} refused: {denial.code}: {denial.message}")
                self._answer(correlation_id, bool(codec.request_class(api_key, version).__flexible__), refused)
                return
        try:
            answer = api.handle(request)
        except CloseConnection as exc:
            raise ProtocolError(str(exc)) from None
        except Exception:
            logger.exception("broker %d: kafka %s v%d failed", self.ctx.broker_id, api.name, version)
            if metrics is not None:
                metrics.requests.record_kafka(api.name, started, failed=True)
            raise ProtocolError(f"{api.name} failed on the broker") from None
        if isinstance(answer, Pending):
            if not isinstance(self.sock, ssl.SSLSocket):
                self._queue((correlation_id, bool(codec.request_class(api_key, version).__flexible__), answer,
                             api.name, started))  # fmt: skip
                return
            answer.wait()  # TLS: one thread per SSL object (OpenSSL's rule), so no writer: answered here
            answer = answer.finish()
        if metrics is not None:
            metrics.requests.record_kafka(api.name, started)
        if answer is None:
            return
        if check is not None and api_key == 3:
            answer = security.filter_topics(answer, check, [t.name for t in body.topics or () if t.name])
        elif check is not None and api_key == 16:
            answer = security.filter_groups(answer, check)
        elif check is not None and api_key == 66:
            answer = security.filter_transactions(answer, check)
        flexible = api_key != API_VERSIONS_KEY and bool(codec.request_class(api_key, version).__flexible__)
        self._answer(correlation_id, flexible, answer)

    def _answer(self, correlation_id: int, flexible: bool, answer: Any) -> None:
        """Send ``answer`` now, or after the answers still waiting (once the writer runs)."""
        if self._answers is None:
            self._send(correlation_id, flexible, answer)
        else:
            self._queue((correlation_id, flexible, answer, "", 0.0))

    def _queue(self, item: _Answer) -> None:
        """Hand an answer to the writer (started at the first), waiting for a slot: back-pressure."""
        if self._answers is None:
            self._answers = queue.SimpleQueue()
            self._writer = threading.Thread(target=self._write, args=(self._answers,),
                                            name=f"{threading.current_thread().name}-writer", daemon=True)  # fmt: skip
            self._writer.start()
        self._slots.acquire()
        self._answers.put(item)

    def _write(self, answers: queue.SimpleQueue[_Answer | None]) -> None:
        """The writer thread: each answer in order, a Pending one once it is ready. A failed send closes the
        connection (the reader then stops); the answers after it are dropped."""
        broken = False
        metrics = self.ctx.metrics
        try:
            while (item := answers.get()) is not None:
                correlation_id, flexible, answer, name, started = item
                try:
                    if isinstance(answer, Pending):
                        answer.wait()
                        if broken:
                            continue
                        answer = answer.finish()
                        if metrics is not None:
                            metrics.requests.record_kafka(name, started)
                    if not broken and answer is not NO_RESPONSE:
                        self._send(correlation_id, flexible, answer)
                except Exception as exc:
                    if not broken:
                        log = logger.debug if isinstance(exc, OSError | TimeoutError) else logger.exception
                        log("kafka listener: %s:%d: cannot answer: %s", self.session.client_host,
                            self.session.client_port, exc)  # fmt: skip
                        broken = True
                        self.close()
                finally:
                    self._slots.release()
        finally:
            self.sock.close()

    def _send(self, correlation_id: int, flexible: bool, answer: Any) -> None:
        header = SIZE.pack(correlation_id) + (b"\x00" if flexible else b"")
        if not isinstance(answer, RawResponse):
            try:
                body = codec.encode(answer)
            except Exception:
                logger.exception("broker %d: cannot encode %s", self.ctx.broker_id, type(answer).__name__)
                raise ProtocolError(f"cannot encode {type(answer).__name__}") from None
            self.sock.sendall(SIZE.pack(len(header) + len(body)) + header + body)
            return
        try:
            self._send_parts(SIZE.pack(len(header) + answer.size) + header, answer.parts)
        finally:
            answer.close()

    def _send_parts(self, head: bytes, parts: list[bytes | FileRegion]) -> None:
        pending = [head]
        for part in parts:
            if isinstance(part, FileRegion):
                if not self.session.sendfile:
                    pending.append(part.read())
                    continue
                self.sock.sendall(b"".join(pending), socket.MSG_MORE)
                pending = []
                self._sendfile(part)
            else:
                pending.append(part)
        if pending:
            self.sock.sendall(b"".join(pending))

    def _sendfile(self, region: FileRegion) -> None:
        """The region's bytes from the page cache to the socket (Kafka's ``FileRecords.writeTo``). The socket
        stays non-blocking: a client that stops reading for ``connections.max.idle.ms`` is dropped rather than
        holding this thread."""
        self.sock.settimeout(self.idle_timeout_s)  # O_NONBLOCK at the OS level: sendfile returns EAGAIN
        sent, out = 0, self.sock.fileno()
        writable = select.poll()
        writable.register(out, select.POLLOUT)
        while sent < region.size:
            try:
                n = os.sendfile(out, region.fd, region.position + sent, min(region.size - sent, SENDFILE_CHUNK))
            except BlockingIOError:
                if not writable.poll(self.idle_timeout_s * 1000):
                    raise TimeoutError(f"the client read nothing for {self.idle_timeout_s:.0f} s") from None
                continue
            if n == 0:  # the file shrank under us: the frame cannot be completed
                raise ProtocolError(f"segment ended after {sent}/{region.size} bytes of a fetch response")
            sent += n
