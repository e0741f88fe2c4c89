"""The REPLICATION listener's ``connections.max.idle.ms`` against a real broker (``BrokerHarness``, its real
Broker service on an event loop) and a real socket: a follower's fetch in progress, however long it waits, keeps
the connection; once answered, the connection closes after the idle time with no next fetch."""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from broker.replication_listener import ReplicationListener
from broker.service import BrokerService
from common.framing import frame, recv_exactly
from proto import broker_pb2 as pb
from tests.broker.conftest import BrokerHarness

FOLLOWER = 1
IDLE_MS = 300
WAIT_S = 10.0


@pytest.fixture
def listener(tmp_path: Path) -> Iterator[tuple[BrokerHarness, ReplicationListener]]:
    h = BrokerHarness(tmp_path / "broker", props={"connections.max.idle.ms": str(IDLE_MS)})
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="test-replication-loop", daemon=True)
    thread.start()
    pool = ThreadPoolExecutor(2, thread_name_prefix="test-replication-pool")
    served = None
    try:
        h.register(FOLLOWER)
        h.create_topic("t", replicas=[0, FOLLOWER])
        served = ReplicationListener(h.ctx, "REPLICATION", "127.0.0.1:0", BrokerService(h.ctx, "REPLICATION", pool),
                                     loop)  # fmt: skip
        served.start()
        yield h, served
    finally:
        if served is not None:
            served.stop()
        loop.call_soon_threadsafe(loop.stop)
        thread.join(WAIT_S)
        loop.close()
        pool.shutdown(wait=True)
        h.close()


def fetch(h: BrokerHarness, max_wait_ms: int) -> bytes:
    """A follower's full fetch of ``t``-0 from offset 0 (the log end: nothing to read, so it waits)."""
    request = pb.FetchRequest(replica_id=FOLLOWER, replica_epoch=h.broker_epoch(FOLLOWER), max_wait_ms=max_wait_ms,
                              min_bytes=1, max_bytes=1 << 20, session_epoch=0)  # fmt: skip
    request.topics.add(name="t").partitions.add(partition=0, fetch_offset=0, partition_max_bytes=1 << 20,
                                                current_leader_epoch=h.partition("t").leader_epoch)  # fmt: skip
    return frame(request.SerializeToString())


def answer(sock: socket.socket) -> pb.FetchResponse:
    head = recv_exactly(sock, 4, time.monotonic() + WAIT_S)
    assert head is not None, "the listener closed the connection instead of answering"
    body = recv_exactly(sock, struct.unpack(">I", head)[0], time.monotonic() + WAIT_S)
    assert body is not None
    return pb.FetchResponse.FromString(bytes(body))


def closed_within(sock: socket.socket, timeout_s: float) -> bool:
    sock.settimeout(timeout_s)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_a_waiting_fetch_is_not_idle_and_an_answered_connection_closes_after_the_idle_time(
    listener: tuple[BrokerHarness, ReplicationListener],
) -> None:
    h, served = listener
    with socket.create_connection(("127.0.0.1", served.port), timeout=WAIT_S) as sock:
        sock.sendall(fetch(h, max_wait_ms=IDLE_MS * 5))  # parks for 1.5 s: five times the idle time
        sent = time.monotonic()
        response = answer(sock)
        assert time.monotonic() - sent >= IDLE_MS * 4 / 1000  # it waited (nothing to read) and was not cut off
        assert [(t.name, [p.error.code for p in t.partitions]) for t in response.topics] == [("t", [""])]
        answered = time.monotonic()
        assert closed_within(sock, WAIT_S)  # then no next fetch: closed after connections.max.idle.ms
        assert IDLE_MS / 1000 * 0.9 <= time.monotonic() - answered < WAIT_S


def test_fetches_closer_than_the_idle_time_keep_the_connection(
    listener: tuple[BrokerHarness, ReplicationListener],
) -> None:
    h, served = listener
    with socket.create_connection(("127.0.0.1", served.port), timeout=WAIT_S) as sock:
        for _ in range(6):  # 6 rounds of ~0.2 s each: past the idle time in all, never idle for all of it
            sock.sendall(fetch(h, max_wait_ms=50))
            answer(sock)
            assert not closed_within(sock, IDLE_MS * 0.5 / 1000)


def test_requests_sent_together_are_taken_one_at_a_time_in_order(
    listener: tuple[BrokerHarness, ReplicationListener],
) -> None:
    """The follower's lockstep, kept by the listener too: a second request already in the socket is taken only
    once the first is answered (the first parks for its max wait, so the second's answer comes after it)."""
    h, served = listener
    with socket.create_connection(("127.0.0.1", served.port), timeout=WAIT_S) as sock:
        sock.sendall(fetch(h, max_wait_ms=400) + fetch(h, max_wait_ms=1))
        sent = time.monotonic()
        answer(sock)
        first = time.monotonic() - sent
        answer(sock)
        assert first >= 0.35  # the first waited its max wait: nothing to read
        assert served.connections  # still open, serving


def test_a_connection_lost_while_its_fetch_waits_ends_quietly(
    listener: tuple[BrokerHarness, ReplicationListener], caplog: pytest.LogCaptureFixture
) -> None:
    """The fetch in progress finishes on its own (its session is closed after it, not under it), nothing is
    logged as an error, and the listener serves the next connection."""
    h, served = listener
    with socket.create_connection(("127.0.0.1", served.port), timeout=WAIT_S) as sock:
        sock.sendall(fetch(h, max_wait_ms=300))
        deadline = time.monotonic() + WAIT_S
        while not served.connections:
            assert time.monotonic() < deadline, "the listener did not take the connection"
            time.sleep(0.01)
    deadline = time.monotonic() + WAIT_S
    while served.connections:  # the close is seen at once; the parked fetch ends at its max wait
        assert time.monotonic() < deadline, "the lost connection is still listed"
        time.sleep(0.01)
    time.sleep(0.5)  # past the parked fetch's max wait: it was answered into a closed connection
    assert not [r for r in caplog.records if r.levelname in ("ERROR", "CRITICAL")]
    with socket.create_connection(("127.0.0.1", served.port), timeout=WAIT_S) as sock:
        sock.sendall(fetch(h, max_wait_ms=1))
        assert [t.name for t in answer(sock).topics] == ["t"]


def test_an_unexpected_error_closes_the_connection_and_is_logged(
    listener: tuple[BrokerHarness, ReplicationListener], caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    h, served = listener

    def failing(view: object, done: Callable[[object], None], session: object) -> Callable[[], None]:
        done(RuntimeError("a bug in the fetch path"))
        return lambda: None

    monkeypatch.setattr(served._service, "fetch_then", failing)
    with socket.create_connection(("127.0.0.1", served.port), timeout=WAIT_S) as sock:
        sock.sendall(fetch(h, max_wait_ms=1))
        assert closed_within(sock, WAIT_S)
    assert any("a fetch from" in r.getMessage() and r.levelname == "ERROR" for r in caplog.records)


def test_a_thousand_pipelined_refusals_are_answered_in_order(
    listener: tuple[BrokerHarness, ReplicationListener], caplog: pytest.LogCaptureFixture
) -> None:
    """Requests answered at once (not a follower's: INVALID_REQUEST) and sent all together are taken in a loop,
    not a recursion: every one answered, the connection kept, nothing logged as an error."""
    h, served = listener
    request = pb.FetchRequest(replica_id=-1, max_wait_ms=1, max_bytes=1024)
    request.topics.add(name="t").partitions.add(partition=0, fetch_offset=0, partition_max_bytes=1024)
    with socket.create_connection(("127.0.0.1", served.port), timeout=WAIT_S) as sock:
        sock.sendall(frame(request.SerializeToString()) * 1000)
        codes = [answer(sock).topics[0].partitions[0].error.code for _ in range(1000)]
        assert codes == ["INVALID_REQUEST"] * 1000
        sock.sendall(fetch(h, max_wait_ms=1))
        assert [t.name for t in answer(sock).topics] == ["t"]
    assert not [r for r in caplog.records if r.levelname in ("ERROR", "CRITICAL")]
