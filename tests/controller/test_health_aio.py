"""The gRPC health service on the nodes' ``grpc.aio`` servers (controller.rpc_server.RpcServer): Watch streams
hold no worker thread, see every change, and one reporter serves several servers (a broker's listeners)."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from controller.health import HealthReporter
from controller.ports import free_ports
from controller.rpc_server import RpcServer
from odradek.health import SERVING, check

SERVICE = "odradek.test.Service"
WAIT_S = 10.0


@pytest.fixture
def served() -> Iterator[tuple[list[str], list[RpcServer], HealthReporter, list[bool]]]:
    ready = [False]
    reporter = HealthReporter(SERVICE, lambda: ready[0], interval_s=0.02)
    servers = [
        RpcServer(f"health-{i}", f"127.0.0.1:{port}", reporter.add_to, workers=1, maximum_concurrent_rpcs=20)
        for i, port in enumerate(free_ports(2))
    ]
    for s in servers:
        s.start()
    reporter.start()
    try:
        yield [s.listen for s in servers], servers, reporter, ready
    finally:
        reporter.shutdown()
        for s in servers:
            assert s.stop(0).wait(10)


class Watcher:
    """One Watch stream, read on a thread of its own; the statuses arrive on ``seen``."""

    def __init__(self, address: str, service: str = "") -> None:
        self.channel = grpc.insecure_channel(address)
        stub: Any = health_pb2_grpc.HealthStub(self.channel)
        self.call = stub.Watch(health_pb2.HealthCheckRequest(service=service), timeout=60)
        self.seen: queue.Queue[str] = queue.Queue()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            for answer in self.call:
                self.seen.put(health_pb2.HealthCheckResponse.ServingStatus.Name(answer.status))
        except grpc.RpcError:
            pass  # cancelled by close(), or the server stopped

    def next(self) -> str:
        return self.seen.get(timeout=WAIT_S)

    def close(self) -> None:
        self.call.cancel()
        self.thread.join(WAIT_S)
        self.channel.close()


def test_watch_streams_hold_no_worker(served: tuple[list[str], list[RpcServer], HealthReporter, list[bool]]) -> None:
    """Three Watch streams on a server with ONE worker: the worker stays free for the node's short requests."""
    addresses, servers, _, ready = served
    watchers = [Watcher(addresses[0]) for _ in range(3)]
    try:
        assert [w.next() for w in watchers] == ["NOT_SERVING"] * 3  # every stream is open and waiting
        assert servers[0].pool.submit(lambda: "free").result(timeout=5) == "free"
        assert check(addresses[0]) == "NOT_SERVING"
        ready[0] = True
        assert [w.next() for w in watchers] == [SERVING] * 3
    finally:
        for w in watchers:
            w.close()


def test_watch_follows_every_change_on_every_server_until_shutdown(
    served: tuple[list[str], list[RpcServer], HealthReporter, list[bool]],
) -> None:
    addresses, _, reporter, ready = served
    node, own, other = Watcher(addresses[0]), Watcher(addresses[1], SERVICE), Watcher(addresses[1], "no.such.Service")
    try:
        assert (node.next(), own.next(), other.next()) == ("NOT_SERVING", "NOT_SERVING", "SERVICE_UNKNOWN")
        assert check(addresses[1], "no.such.Service") == "SERVICE_UNKNOWN"  # Check: NOT_FOUND
        for serving in (True, False, True):
            ready[0] = serving
            expected = SERVING if serving else "NOT_SERVING"
            assert (node.next(), own.next()) == (expected, expected)
            assert check(addresses[0]) == check(addresses[1], SERVICE) == expected
        reporter.shutdown()
        assert (node.next(), own.next()) == ("NOT_SERVING", "NOT_SERVING")
        ready[0] = True  # too late: NOT_SERVING for good
        time.sleep(0.2)
        assert check(addresses[0]) == check(addresses[1]) == "NOT_SERVING"
        assert [w.seen.qsize() for w in (node, own, other)] == [0, 0, 0], "nothing after the shutdown"
    finally:
        for w in (node, own, other):
            w.close()
