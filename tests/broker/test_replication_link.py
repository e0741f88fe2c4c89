"""The follower's side of ``broker/replication_link.py`` against a scripted peer on a real socket: a round trip,
and every way a leader can fail it (an answer over the limit, a close inside a frame, no answer in time, a
close from another thread) ending in :class:`LinkError` within the call's time, the next call reconnecting.
And the listener's start-up refusal of SASL_PLAINTEXT."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import SimpleNamespace

import pytest

from broker.replica_fetcher import ReplicaFetcherManager
from broker.replication_link import FollowerLink, LinkError, replication_address
from broker.replication_listener import ReplicationListener
from common.framing import frame, recv_exactly
from metadata.configs import ConfigError
from proto import broker_pb2 as pb

Script = Callable[[socket.socket], None]


@contextmanager
def peer(*scripts: Script) -> Iterator[str]:
    """A listening socket whose n-th accepted connection runs ``scripts[n]``; yields its address."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(10)

    def run() -> None:
        for script in scripts:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                script(conn)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.getsockname()[1]}"
    finally:
        server.close()
        thread.join(10)


def read_request(conn: socket.socket) -> pb.FetchRequest:
    head = recv_exactly(conn, 4, time.monotonic() + 10)
    assert head is not None
    body = recv_exactly(conn, struct.unpack(">I", head)[0], time.monotonic() + 10)
    return pb.FetchRequest.FromString(bytes(body or b""))


def answer_with(response: pb.FetchResponse) -> Script:
    def script(conn: socket.socket) -> None:
        request = read_request(conn)
        response.topics.add(name=request.topics[0].name if request.topics else "?")
        conn.sendall(frame(response.SerializeToString()))

    return script


def request() -> pb.FetchRequest:
    out = pb.FetchRequest(replica_id=1, replica_epoch=7, max_wait_ms=500)
    out.topics.add(name="t").partitions.add(partition=0, fetch_offset=3)
    return out


def test_a_round_trip_and_a_reconnect_after_the_peer_closed() -> None:
    # each connection of the peer answers one request, then closes
    with peer(answer_with(pb.FetchResponse()), answer_with(pb.FetchResponse())) as address:
        link = FollowerLink(address, None, 1 << 20)
        try:
            assert [t.name for t in link.call(request(), 5).topics] == ["t"]
            with pytest.raises(LinkError, match="closed the connection"):
                link.call(request(), 5)
            assert [t.name for t in link.call(request(), 5).topics] == ["t"]  # on a new connection
        finally:
            link.close()


def test_an_answer_over_the_limit_fails_the_call() -> None:
    def too_big(conn: socket.socket) -> None:
        read_request(conn)
        conn.sendall(struct.pack(">I", 2048) + b"x" * 2048)

    with peer(too_big) as address:
        link = FollowerLink(address, None, 1024)
        with pytest.raises(LinkError, match="over the limit of 1024"):
            link.call(request(), 5)
        link.close()


def test_a_close_inside_a_frame_fails_the_call() -> None:
    def half(conn: socket.socket) -> None:
        read_request(conn)
        conn.sendall(struct.pack(">I", 100) + b"x" * 10)

    with peer(half) as address:
        link = FollowerLink(address, None, 1 << 20)
        with pytest.raises(LinkError, match="inside a frame"):
            link.call(request(), 5)
        link.close()


def silent(release: threading.Event) -> Script:
    """A peer that reads the request and answers nothing until ``release`` is set."""

    def script(conn: socket.socket) -> None:
        read_request(conn)
        release.wait(10)

    return script


def test_no_answer_fails_the_call_at_its_timeout() -> None:
    release = threading.Event()
    with peer(silent(release)) as address:
        link = FollowerLink(address, None, 1 << 20)
        started = time.monotonic()
        with pytest.raises(LinkError, match="did not answer within 0.3 s"):
            link.call(request(), 0.3)
        assert time.monotonic() - started < 5
        release.set()
        link.close()


def test_close_from_another_thread_ends_a_waiting_call() -> None:
    release = threading.Event()
    with peer(silent(release)) as address:
        link = FollowerLink(address, None, 1 << 20)
        failed: list[BaseException] = []

        def call() -> None:
            try:
                link.call(request(), 30)
            except LinkError as exc:
                failed.append(exc)

        caller = threading.Thread(target=call)
        caller.start()
        time.sleep(0.2)
        link.close()
        caller.join(5)
        release.set()
        assert not caller.is_alive()
        assert len(failed) == 1
        with pytest.raises(LinkError, match="closed"):
            link.call(request(), 1)  # a closed link does not reconnect


def test_a_peer_that_is_not_there_fails_the_call() -> None:
    with socket.create_server(("127.0.0.1", 0)) as unused:
        address = f"127.0.0.1:{unused.getsockname()[1]}"
    link = FollowerLink(address, None, 1 << 20)
    with pytest.raises(LinkError, match="replication link to"):
        link.call(request(), 2)


def test_the_listener_refuses_sasl_plaintext_at_start() -> None:
    ctx = SimpleNamespace(security=SimpleNamespace(protocol=lambda name: "SASL_PLAINTEXT"))
    with pytest.raises(ConfigError, match="REPLICATION is SASL_PLAINTEXT"):
        ReplicationListener(ctx, "REPLICATION", "127.0.0.1:0", None, None)  # type: ignore[arg-type]


def image_with(endpoints: dict[int, list[tuple[str, str, int]]]) -> SimpleNamespace:
    """A metadata image stand-in: brokers by id with (listener, host, port) endpoints."""

    def broker(broker_id: int) -> SimpleNamespace | None:
        if broker_id not in endpoints:
            return None
        found = [SimpleNamespace(name=n, host=h, port=p) for n, h, p in endpoints[broker_id]]
        return SimpleNamespace(
            endpoints=found, endpoint=lambda name: next((e for e in found if e.name == name), None)
        )

    return SimpleNamespace(broker=broker)


def test_followers_use_a_leaders_replication_listener_only_when_it_has_one_and_links_are_on() -> None:
    image = image_with({1: [("PLAINTEXT", "h", 1), ("REPLICATION", "h", 2)], 2: [("PLAINTEXT", "h", 3)]})
    assert replication_address(image, 1) == "h:2"
    assert replication_address(image, 2) is None
    assert replication_address(image, 3) is None
    on = ReplicaFetcherManager(0, None, None, lambda: 1, links=True)  # type: ignore[arg-type]
    off = ReplicaFetcherManager(0, None, None, lambda: 1, links=False)  # type: ignore[arg-type]
    assert on._addresses(image, 1) == ("h:1", "h:2")  # type: ignore[arg-type]
    assert on._addresses(image, 2) == ("h:3", None)  # type: ignore[arg-type]
    assert off._addresses(image, 1) == ("h:1", None)  # type: ignore[arg-type]
