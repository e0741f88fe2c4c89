"""The broker's ``DATA`` listener (``broker/data_listener.py``) on real sockets, its loop in a thread, with a
scripted service in place of the BrokerService: answers in request order with the appends in request order,
back-pressure at MAX_PIPELINED, the refusals that keep the connection (a follower's fetch, the authorizer) and
the ones that close it (a frame that breaks the wire, a failing handler, idleness, max.connections, stop), the
principal under SSL, and under SASL the AUTH frame's session token (the principal, re-authentication, refusals,
expiry)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from broker.config import BrokerConfig
from broker.data_listener import MAX_PIPELINED, NAME, DataListener, is_data_listener
from common.framing import AUTH, ERROR, FETCH, OK, PRODUCE, SIZE, frame, recv_exactly
from controller.security.authorizer import Authorizer
from controller.security.interceptor import AuthorizerCache
from controller.security.principal_rules import PrincipalMapper
from controller.security.settings import NodeSecurity
from controller.security.token import TokenSigner
from metadata.acl import AccessControlEntry, AclBinding, AclOperation, AclPermissionType, PatternType
from metadata.acl import ResourcePattern as P
from metadata.acl import ResourceType as Rt
from metadata.configs import ConfigError
from odradek.security.certs import CertificateAuthority
from proto import broker_pb2 as pb

WAIT_S = 5.0  # the bound of every wait for something that must happen
QUIET_S = 0.3  # how long something that must not happen is given to happen


# ------------------------------------------------------------------------------------------- the service


class ScriptedService:
    """``produce_then`` and ``fetch_then`` as a test scripts them, on the listener's loop, as the BrokerService
    answers: a Produce "appends" inside the call (its base offset is the number of Produce calls before it), and
    what needs no wait is answered inside the call too. A topic in ``held`` waits (in a task) for
    :meth:`release`; one in ``failing`` fails (inside the call, or after its release)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._changed = threading.Condition()
        self.seen: list[tuple[str, str]] = []  # (rpc, topic) in the order the handlers were called
        self.finished: list[str] = []  # topics whose handler answered, in that order
        self.cancelled: list[str] = []  # topics whose handler was cancelled while held
        self.held: dict[str, asyncio.Event] = {}
        self.failing: set[str] = set()
        self.sizes: dict[str, int] = {}  # topic -> the bytes of records its fetch answers

    def hold(self, *topics: str) -> None:
        for topic in topics:
            self.held[topic] = asyncio.Event()

    def release(self, *topics: str) -> None:
        for topic in topics:
            self._loop.call_soon_threadsafe(self.held[topic].set)

    def wait_for(self, done: Callable[[], bool], timeout_s: float = WAIT_S) -> bool:
        with self._changed:
            return self._changed.wait_for(done, timeout_s)

    def _note(self, what: list[Any], item: Any) -> None:
        with self._changed:
            what.append(item)
            self._changed.notify_all()

    def _finish(self, topic: str) -> None:
        if topic in self.failing:
            raise RuntimeError(f"{topic} failed")
        self._note(self.finished, topic)

    def _answer(self, topic: str, response: Any, done: Callable[[Any], None]) -> Callable[[], None]:
        event = self.held.get(topic)
        if event is None:
            try:
                self._finish(topic)
            except RuntimeError as exc:
                done(exc)
            else:
                done(response)
            return lambda: None

        async def later() -> Any:
            try:
                await event.wait()
            except asyncio.CancelledError:
                self._note(self.cancelled, topic)
                raise
            self._finish(topic)
            return response

        task = self._loop.create_task(later())
        answer: list[Callable[[Any], None]] = [done]
        task.add_done_callback(lambda t: answer and not t.cancelled() and answer[0](t.exception() or t.result()))

        def cancel() -> None:
            answer.clear()
            task.cancel()

        return cancel

    def produce_then(self, request: pb.ProduceRequest, done: Callable[[Any], None]) -> Callable[[], None]:
        topic = request.topics[0].name
        offset = sum(1 for rpc, _ in self.seen if rpc == "Produce")
        self._note(self.seen, ("Produce", topic))
        response = pb.ProduceResponse()
        response.topics.add(name=topic).partitions.add(partition=0, base_offset=offset)
        return self._answer(topic, response, done)

    def fetch_then(self, request: pb.FetchRequest, done: Callable[[Any], None]) -> Callable[[], None]:
        topic = request.topics[0].name
        self._note(self.seen, ("Fetch", topic))
        response = pb.FetchResponse()
        records = b"r" * self.sizes.get(topic, 0)
        response.topics.add(name=topic).partitions.add(partition=0, high_watermark=42, records=records)
        return self._answer(topic, response, done)


def produce(topic: str) -> pb.ProduceRequest:
    request = pb.ProduceRequest(acks=-1, timeout_ms=1000)
    request.topics.add(name=topic).partitions.add(partition=0, records=b"records of " + topic.encode())
    return request


def fetch(topic: str, replica_id: int = -1) -> pb.FetchRequest:
    request = pb.FetchRequest(replica_id=replica_id, max_wait_ms=500)
    request.topics.add(name=topic).partitions.add(partition=0, fetch_offset=0)
    return request


# ------------------------------------------------------------------------------------------- the client


class Client:
    """A client connection speaking the DATA wire (``common.framing``) with blocking calls, each bounded."""

    def __init__(self, port: int, tls: ssl.SSLContext | None = None, receive_buffer: int = 0) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if receive_buffer:  # set before connecting: no autotuning, the window stays that small
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        sock.settimeout(WAIT_S)
        try:
            sock.connect(("127.0.0.1", port))
        except OSError:
            sock.close()
            raise
        self.sock = tls.wrap_socket(sock, server_hostname="127.0.0.1") if tls is not None else sock

    def send(self, kind: int, message: pb.ProduceRequest | pb.FetchRequest) -> None:
        self.sock.sendall(frame(bytes((kind,)) + message.SerializeToString()))

    def authenticate(self, session_token: str) -> None:
        self.sock.sendall(frame(bytes((AUTH,)) + session_token.encode()))

    def answer(self) -> tuple[int, bytes]:
        """The next answer: (status, body); fails when the listener closed the connection instead."""
        deadline = time.monotonic() + WAIT_S
        head = recv_exactly(self.sock, SIZE.size, deadline)
        assert head is not None, "the listener closed the connection"
        payload = recv_exactly(self.sock, SIZE.unpack(head)[0], deadline)
        assert payload  # at least the status byte
        return payload[0], bytes(payload[1:])

    def produced(self) -> pb.ProduceResponse:
        status, body = self.answer()
        assert status == OK, body
        return pb.ProduceResponse.FromString(body)

    def refused(self) -> str:
        status, body = self.answer()
        assert status == ERROR
        return body.decode()

    def closed(self, timeout_s: float = WAIT_S) -> bool:
        """True when the listener closes the connection within ``timeout_s`` (with nothing more sent)."""
        self.sock.settimeout(timeout_s)
        try:
            return self.sock.recv(1) == b""
        except (ConnectionResetError, ssl.SSLError):  # closed with unread data / without TLS close_notify
            return True
        except TimeoutError:
            return False

    def nothing_yet(self) -> bool:
        """True when no answer byte has arrived (and the connection is open)."""
        self.sock.setblocking(False)
        try:
            self.sock.recv(1, socket.MSG_PEEK)
        except (BlockingIOError, ssl.SSLWantReadError):
            return True
        finally:
            self.sock.settimeout(WAIT_S)
        return False

    def close(self) -> None:
        self.sock.close()


def offsets(response: pb.ProduceResponse) -> list[tuple[str, int]]:
    return [(t.name, p.base_offset) for t in response.topics for p in t.partitions]


# ------------------------------------------------------------------------------------------- fixtures


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """An event loop running in a thread, as the gRPC listener's the DATA listener serves on."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="test-data-loop", daemon=True)
    thread.start()

    async def cancel_the_rest() -> None:
        rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in rest:
            task.cancel()
        if rest:
            await asyncio.wait(rest, timeout=WAIT_S)

    try:
        yield loop
    finally:
        asyncio.run_coroutine_threadsafe(cancel_the_rest(), loop).result(WAIT_S * 2)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(WAIT_S)
        loop.close()


@dataclass
class Served:
    listener: DataListener
    service: ScriptedService
    clients: list[Client]

    def connect(self, tls: ssl.SSLContext | None = None, receive_buffer: int = 0) -> Client:
        client = Client(self.listener.port, tls, receive_buffer)
        self.clients.append(client)
        return client


Serve = Callable[..., Served]


def acl(principal: str, op: AclOperation, topic: str) -> AclBinding:
    return AclBinding(P(Rt.TOPIC, topic, PatternType.LITERAL),
                      AccessControlEntry(principal, "*", op, AclPermissionType.ALLOW))  # fmt: skip


def guard_with(*bindings: AclBinding) -> SimpleNamespace:
    """A node guard whose authorizer is a real one over ``bindings`` (as the broker's, by its image's ACLs)."""
    image: Any = SimpleNamespace(acls=dict(enumerate(bindings)))  # a metadata image, as far as the cache reads it
    return SimpleNamespace(authorizer=AuthorizerCache(lambda: image, Authorizer()))


@pytest.fixture
def serve(loop: asyncio.AbstractEventLoop) -> Iterator[Serve]:
    """Starts DATA listeners on free ports of 127.0.0.1 with ``props`` (broker config), ``guard`` and
    ``security``; stops them (and closes their clients) after the test."""
    started: list[Served] = []

    def start(props: Mapping[str, str] | None = None, guard: Any = None, security: Any = None) -> Served:
        service = ScriptedService(loop)
        ctx = SimpleNamespace(broker_id=0, config=BrokerConfig.from_props(props or {}), guard=guard,
                              security=security or NodeSecurity())  # fmt: skip
        listener = DataListener(ctx, NAME, "127.0.0.1:0", service, loop)  # type: ignore[arg-type]
        listener.start()
        served = Served(listener, service, [])
        started.append(served)
        return served

    try:
        yield start
    finally:
        for served in started:
            served.listener.stop()
            for client in served.clients:
                client.close()


# ------------------------------------------------------------------------------------------- answers


def held_produces(served: Served, topics: list[str]) -> Client:
    """A new connection that has sent a Produce to each of ``topics``, all held by the service."""
    served.service.hold(*topics)
    client = served.connect()
    for topic in topics:
        client.send(PRODUCE, produce(topic))
    return client


def test_produce_and_fetch_are_answered(serve: Serve) -> None:
    served = serve()
    client = served.connect()
    client.send(PRODUCE, produce("t"))
    assert offsets(client.produced()) == [("t", 0)]
    client.send(FETCH, fetch("t"))
    status, body = client.answer()
    assert status == OK
    answer = pb.FetchResponse.FromString(body)
    assert [(t.name, t.partitions[0].high_watermark) for t in answer.topics] == [("t", 42)]
    assert served.service.seen == [("Produce", "t"), ("Fetch", "t")]
    assert is_data_listener("DATA")
    assert is_data_listener("DATA_EXTERNAL")  # the one for the clients of EXTERNAL
    assert not is_data_listener("REPLICATION")
    assert not is_data_listener("DATABASE")


def test_pipelined_requests_append_in_order_and_are_answered_in_order(serve: Serve) -> None:
    served = serve()
    service = served.service
    service.hold("slow")
    client = served.connect()
    client.send(PRODUCE, produce("slow"))
    client.send(PRODUCE, produce("fast"))
    assert service.wait_for(lambda: service.finished == ["fast"])  # the second is done, the first held
    assert service.seen == [("Produce", "slow"), ("Produce", "fast")]  # appended in the order sent
    assert client.nothing_yet()  # the second's answer waits for the first's
    service.release("slow")
    assert offsets(client.produced()) == [("slow", 0)]
    assert offsets(client.produced()) == [("fast", 1)]


def test_beyond_max_pipelined_the_connection_is_not_read_until_the_oldest_is_answered(serve: Serve) -> None:
    served = serve()
    service = served.service
    topics = [f"p{i}" for i in range(MAX_PIPELINED + 1)]
    client = held_produces(served, topics)
    assert service.wait_for(lambda: len(service.seen) == MAX_PIPELINED)
    assert not service.wait_for(lambda: len(service.seen) > MAX_PIPELINED, QUIET_S)  # the 17th is not read
    service.release(topics[1])  # answered only after the oldest: still nothing read
    assert service.wait_for(lambda: service.finished == [topics[1]])
    assert not service.wait_for(lambda: len(service.seen) > MAX_PIPELINED, QUIET_S)
    service.release(topics[0])
    assert offsets(client.produced()) == [(topics[0], 0)]
    assert service.wait_for(lambda: len(service.seen) == MAX_PIPELINED + 1)  # one answered: the 17th is read
    assert service.seen[-1] == ("Produce", topics[-1])
    service.release(*topics[2:])
    assert [offsets(client.produced()) for _ in topics[1:]] == [[(t, i + 1)] for i, t in enumerate(topics[1:])]


def test_a_thousand_pipelined_requests_answered_at_once_are_all_answered_in_order(
    serve: Serve, caplog: pytest.LogCaptureFixture
) -> None:
    """Requests the service answers inside the call (as the broker answers an acks=1 Produce), sent all together:
    taken in a loop, not a recursion, each written back in order, the connection kept."""
    served = serve()
    client = served.connect()
    count = 1000
    client.sock.sendall(b"".join(frame(bytes((PRODUCE,)) + produce(f"t{i}").SerializeToString()) for i in range(count)))
    assert [offsets(client.produced()) for _ in range(count)] == [[(f"t{i}", i)] for i in range(count)]
    client.send(FETCH, fetch("t"))
    assert client.answer()[0] == OK
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_client_that_stops_sending_beyond_max_pipelined_gets_every_answer(serve: Serve) -> None:
    """Its end of the stream arrives while requests it sent before are still unread (the pipeline full): they
    are read and answered, then the connection closes."""
    served = serve()
    service = served.service
    topics = [f"p{i}" for i in range(MAX_PIPELINED + 4)]
    client = held_produces(served, topics)
    client.sock.shutdown(socket.SHUT_WR)
    assert service.wait_for(lambda: len(service.seen) == MAX_PIPELINED)
    service.release(*topics)
    assert [offsets(client.produced()) for _ in topics] == [[(t, i)] for i, t in enumerate(topics)]
    assert client.closed()


# ------------------------------------------------------------------------------- refusals that keep the connection


def test_a_followers_fetch_is_refused_and_the_connection_goes_on(serve: Serve) -> None:
    served = serve()
    client = served.connect()
    client.send(FETCH, fetch("t", replica_id=0))
    refusal = client.refused()
    assert refusal.startswith("INVALID_REQUEST: ")
    assert "replica_id 0" in refusal
    assert "REPLICATION" in refusal
    client.send(PRODUCE, produce("t"))
    assert offsets(client.produced()) == [("t", 0)]
    assert served.service.seen == [("Produce", "t")]  # the follower's fetch never reached the service


def test_the_authorizer_refuses_a_request_and_the_connection_goes_on(serve: Serve) -> None:
    served = serve(guard=guard_with(acl("User:ANONYMOUS", AclOperation.WRITE, "t")))
    client = served.connect()
    client.send(PRODUCE, produce("secret"))
    assert client.refused() == "TOPIC_AUTHORIZATION_FAILED: User:ANONYMOUS is not authorized to WRITE TOPIC 'secret'"
    client.send(PRODUCE, produce("t"))
    assert offsets(client.produced()) == [("t", 0)]
    client.send(FETCH, fetch("t"))  # WRITE does not allow READ
    assert client.refused() == "TOPIC_AUTHORIZATION_FAILED: User:ANONYMOUS is not authorized to READ TOPIC 't'"
    assert served.service.seen == [("Produce", "t")]


# ------------------------------------------------------------------------------------------- what closes it


@pytest.mark.parametrize(
    ("what", "data"),
    [
        ("unknown kind", frame(bytes((7,)) + produce("t").SerializeToString())),
        ("garbage protobuf", frame(bytes((PRODUCE,)) + b"\xff\xff\xff\xff")),
        ("garbage fetch", frame(bytes((FETCH,)) + b"\x0a\x05ab")),
        ("empty frame", frame(b"")),
        ("over socket.request.max.bytes", SIZE.pack(1025)),  # the head alone: nothing more is read
    ],
)
def test_a_frame_that_breaks_the_wire_closes_the_connection(
    serve: Serve, caplog: pytest.LogCaptureFixture, what: str, data: bytes
) -> None:
    caplog.set_level(logging.INFO, logger="broker.data_listener")
    served = serve({"socket.request.max.bytes": "1024"})
    client = served.connect()
    client.sock.sendall(data)
    assert client.closed()
    assert served.service.seen == []
    assert any(r.levelno == logging.INFO and "closing" in r.getMessage() for r in caplog.records)


def test_a_request_just_under_the_limit_is_served(serve: Serve) -> None:
    served = serve({"socket.request.max.bytes": "1024"})
    request = produce("t")
    while len(request.SerializeToString()) + 1 < 1024:  # the kind byte and the message: 1024 bytes exactly
        request.topics[0].partitions[0].records += b"x"
    assert len(request.SerializeToString()) + 1 == 1024
    client = served.connect()
    client.send(PRODUCE, request)
    assert offsets(client.produced()) == [("t", 0)]


def test_requests_that_arrive_in_pieces_are_served(serve: Serve) -> None:
    """A large request in many small writes, with the next request's first bytes in its last piece: each is
    put together and answered once whole."""
    served = serve()
    big = produce("big")
    big.topics[0].partitions[0].records = b"x" * (300 << 10)
    data = b"".join(frame(bytes((PRODUCE,)) + r.SerializeToString()) for r in (big, produce("t")))
    client = served.connect()
    cut = len(data) - 7  # inside the second request
    for start in range(0, cut, 4096):
        client.sock.sendall(data[start : min(start + 4096, cut)])
        time.sleep(0.0005)
    assert offsets(client.produced()) == [("big", 0)]
    assert client.nothing_yet()  # the second is not whole yet
    client.sock.sendall(data[cut:])
    assert offsets(client.produced()) == [("t", 1)]


def test_a_failing_handler_answers_unknown_server_error_after_the_earlier_answers_then_closes(
    serve: Serve, caplog: pytest.LogCaptureFixture
) -> None:
    served = serve()
    service = served.service
    service.hold("first")
    service.failing.add("boom")
    client = served.connect()
    client.send(PRODUCE, produce("first"))
    client.send(PRODUCE, produce("boom"))
    assert service.wait_for(lambda: len(service.seen) == 2)
    service.release("first")
    assert offsets(client.produced()) == [("first", 0)]
    assert client.refused() == "UNKNOWN_SERVER_ERROR: unexpected error: RuntimeError('boom failed')"
    assert client.closed()
    failures = [r for r in caplog.records if r.levelno == logging.ERROR and r.exc_info is not None]
    assert failures
    assert "data listener" in failures[0].getMessage()


def test_an_idle_connection_is_closed_but_not_while_a_long_poll_waits(serve: Serve) -> None:
    served = serve({"connections.max.idle.ms": "300"})
    service = served.service
    service.hold("t", "long")
    client = served.connect()
    client.send(PRODUCE, produce("t"))
    client.send(FETCH, fetch("long"))
    assert service.wait_for(lambda: service.seen == [("Produce", "t"), ("Fetch", "long")])
    service.release("t")
    assert offsets(client.produced()) == [("t", 0)]  # answered, with the fetch still waiting
    assert not client.closed(3 * QUIET_S)  # a request waiting for its answer: not idle
    service.release("long")
    status, _ = client.answer()
    assert status == OK
    started = time.monotonic()
    assert client.closed()  # then nothing for connections.max.idle.ms
    assert 0.2 <= time.monotonic() - started < WAIT_S


def test_an_answer_the_client_does_not_read_closes_the_connection(serve: Serve) -> None:
    size = 8 << 20  # over what the kernel buffers between the two sockets (a 64 KiB receive window)
    served = serve({"connections.max.idle.ms": "300"})
    served.service.sizes["big"] = size
    client = served.connect(receive_buffer=64 << 10)
    client.send(FETCH, fetch("big"))
    assert served.service.wait_for(lambda: served.service.finished == ["big"])
    time.sleep(3 * 0.3)  # the answer unread for three times connections.max.idle.ms
    received = 0
    client.sock.settimeout(WAIT_S)
    with contextlib.suppress(ConnectionResetError):
        while chunk := client.sock.recv(1 << 20):
            received += len(chunk)
    assert received < size  # closed with the answer cut short


def test_requests_behind_an_answer_not_read_yet_are_started(serve: Serve) -> None:
    """A large answer the client has not read yet (the write buffer over its high-water mark) holds back the answers
    behind it, not their requests: a consumer's next fetch reads while the last answer drains."""
    size = 8 << 20
    served = serve()
    service = served.service
    service.sizes["big"] = size
    client = served.connect(receive_buffer=64 << 10)
    client.send(FETCH, fetch("big"))
    client.send(PRODUCE, produce("t"))
    assert service.wait_for(lambda: service.finished == ["big", "t"])  # both handled, the first answer unread
    status, body = client.answer()
    assert status == OK
    assert len(pb.FetchResponse.FromString(body).topics[0].partitions[0].records) == size
    assert offsets(client.produced()) == [("t", 0)]


def test_a_client_that_stops_sending_still_gets_its_answers(serve: Serve) -> None:
    served = serve()
    service = served.service
    service.hold("slow")
    client = served.connect()
    client.send(PRODUCE, produce("slow"))
    client.send(PRODUCE, produce("fast"))
    client.sock.shutdown(socket.SHUT_WR)  # done sending: the listener reads the end of the stream
    assert service.wait_for(lambda: service.finished == ["fast"])
    service.release("slow")
    assert offsets(client.produced()) == [("slow", 0)]
    assert offsets(client.produced()) == [("fast", 1)]
    assert client.closed()


def test_an_idle_connection_that_never_sent_anything_is_closed(serve: Serve) -> None:
    served = serve({"connections.max.idle.ms": "200"})
    assert served.connect().closed()


def test_connections_beyond_max_connections_are_refused(serve: Serve, caplog: pytest.LogCaptureFixture) -> None:
    served = serve({"max.connections": "1"})
    first = served.connect()
    first.send(PRODUCE, produce("t"))
    assert offsets(first.produced()) == [("t", 0)]  # connected and counted
    second = served.connect()
    assert second.closed()
    assert any(r.levelno == logging.WARNING and "max.connections=1" in r.getMessage() for r in caplog.records)
    first.send(PRODUCE, produce("t"))
    assert offsets(first.produced()) == [("t", 1)]  # the first one goes on


@pytest.mark.parametrize("protocol", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_a_sasl_listener_without_a_sasl_authority_is_refused_at_construction(protocol: str) -> None:
    ctx = SimpleNamespace(security=SimpleNamespace(protocol=lambda name: protocol), guard=None)
    why = f"listener DATA is {protocol}, but this node has no SASL authority"
    with pytest.raises(ConfigError, match=why) as raised:
        DataListener(ctx, NAME, "127.0.0.1:0", None, None)  # type: ignore[arg-type]
    assert raised.value.key == "listener.security.protocol.map"


# ------------------------------------------------------------------------------------------- SASL


def test_under_ssl_a_connection_closed_after_its_last_answer_ends_without_a_close_notify(
    serve: Serve, tls: Tls
) -> None:
    """The answers before it and UNKNOWN_SERVER_ERROR, then the TCP connection ends with no TLS close_notify, as
    this listener always closed (DATA links of earlier releases read a close_notify as empty data forever)."""
    served = serve(security=tls.security(client_auth=False))
    served.service.failing.add("boom")
    client = served.connect()
    client.sock.close()
    raw = socket.create_connection(("127.0.0.1", served.listener.port), timeout=WAIT_S)
    client.sock = tls.client(cert=False).wrap_socket(raw, server_hostname="127.0.0.1", suppress_ragged_eofs=False)
    client.send(PRODUCE, produce("t"))
    client.send(PRODUCE, produce("boom"))
    assert offsets(client.produced()) == [("t", 0)]
    assert client.refused() == "UNKNOWN_SERVER_ERROR: unexpected error: RuntimeError('boom failed')"
    with pytest.raises((ssl.SSLEOFError, ConnectionResetError)):  # a close_notify would read as b""
        client.sock.recv(1)


SIGNER = TokenSigner(b"k" * 32)  # the node's key (controller.security.token)
SASL = NodeSecurity.from_props({"listener.security.protocol.map": "DATA:SASL_PLAINTEXT"})


def token(principal: str, lifetime_ms: int = 60_000, signer: TokenSigner = SIGNER, issued_ms: int = 0) -> str:
    return signer.issue(principal, "SCRAM-SHA-512", issued_ms or int(time.time() * 1000), lifetime_ms)[0]


def altered(session_token: str) -> str:
    """``session_token`` with the first character of its signature changed (still well-formed base64)."""
    payload, signature = session_token.split(".")
    return f"{payload}.{'B' if signature[0] == 'A' else 'A'}{signature[1:]}"


def sasl_guard(*bindings: AclBinding) -> SimpleNamespace:
    """A node guard with the node's SASL authority (its token key) and, with ``bindings``, a real authorizer."""
    guard = guard_with(*bindings) if bindings else SimpleNamespace(authorizer=None)
    guard.authority = SimpleNamespace(signer=SIGNER)
    return guard


def authenticated(client: Client, principal_token: str) -> None:
    client.authenticate(principal_token)
    assert client.answer() == (OK, b"")


def test_sasl_a_request_before_authenticating_is_refused_and_closes(serve: Serve) -> None:
    served = serve(guard=sasl_guard(), security=SASL)
    client = served.connect()
    client.send(PRODUCE, produce("t"))
    assert client.refused() == ("SASL_AUTHENTICATION_FAILED: listener DATA is SASL_PLAINTEXT: authenticate first (an "
                                "AUTH frame with a session token)")  # fmt: skip
    assert client.closed()
    assert served.service.seen == []


def test_sasl_the_tokens_principal_is_what_the_authorizer_checks(serve: Serve) -> None:
    served = serve(guard=sasl_guard(acl("User:alice", AclOperation.WRITE, "t")), security=SASL)
    alice, bob = served.connect(), served.connect()
    authenticated(alice, token("User:alice"))
    authenticated(bob, token("User:bob"))
    alice.send(PRODUCE, produce("t"))
    assert offsets(alice.produced()) == [("t", 0)]
    bob.send(PRODUCE, produce("t"))
    assert bob.refused() == "TOPIC_AUTHORIZATION_FAILED: User:bob is not authorized to WRITE TOPIC 't'"
    bob.send(FETCH, fetch("t"))  # the connection goes on
    assert bob.refused() == "TOPIC_AUTHORIZATION_FAILED: User:bob is not authorized to READ TOPIC 't'"
    assert served.service.seen == [("Produce", "t")]


def test_sasl_an_auth_frame_and_the_requests_behind_it_are_answered_in_order(serve: Serve) -> None:
    served = serve(guard=sasl_guard(), security=SASL)
    client = served.connect()
    auth = token("User:alice").encode()
    client.sock.sendall(frame(bytes((AUTH,)) + auth) + frame(bytes((PRODUCE,)) + produce("a").SerializeToString())
                        + frame(bytes((FETCH,)) + fetch("a").SerializeToString()))  # fmt: skip
    assert client.answer() == (OK, b"")
    assert offsets(client.produced()) == [("a", 0)]
    status, _ = client.answer()
    assert status == OK
    assert served.service.seen == [("Produce", "a"), ("Fetch", "a")]


@pytest.mark.parametrize(
    ("what", "bad", "reason"),
    [
        ("from another node", token("User:alice", signer=TokenSigner(b"o" * 32)), "invalid session token"),
        ("altered", altered(token("User:alice")), "invalid session token"),
        ("expired", token("User:alice", lifetime_ms=1000, issued_ms=int(time.time() * 1000) - 5000),
         "session expired"),
        ("malformed", "not a token", "malformed session token"),
    ],
)
def test_sasl_a_refused_token_answers_why_and_closes(serve: Serve, what: str, bad: str, reason: str) -> None:
    served = serve(guard=sasl_guard(), security=SASL)
    client = served.connect()
    client.authenticate(bad)
    client.send(PRODUCE, produce("t"))  # sent behind it: never runs
    refusal = client.refused()
    assert refusal.startswith("SASL_AUTHENTICATION_FAILED: "), (what, refusal)
    assert reason in refusal, (what, refusal)
    assert client.closed()
    assert served.service.seen == []


def test_sasl_reauthentication_keeps_the_connection_and_its_principal(serve: Serve) -> None:
    served = serve(guard=sasl_guard(), security=SASL)
    client = served.connect()
    authenticated(client, token("User:alice"))
    client.send(PRODUCE, produce("t"))
    assert offsets(client.produced()) == [("t", 0)]
    authenticated(client, token("User:alice"))  # a new token of the same principal (KIP-368)
    client.send(PRODUCE, produce("t"))
    assert offsets(client.produced()) == [("t", 1)]
    client.authenticate(token("User:mallory"))
    assert client.refused() == ("SASL_AUTHENTICATION_FAILED: re-authentication as User:mallory on a connection of "
                                "User:alice: the principal of a connection cannot change (KIP-368)")  # fmt: skip
    assert client.closed()
    assert served.service.seen == [("Produce", "t"), ("Produce", "t")]


def test_sasl_a_request_after_the_session_expired_closes_the_connection_unanswered(serve: Serve) -> None:
    served = serve(guard=sasl_guard(), security=SASL)
    client = served.connect()
    lifetime_ms = 400
    authenticated(client, token("User:alice", lifetime_ms=lifetime_ms))
    client.send(PRODUCE, produce("t"))
    assert offsets(client.produced()) == [("t", 0)]
    time.sleep(lifetime_ms / 1000 + 0.1)
    client.send(PRODUCE, produce("late"))
    assert client.closed()
    assert served.service.seen == [("Produce", "t")]


def test_an_auth_frame_on_a_listener_without_sasl_is_refused_and_closes(serve: Serve) -> None:
    served = serve(guard=sasl_guard())  # PLAINTEXT
    client = served.connect()
    client.authenticate(token("User:alice"))
    assert client.refused() == "ILLEGAL_SASL_STATE: listener DATA is PLAINTEXT: no SASL here"
    assert client.closed()


def test_stop_closes_open_connections_and_cancels_their_requests(serve: Serve) -> None:
    served = serve()
    service = served.service
    service.hold("long")
    client, idle = served.connect(), served.connect()
    client.send(FETCH, fetch("long"))
    assert service.wait_for(lambda: service.seen == [("Fetch", "long")])
    served.listener.stop()
    assert client.closed()
    assert idle.closed()
    assert service.wait_for(lambda: service.cancelled == ["long"])
    with pytest.raises(ConnectionRefusedError):
        Client(served.listener.port)  # no longer accepting


def test_stop_returns_at_once_when_the_loop_does_not_run() -> None:
    loop = asyncio.new_event_loop()

    def run() -> threading.Thread:
        thread = threading.Thread(target=loop.run_forever, daemon=True)
        thread.start()
        return thread

    thread = run()
    ctx = SimpleNamespace(broker_id=0, config=BrokerConfig.from_props({}), guard=None, security=NodeSecurity())
    listener = DataListener(ctx, NAME, "127.0.0.1:0", ScriptedService(loop), loop)  # type: ignore[arg-type]
    try:
        listener.start()
        loop.call_soon_threadsafe(loop.stop)
        thread.join(WAIT_S)
        started = time.monotonic()
        listener.stop()  # stopped: nothing would run it
        assert time.monotonic() - started < 1.0
        thread = run()
        listener.stop()  # running again: it stops for real
        with pytest.raises(ConnectionRefusedError):
            Client(listener.port)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(WAIT_S)
        loop.close()
    started = time.monotonic()
    listener.stop()  # closed
    assert time.monotonic() - started < 1.0


# ------------------------------------------------------------------------------------------- SSL


@dataclass
class Tls:
    ca: CertificateAuthority
    node_key: bytes
    node_chain: bytes
    alice: tuple[Path, Path]  # a client certificate CN=alice, and its key

    def security(self, *, client_auth: bool, rules: str = "DEFAULT") -> NodeSecurity:
        return NodeSecurity(protocol_map={NAME: "SSL"}, protocol_map_given=True, key_pem=self.node_key,
                            cert_chain_pem=self.node_chain, truststore_pem=self.ca.cert_pem,
                            client_auth_required=client_auth,
                            principal_mapper=PrincipalMapper.from_config(rules))  # fmt: skip

    def client(self, *, cert: bool) -> ssl.SSLContext:
        context = ssl.create_default_context(cadata=self.ca.cert_pem.decode("ascii"))
        if cert:
            context.load_cert_chain(*self.alice)
        return context


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Tls:
    root = tmp_path_factory.mktemp("tls")
    ca = CertificateAuthority.create()
    node, alice = ca.issue("node"), ca.issue("alice")
    (root / "alice.pem").write_bytes(alice.cert_pem)
    (root / "alice.key").write_bytes(alice.key_pem)
    return Tls(ca, node.key_pem, node.cert_pem, (root / "alice.pem", root / "alice.key"))


def test_under_ssl_the_principal_is_the_client_certificates(serve: Serve, tls: Tls) -> None:
    served = serve(security=tls.security(client_auth=True),
                   guard=guard_with(acl("User:CN=alice", AclOperation.WRITE, "t")))  # fmt: skip
    client = served.connect(tls.client(cert=True))
    client.send(PRODUCE, produce("t"))
    assert offsets(client.produced()) == [("t", 0)]
    client.send(PRODUCE, produce("secret"))
    assert client.refused() == "TOPIC_AUTHORIZATION_FAILED: User:CN=alice is not authorized to WRITE TOPIC 'secret'"


def test_under_ssl_without_a_client_certificate_the_principal_is_anonymous(serve: Serve, tls: Tls) -> None:
    served = serve(security=tls.security(client_auth=False),
                   guard=guard_with(acl("User:CN=alice", AclOperation.WRITE, "t")))  # fmt: skip
    client = served.connect(tls.client(cert=False))
    client.send(PRODUCE, produce("t"))
    assert client.refused() == "TOPIC_AUTHORIZATION_FAILED: User:ANONYMOUS is not authorized to WRITE TOPIC 't'"


def test_under_ssl_a_certificate_the_mapping_rules_refuse_closes_the_connection(
    serve: Serve, tls: Tls, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="broker.data_listener")
    served = serve(security=tls.security(client_auth=True, rules="RULE:^CN=bob$/bob/"))
    client = served.connect(tls.client(cert=True))
    assert client.closed()
    assert served.service.seen == []
    assert any("no rule of ssl.principal.mapping.rules" in r.getMessage() for r in caplog.records)
