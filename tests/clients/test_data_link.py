"""``odradek/net/data_link.py`` against scripted peers: a real listening socket on 127.0.0.1 whose n-th accepted
connection runs the n-th script of the test (read request frames, check them, answer in a chosen way).

Round trips (Produce and Fetch, a large answer, TLS); pipelining (three requests sent before any answer,
answered in order, the done-callbacks on the reader thread; requests started from several threads); a refusal
(the code's KafkaError, the connection goes on); every way a connection fails (no answer in time, with the
reader idle or waiting, a close inside a frame, an answer over the limit, one that does not parse, an unknown
status, an empty answer, an answer nobody waits for, nothing listening, an untrusted TLS server), each failing
what waits with NetworkError and the next request opening a new connection; ``close()`` from another thread and
``start()`` after it; with SASL, the AUTH frame ahead of a connection's first request and of the first one
after a renewal, a refused token forgotten, a token that cannot be had failing the request unsent."""

from __future__ import annotations

import contextlib
import itertools
import selectors
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from common.framing import AUTH, ERROR, FETCH, OK, PRODUCE, SIZE, recv_exactly
from odradek.errors import (
    NetworkError,
    SaslAuthenticationFailedError,
    TopicAuthorizationFailedError,
    UnknownKafkaError,
    error_from_code,
)
from odradek.net.data_link import DataLink, DataLinkUnreachable
from odradek.security.certs import CertificateAuthority, write_private
from proto import broker_pb2 as pb

WAIT_S = 10.0  # the bound of every wait that should end much sooner
_names = itertools.count()


# ------------------------------------------------------------------------------------------ the peer


class PeerConnection:
    """One accepted connection, as a script sees it."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def read(self) -> tuple[int, bytes]:
        """The next request frame: (kind, message bytes)."""
        deadline = time.monotonic() + WAIT_S
        head = recv_exactly(self.sock, SIZE.size, deadline)
        assert head is not None, "the client closed the connection"
        (size,) = SIZE.unpack(head)
        payload = recv_exactly(self.sock, size, deadline)
        assert payload is not None
        assert size >= 1
        return payload[0], bytes(payload[1:])

    def read_produce(self) -> pb.ProduceRequest:
        kind, body = self.read()
        assert kind == PRODUCE
        return pb.ProduceRequest.FromString(body)

    def read_auth(self) -> str:
        kind, body = self.read()
        assert kind == AUTH
        return body.decode()

    def read_fetch(self) -> pb.FetchRequest:
        kind, body = self.read()
        assert kind == FETCH
        return pb.FetchRequest.FromString(body)

    def answer(self, message: Any) -> None:
        self.sock.sendall(answer_frame(OK, message.SerializeToString()))

    def refuse(self, text: str) -> None:
        self.sock.sendall(answer_frame(ERROR, text.encode()))

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def saw_eof(self) -> bool:
        """Whether the client closes the connection within WAIT_S (what it sends meanwhile is dropped)."""
        self.sock.settimeout(WAIT_S)
        try:
            while self.sock.recv(65536):
                pass
        except (ConnectionResetError, TimeoutError):
            return False
        return True


Script = Callable[[PeerConnection], None]


class Peer:
    """A listening socket on 127.0.0.1 whose n-th accepted connection runs ``scripts[n]`` (TLS with ``tls``, a
    server context); the scripts' failures are raised by :meth:`finish`."""

    def __init__(self, scripts: tuple[Script, ...], tls: ssl.SSLContext | None) -> None:
        self._scripts = scripts
        self._tls = tls
        self._server = socket.create_server(("127.0.0.1", 0))
        self._server.settimeout(WAIT_S)
        self.address = f"127.0.0.1:{self._server.getsockname()[1]}"
        self.accepted = 0
        self.errors: list[BaseException] = []  # the scripts'
        self.handshake_errors: list[BaseException] = []
        self._current: socket.socket | None = None
        self._thread = threading.Thread(target=self._run, name="test-data-link-peer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        for script in self._scripts:
            try:
                sock, _ = self._server.accept()
            except OSError as exc:  # stopped, or no connection within WAIT_S
                self.errors.append(exc)
                return
            self.accepted += 1
            self._current = sock
            try:
                if self._tls is not None:
                    sock.settimeout(WAIT_S)
                    try:
                        sock = self._tls.wrap_socket(sock, server_side=True)
                    except (OSError, ValueError) as exc:
                        self.handshake_errors.append(exc)
                        continue
                    self._current = sock
                    sock.settimeout(None)
                script(PeerConnection(sock))
            except BaseException as exc:
                self.errors.append(exc)
            finally:
                self._current = None
                sock.close()

    def finish(self) -> None:
        """Wait for every script to end; raise the first failure."""
        self._thread.join(WAIT_S)
        assert not self._thread.is_alive(), "the peer's scripts did not end"
        if self.errors:
            raise self.errors[0]

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self._server.shutdown(socket.SHUT_RDWR)  # wakes accept()
        self._server.close()
        current = self._current
        if current is not None:
            with contextlib.suppress(OSError):
                current.shutdown(socket.SHUT_RDWR)
        self._thread.join(WAIT_S)
        assert not self._thread.is_alive()


def answer_frame(status: int, body: bytes) -> bytes:
    return SIZE.pack(len(body) + 1) + bytes((status,)) + body


@pytest.fixture
def peer() -> Iterator[Callable[..., Peer]]:
    peers: list[Peer] = []

    def make(*scripts: Script, tls: ssl.SSLContext | None = None) -> Peer:
        peers.append(Peer(scripts, tls))
        return peers[-1]

    yield make
    for made in peers:
        made.stop()


def readers(name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == f"{name}-reader"]


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"no {what} within {WAIT_S} s"
        time.sleep(0.01)


@pytest.fixture
def link() -> Iterator[Callable[..., DataLink]]:
    """DataLinks closed after the test, their reader threads ended."""
    links: list[DataLink] = []

    def make(
        address: str, max_answer_bytes: int = 1 << 20, tls: ssl.SSLContext | None = None, session: Any = None
    ) -> DataLink:
        links.append(DataLink(address, tls, max_answer_bytes, f"test-data-link-{next(_names)}", session))
        return links[-1]

    yield make
    for made in links:
        made.close()
    for made in links:
        for thread in readers(made._name):
            thread.join(WAIT_S)
            assert not thread.is_alive()


def produce(tag: str) -> pb.ProduceRequest:
    return pb.ProduceRequest(
        acks=-1, timeout_ms=1000, transactional_id=tag,
        topics=[pb.ProduceTopicData(name="t", partitions=[pb.ProducePartitionData(partition=0, records=b"rec")])],
    )  # fmt: skip


def produced(tag: str, offset: int = 7) -> pb.ProduceResponse:
    return pb.ProduceResponse(
        topics=[pb.ProduceTopicResponse(name=tag, partitions=[pb.ProducePartitionResponse(base_offset=offset)])]
    )


def fetch(offset: int) -> pb.FetchRequest:
    return pb.FetchRequest(
        replica_id=-1, max_wait_ms=500,
        topics=[pb.FetchTopic(name="t", partitions=[pb.FetchPartition(partition=0, fetch_offset=offset)])],
    )  # fmt: skip


def fetched(records: bytes, high_watermark: int = 9) -> pb.FetchResponse:
    return pb.FetchResponse(
        topics=[
            pb.FetchTopicResponse(
                name="t", partitions=[pb.FetchPartitionResponse(high_watermark=high_watermark, records=records)]
            )
        ]
    )


def failure(future: Future[Any]) -> BaseException:
    error = future.exception(WAIT_S)
    assert error is not None, f"answered: {future.result()}"
    return error


# ----------------------------------------------------------------------------------------- round trips


def test_a_produce_round_trip(peer: Callable[..., Peer], link: Callable[..., DataLink]) -> None:
    def script(conn: PeerConnection) -> None:
        kind, body = conn.read()
        assert kind == PRODUCE
        assert body == produce("a").SerializeToString()
        conn.answer(produced("a", offset=42))
        assert conn.saw_eof()

    server = peer(script)
    data = link(server.address)
    assert data.address == server.address
    response = data.start(PRODUCE, produce("a"), 5).result(WAIT_S)
    assert isinstance(response, pb.ProduceResponse)
    assert response == produced("a", offset=42)
    assert data.pending == 0
    data.close()
    server.finish()


def test_a_fetch_round_trip_with_a_large_answer(peer: Callable[..., Peer], link: Callable[..., DataLink]) -> None:
    records = bytes(range(256)) * (12 * 1024)  # 3 MiB: many reads

    def script(conn: PeerConnection) -> None:
        assert conn.read_fetch() == fetch(3)
        conn.answer(fetched(records, high_watermark=11))
        assert conn.saw_eof()

    server = peer(script)
    data = link(server.address, max_answer_bytes=4 << 20)
    response = data.start(FETCH, fetch(3), 5).result(WAIT_S)
    assert isinstance(response, pb.FetchResponse)
    assert response.topics[0].partitions[0].high_watermark == 11
    assert response.topics[0].partitions[0].records == records
    data.close()
    server.finish()


def test_pipelined_requests_complete_in_order_on_the_reader(
    peer: Callable[..., Peer], link: Callable[..., DataLink]
) -> None:
    release = threading.Event()

    def script(conn: PeerConnection) -> None:
        # all three arrive before any answer: start() did not wait
        first, second, third = conn.read_produce(), conn.read_fetch(), conn.read_produce()
        assert (first.transactional_id, third.transactional_id) == ("one", "three")
        assert second == fetch(5)
        assert release.wait(WAIT_S)
        conn.send(  # the three answers in one write: one read holds them all
            answer_frame(OK, produced("one", 1).SerializeToString())
            + answer_frame(OK, fetched(b"five").SerializeToString())
            + answer_frame(OK, produced("three", 3).SerializeToString())
        )
        assert conn.saw_eof()

    server = peer(script)
    data = link(server.address)
    order: list[tuple[int, str]] = []
    futures = [data.start(PRODUCE, produce("one"), 5), data.start(FETCH, fetch(5), 5)]
    futures.append(data.start(PRODUCE, produce("three"), 5))
    assert data.pending == 3

    def done(i: int) -> Callable[[Future[Any]], None]:
        return lambda _: order.append((i, threading.current_thread().name))

    for i, future in enumerate(futures):
        future.add_done_callback(done(i))
    assert not any(f.done() for f in futures)
    release.set()
    assert futures[0].result(WAIT_S) == produced("one", 1)
    assert futures[1].result(WAIT_S) == fetched(b"five")
    assert futures[2].result(WAIT_S) == produced("three", 3)
    assert [i for i, _ in order] == [0, 1, 2]
    assert {name for _, name in order} == {f"{data._name}-reader"}
    assert data.pending == 0
    data.close()
    server.finish()


def test_requests_from_several_threads_each_get_their_answer(
    peer: Callable[..., Peer], link: Callable[..., DataLink]
) -> None:
    threads, each = 4, 50

    def echo(conn: PeerConnection) -> None:
        for _ in range(threads * each):
            conn.answer(produced(conn.read_produce().transactional_id))
        assert conn.saw_eof()

    server = peer(echo)
    data = link(server.address)
    started: list[tuple[str, Future[Any]]] = []
    lock = threading.Lock()

    def send(n: int) -> None:
        for i in range(each):
            tag = f"{n}-{i}"
            future = data.start(PRODUCE, produce(tag), 5)
            with lock:
                started.append((tag, future))

    senders = [threading.Thread(target=send, args=(n,)) for n in range(threads)]
    for thread in senders:
        thread.start()
    for thread in senders:
        thread.join(WAIT_S)
        assert not thread.is_alive()
    assert len(started) == threads * each
    for tag, future in started:
        assert future.result(WAIT_S).topics[0].name == tag
    data.close()
    server.finish()


def test_a_request_its_caller_gave_up_on_keeps_its_place(
    peer: Callable[..., Peer], link: Callable[..., DataLink]
) -> None:
    release = threading.Event()

    def script(conn: PeerConnection) -> None:
        tags = [conn.read_produce().transactional_id, conn.read_produce().transactional_id]
        assert release.wait(WAIT_S)
        for tag in tags:
            conn.answer(produced(tag))
        assert conn.saw_eof()

    server = peer(script)
    data = link(server.address)
    first, second = data.start(PRODUCE, produce("first"), 5), data.start(PRODUCE, produce("second"), 5)
    assert first.cancel()
    release.set()
    assert second.result(WAIT_S).topics[0].name == "second"
    assert first.cancelled()
    data.close()
    server.finish()


# ------------------------------------------------------------------------------------------- refusals


def test_a_refusal_is_the_codes_error_and_the_connection_goes_on(
    peer: Callable[..., Peer], link: Callable[..., DataLink]
) -> None:
    def script(conn: PeerConnection) -> None:
        conn.read_produce()
        conn.refuse("TOPIC_AUTHORIZATION_FAILED: User:alice may not write to t")
        conn.read_fetch()
        conn.refuse("an answer without a code")
        conn.read_produce()
        conn.answer(produced("after"))
        assert conn.saw_eof()

    server = peer(script)
    data = link(server.address)
    refused = failure(data.start(PRODUCE, produce("a"), 5))
    assert type(refused) is type(error_from_code("TOPIC_AUTHORIZATION_FAILED"))
    assert isinstance(refused, TopicAuthorizationFailedError)
    assert str(refused) == f"Produce to {server.address}: User:alice may not write to t"
    odd = failure(data.start(FETCH, fetch(0), 5))
    assert isinstance(odd, UnknownKafkaError)
    assert odd.code == "UNKNOWN_SERVER_ERROR"
    assert "an answer without a code" in str(odd)
    assert data.start(PRODUCE, produce("after"), 5).result(WAIT_S) == produced("after")
    assert server.accepted == 1  # all on one connection
    data.close()
    server.finish()


# ------------------------------------------------------------------------------------------- deadlines


def silent(release: threading.Event, eof: list[bool]) -> Script:
    """Reads a request, answers nothing; notes whether the client closed the connection (before ``release``)."""

    def script(conn: PeerConnection) -> None:
        conn.read()
        eof.append(conn.saw_eof())
        assert release.wait(WAIT_S)

    return script


def answer_one(conn: PeerConnection) -> None:
    conn.answer(produced(conn.read_produce().transactional_id))
    assert conn.saw_eof()


def test_no_answer_in_time_closes_the_connection_and_the_next_request_reconnects(
    peer: Callable[..., Peer], link: Callable[..., DataLink]
) -> None:
    release, eof = threading.Event(), list[bool]()

    def two_silent(conn: PeerConnection) -> None:
        conn.read()
        conn.read()
        eof.append(conn.saw_eof())
        assert release.wait(WAIT_S)

    server = peer(two_silent, answer_one)
    data = link(server.address)
    started = time.monotonic()
    first, second = data.start(PRODUCE, produce("a"), 0.3), data.start(FETCH, fetch(0), 5)
    error = failure(first)
    took = time.monotonic() - started
    assert type(error) is NetworkError
    assert str(error) == f"Produce: {server.address} did not answer within 0.3 s; the connection was closed"
    assert 0.25 <= took < 2.5
    assert isinstance(failure(second), NetworkError)  # failed with it: the connection is gone
    assert data.pending == 0
    wait_until(lambda: eof == [True], "EOF at the peer")
    release.set()
    assert data.start(PRODUCE, produce("b"), 5).result(WAIT_S) == produced("b")
    assert server.accepted == 2
    data.close()
    server.finish()


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """What each wait of the readers ended on: "answer" (the socket), "wake-up" (the wake-up pair), none (its
    timeout)."""
    ended: list[list[str]] = []

    class Counting(selectors.DefaultSelector):
        def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
            ready = super().select(timeout)
            ended.append(["wake-up" if key.data else "answer" for key, _ in ready])
            return ready

    monkeypatch.setattr(selectors, "DefaultSelector", Counting)
    return ended


def test_a_shorter_timeout_than_the_idle_readers_wakes_it(
    peer: Callable[..., Peer], link: Callable[..., DataLink], waits: list[list[str]]
) -> None:
    release, eof = threading.Event(), list[bool]()

    def script(conn: PeerConnection) -> None:
        conn.answer(produced(conn.read_produce().transactional_id))
        silent(release, eof)(conn)

    server = peer(script)
    data = link(server.address)
    assert data.start(PRODUCE, produce("a"), 5).result(WAIT_S) == produced("a")
    time.sleep(0.1)  # the reader waits with nothing pending, up to 5 s
    started = time.monotonic()
    error = failure(data.start(PRODUCE, produce("b"), 0.3))
    assert 0.25 <= time.monotonic() - started < 2.5
    assert "did not answer within 0.3 s" in str(error)
    assert waits[:3] == [["answer"], ["wake-up"], []]  # the answer, b started, b's deadline
    assert len(waits) <= 4  # no polling
    wait_until(lambda: eof == [True], "EOF at the peer")
    release.set()
    data.close()
    server.finish()


def test_a_deadline_after_the_idle_readers_wake_up(
    peer: Callable[..., Peer], link: Callable[..., DataLink], waits: list[list[str]]
) -> None:
    # the same timeout each time: no wake-up byte, the reader's idle wait ends before the deadline
    release, eof = threading.Event(), list[bool]()

    def script(conn: PeerConnection) -> None:
        conn.answer(produced(conn.read_produce().transactional_id))
        silent(release, eof)(conn)

    server = peer(script)
    data = link(server.address)
    assert data.start(PRODUCE, produce("a"), 1.2).result(WAIT_S) == produced("a")
    time.sleep(0.3)
    started = time.monotonic()
    error = failure(data.start(PRODUCE, produce("b"), 1.2))
    assert 1.15 <= time.monotonic() - started < 3.5
    assert "did not answer within 1.2 s" in str(error)
    assert waits[:3] == [["answer"], [], []]  # the answer, the idle wait's end, b's deadline
    assert len(waits) <= 4  # no polling
    wait_until(lambda: eof == [True], "EOF at the peer")
    release.set()
    data.close()
    server.finish()


# -------------------------------------------------------------------------------- broken connections


def test_a_close_inside_a_frame_fails_every_waiting_request(
    peer: Callable[..., Peer], link: Callable[..., DataLink]
) -> None:
    def half(conn: PeerConnection) -> None:
        conn.read()
        conn.read()
        conn.send(SIZE.pack(100) + bytes((OK,)) + b"x" * 10)

    server = peer(half, answer_one)
    data = link(server.address)
    futures = [data.start(PRODUCE, produce("a"), 5), data.start(FETCH, fetch(0), 5)]
    for future in futures:
        error = failure(future)
        assert type(error) is NetworkError
        assert f"{server.address} closed the connection, inside a frame" in str(error)
    assert str(failure(futures[1])).startswith("Fetch: ")
    wait_until(lambda: not readers(data._name), "the reader's end")
    assert data.start(PRODUCE, produce("b"), 5).result(WAIT_S) == produced("b")
    data.close()
    server.finish()


@pytest.mark.parametrize(
    ("answer", "cause"),
    [
        (SIZE.pack(2048) + b"\0" * 100, "answered 2048 bytes, over the limit of 1024"),
        (answer_frame(OK, b"\x0a\xff"), "answered with a message that does not parse"),
        (answer_frame(7, b"whatever"), "answered with the unknown status 7"),
        (SIZE.pack(0), "sent an empty answer"),
    ],
    ids=["over-the-limit", "unparsable", "unknown-status", "empty"],
)
def test_a_broken_answer_closes_the_connection(
    peer: Callable[..., Peer], link: Callable[..., DataLink], answer: bytes, cause: str
) -> None:
    eof = list[bool]()

    def script(conn: PeerConnection) -> None:
        conn.read()
        conn.read()
        conn.send(answer)
        eof.append(conn.saw_eof())

    server = peer(script, answer_one)
    data = link(server.address, max_answer_bytes=1024)
    futures = [data.start(PRODUCE, produce("a"), 5), data.start(PRODUCE, produce("b"), 5)]
    for future in futures:
        error = failure(future)
        assert type(error) is NetworkError
        assert str(error).startswith(f"Produce: {server.address} {cause}")
        assert str(error).endswith("; the connection was closed")
    wait_until(lambda: eof == [True], "EOF at the peer")
    assert data.start(PRODUCE, produce("c"), 5).result(WAIT_S) == produced("c")
    data.close()
    server.finish()


def test_an_answer_no_request_waits_for_closes_the_connection(
    peer: Callable[..., Peer], link: Callable[..., DataLink]
) -> None:
    eof = list[bool]()

    def twice(conn: PeerConnection) -> None:
        answer = produced(conn.read_produce().transactional_id)
        conn.answer(answer)
        conn.answer(answer)
        eof.append(conn.saw_eof())

    server = peer(twice, answer_one)
    data = link(server.address)
    assert data.start(PRODUCE, produce("a"), 5).result(WAIT_S) == produced("a")
    wait_until(lambda: eof == [True], "EOF at the peer")
    assert data.pending == 0
    assert data.start(PRODUCE, produce("b"), 5).result(WAIT_S) == produced("b")
    assert server.accepted == 2
    data.close()
    server.finish()


def test_the_peer_closing_an_idle_connection_costs_no_request(
    peer: Callable[..., Peer], link: Callable[..., DataLink]
) -> None:
    def once(conn: PeerConnection) -> None:  # answers, then closes (as connections.max.idle.ms does)
        conn.answer(produced(conn.read_produce().transactional_id))

    server = peer(once, answer_one)
    data = link(server.address)
    assert data.start(PRODUCE, produce("a"), 5).result(WAIT_S) == produced("a")
    wait_until(lambda: not readers(data._name), "the reader's end")  # it saw the EOF at once
    assert data.start(PRODUCE, produce("b"), 5).result(WAIT_S) == produced("b")
    data.close()
    server.finish()


def test_nothing_listening_is_unreachable(link: Callable[..., DataLink]) -> None:
    with socket.create_server(("127.0.0.1", 0)) as unused:
        address = f"127.0.0.1:{unused.getsockname()[1]}"
    data = link(address)
    for _ in range(2):  # each start tries again
        future = data.start(PRODUCE, produce("a"), 5)
        error = failure(future)
        assert isinstance(error, DataLinkUnreachable)
        assert isinstance(error, NetworkError)
        assert f"Produce to {address}: cannot connect to the DATA listener" in str(error)
    assert data.pending == 0
    assert not readers(data._name)


# ---------------------------------------------------------------------------------------------- close


def test_close_from_another_thread_fails_a_waiting_request(
    peer: Callable[..., Peer], link: Callable[..., DataLink]
) -> None:
    release, eof = threading.Event(), list[bool]()
    server = peer(silent(release, eof))
    data = link(server.address)
    future = data.start(FETCH, fetch(0), WAIT_S)
    assert len(readers(data._name)) == 1
    closer = threading.Timer(0.2, data.close)
    started = time.monotonic()
    closer.start()
    error = failure(future)
    assert time.monotonic() - started < 2
    assert type(error) is NetworkError
    assert str(error) == f"Fetch: the DATA link to {server.address} was closed"
    closer.join(WAIT_S)
    for thread in readers(data._name):
        thread.join(WAIT_S)
        assert not thread.is_alive()
    wait_until(lambda: eof == [True], "EOF at the peer")
    release.set()
    server.finish()


def test_start_after_close_fails(peer: Callable[..., Peer], link: Callable[..., DataLink]) -> None:
    server = peer(answer_one)
    data = link(server.address)
    assert data.start(PRODUCE, produce("a"), 5).result(WAIT_S) == produced("a")
    data.close()
    data.close()  # idempotent
    error = failure(data.start(PRODUCE, produce("b"), 5))
    assert type(error) is NetworkError
    assert "the DATA link is closed" in str(error)
    assert data.pending == 0
    server.finish()
    assert server.accepted == 1
    with pytest.raises(ValueError, match="unknown DATA request kind 9"):
        data.start(9, produce("c"), 5)


# ------------------------------------------------------------------------------------------------ TLS


@pytest.fixture(scope="module")
def authority() -> CertificateAuthority:
    return CertificateAuthority.create("test-data-link CA")


def server_context(authority: CertificateAuthority, root: Path) -> ssl.SSLContext:
    keystore = root / "node.keystore.pem"
    write_private(keystore, authority.issue("node").keystore_pem)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(keystore)
    return context


def client_context(authority: CertificateAuthority) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(cadata=authority.cert_pem.decode("ascii"))
    return context


def test_round_trips_over_tls(
    peer: Callable[..., Peer], link: Callable[..., DataLink], authority: CertificateAuthority, tmp_path: Path
) -> None:
    records = b"r" * (1 << 20)

    def script(conn: PeerConnection) -> None:
        tags = [conn.read_produce().transactional_id for _ in range(3)]
        for tag in tags:
            conn.answer(produced(tag))
        big = conn.read_produce()  # many TLS records
        assert big.topics[0].partitions[0].records == records
        conn.answer(produced("big"))
        conn.read_produce()
        conn.refuse("TOPIC_AUTHORIZATION_FAILED: no")
        assert conn.read_fetch() == fetch(1)
        conn.answer(fetched(records))
        assert conn.saw_eof()

    server = peer(script, tls=server_context(authority, tmp_path))
    data = link(server.address, max_answer_bytes=2 << 20, tls=client_context(authority))
    futures = [data.start(PRODUCE, produce(tag), 5) for tag in ("x", "y", "z")]
    assert [f.result(WAIT_S).topics[0].name for f in futures] == ["x", "y", "z"]
    big = produce("big")
    big.topics[0].partitions[0].records = records
    assert data.start(PRODUCE, big, 5).result(WAIT_S) == produced("big")
    assert isinstance(failure(data.start(PRODUCE, produce("w"), 5)), TopicAuthorizationFailedError)
    assert data.start(FETCH, fetch(1), 5).result(WAIT_S).topics[0].partitions[0].records == records
    data.close()
    server.finish()
    assert server.accepted == 1


def test_a_tls_close_notify_right_behind_an_answer_delivers_it_and_ends_the_connection(
    peer: Callable[..., Peer], link: Callable[..., DataLink], authority: CertificateAuthority, tmp_path: Path
) -> None:
    """A server that answers and then closes TLS cleanly (a close_notify, as asyncio's ``transport.close()`` sends):
    the answer is delivered, the connection ends (its reader does not spin on the closed TLS session), and the
    next request opens a new one."""

    def answer_and_close(conn: PeerConnection) -> None:
        request = conn.read_produce()
        assert isinstance(conn.sock, ssl.SSLSocket)
        conn.sock.sendall(answer_frame(OK, produced(request.transactional_id).SerializeToString()))
        conn.sock.settimeout(WAIT_S)
        with contextlib.suppress(OSError, ssl.SSLError):  # the client closes without a close_notify of its own
            conn.sock.unwrap()  # the close_notify

    server = peer(answer_and_close, answer_one, tls=server_context(authority, tmp_path))
    data = link(server.address, tls=client_context(authority))
    assert data.start(PRODUCE, produce("a"), 5).result(WAIT_S) == produced("a")
    wait_until(lambda: not readers(data._name), "end of the first connection's reader")
    assert data.start(PRODUCE, produce("b"), 5).result(WAIT_S) == produced("b")
    data.close()
    server.finish()
    assert server.accepted == 2


def test_an_untrusted_tls_server_is_unreachable(
    peer: Callable[..., Peer], link: Callable[..., DataLink], authority: CertificateAuthority, tmp_path: Path
) -> None:
    server = peer(answer_one, tls=server_context(CertificateAuthority.create("someone else"), tmp_path))
    data = link(server.address, tls=client_context(authority))
    error = failure(data.start(PRODUCE, produce("a"), 5))
    assert isinstance(error, DataLinkUnreachable)
    assert "CERTIFICATE_VERIFY_FAILED" in str(error)
    assert not readers(data._name)
    server.finish()
    assert len(server.handshake_errors) == 1


# ------------------------------------------------------------------------------------------------- SASL


class FakeSession:
    """A SASL session (``odradek.security.sasl_client.SaslSession``'s ``token``/``forget``): hands out ``t1``,
    ``t2``... a new one after :meth:`renew` or a ``forget`` of the current one; ``failing`` raises instead."""

    def __init__(self) -> None:
        self.number = 1
        self.forgotten: list[str] = []
        self.failing: Exception | None = None

    def token(self) -> str:
        if self.failing is not None:
            raise self.failing
        return f"t{self.number}"

    def renew(self) -> None:
        self.number += 1

    def forget(self, token: str) -> None:
        self.forgotten.append(token)
        if token == f"t{self.number}":
            self.renew()


def test_sasl_a_connection_authenticates_first_and_again_after_a_renewal(
    peer: Callable[..., Peer], link: Callable[..., DataLink]
) -> None:
    def script(conn: PeerConnection) -> None:
        assert conn.read_auth() == "t1"
        assert conn.read_produce() == produce("a")  # the two frames came together: answered in order
        conn.send(answer_frame(OK, b""))
        conn.answer(produced("a"))
        assert conn.read_produce() == produce("b")  # the same token: no AUTH
        conn.answer(produced("b"))
        assert conn.read_auth() == "t2"  # renewed: re-authenticates ahead of the next request
        assert conn.read_fetch() == fetch(3)
        conn.send(answer_frame(OK, b""))
        conn.answer(fetched(b"r"))
        assert conn.saw_eof()

    server = peer(script)
    session = FakeSession()
    data = link(server.address, session=session)
    assert data.start(PRODUCE, produce("a"), 5).result(WAIT_S) == produced("a")
    assert data.start(PRODUCE, produce("b"), 5).result(WAIT_S) == produced("b")
    session.renew()
    assert data.start(FETCH, fetch(3), 5).result(WAIT_S) == fetched(b"r")
    assert data.pending == 0
    assert server.accepted == 1
    data.close()
    server.finish()
    assert session.forgotten == []


def test_sasl_a_refused_token_is_forgotten_and_the_next_connection_authenticates_anew(
    peer: Callable[..., Peer], link: Callable[..., DataLink]
) -> None:
    def refusing(conn: PeerConnection) -> None:  # as a restarted broker: its new key does not take t1
        assert conn.read_auth() == "t1"
        conn.read_produce()
        conn.refuse("SASL_AUTHENTICATION_FAILED: invalid session token (signed by another node or altered)")

    def accepting(conn: PeerConnection) -> None:
        assert conn.read_auth() == "t2"
        assert conn.read_produce() == produce("again")
        conn.send(answer_frame(OK, b""))
        conn.answer(produced("again"))
        assert conn.saw_eof()

    server = peer(refusing, accepting)
    session = FakeSession()
    data = link(server.address, session=session)
    lost = failure(data.start(PRODUCE, produce("a"), 5))
    assert isinstance(lost, NetworkError)  # retriable: the connection closed behind the refusal
    assert f"{server.address} closed the connection" in str(lost)
    assert session.forgotten == ["t1"]
    assert data.start(PRODUCE, produce("again"), 5).result(WAIT_S) == produced("again")
    assert server.accepted == 2
    data.close()
    server.finish()


def test_sasl_a_token_that_cannot_be_had_fails_the_request_unsent(
    peer: Callable[..., Peer], link: Callable[..., DataLink]
) -> None:
    server = peer()
    session = FakeSession()
    session.failing = SaslAuthenticationFailedError("SaslAuthenticate: wrong password for alice")
    data = link(server.address, session=session)
    refused = failure(data.start(PRODUCE, produce("a"), 5))
    assert refused is session.failing
    assert server.accepted == 0
    assert readers(data._name) == []  # no connection was opened
