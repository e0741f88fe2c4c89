"""The controller channel: NOT_CONTROLLER hints, unreachable controllers, deadlines, cancelling a long poll.

The controllers are in-process fake Controller services on 127.0.0.1 (only the calls the test needs)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest

from broker.controller_channel import ChannelClosedError, ControllerChannel, ControllerUnavailableError
from proto import controller_pb2 as pb
from proto import controller_pb2_grpc
from proto.common_pb2 import ControllerHint
from tests.broker.cluster import free_ports


class FakeController(controller_pb2_grpc.ControllerServicer):
    """Active (answers) or not (NOT_CONTROLLER with a hint); FetchMetadata blocks until released."""

    def __init__(self, node_id: int, active: bool, hint: tuple[int, str] = (-1, "")) -> None:
        self.node_id = node_id
        self.active = active
        self.hint = hint
        self.calls = 0
        self.release = threading.Event()

    def RegisterBroker(self, request: pb.RegisterBrokerRequest, context: Any) -> pb.RegisterBrokerResponse:
        self.calls += 1
        if not self.active:
            response = pb.RegisterBrokerResponse(controller=ControllerHint(node_id=self.hint[0], address=self.hint[1]))
            response.error.code = "NOT_CONTROLLER"
            return response
        return pb.RegisterBrokerResponse(broker_epoch=100 + self.node_id)

    def FetchMetadata(self, request: pb.FetchMetadataRequest, context: Any) -> pb.FetchMetadataResponse:
        self.calls += 1
        self.release.wait(30)
        return pb.FetchMetadataResponse(end_offset=self.node_id)


@pytest.fixture
def servers() -> Iterator[list[tuple[FakeController, str, grpc.Server]]]:
    started: list[tuple[FakeController, str, grpc.Server]] = []

    def start(fake: FakeController, port: int) -> None:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        controller_pb2_grpc.add_ControllerServicer_to_server(fake, server)  # type: ignore[no-untyped-call]
        server.add_insecure_port(f"127.0.0.1:{port}")
        server.start()
        started.append((fake, f"127.0.0.1:{port}", server))

    ports = free_ports(3)
    active = FakeController(2, active=True)
    start(FakeController(0, active=False, hint=(2, f"127.0.0.1:{ports[2]}")), ports[0])
    start(FakeController(1, active=False), ports[1])
    start(active, ports[2])
    yield started
    for fake, _, server in started:
        fake.release.set()
        server.stop(0)


def test_follows_the_hint_to_the_active_controller_and_remembers_it(
    servers: list[tuple[FakeController, str, grpc.Server]],
) -> None:
    (hinting, first, _), _, (active, third, _) = servers
    channel = ControllerChannel([first])  # only the hinting one is known
    try:
        response = channel.call("RegisterBroker", pb.RegisterBrokerRequest(broker_id=1), 10)
        assert response.broker_epoch == 102
        assert channel.active == third
        assert third in channel.addresses
        channel.call("RegisterBroker", pb.RegisterBrokerRequest(broker_id=1), 10)
        assert hinting.calls == 1  # the second call went straight to the active one
        assert active.calls == 2
    finally:
        channel.close()


def test_skips_unreachable_and_hintless_controllers(servers: list[tuple[FakeController, str, grpc.Server]]) -> None:
    _, (_, second, _), (_, third, _) = servers
    dead = f"127.0.0.1:{free_ports(1)[0]}"
    channel = ControllerChannel([dead, second, third])
    try:
        assert channel.call("RegisterBroker", pb.RegisterBrokerRequest(broker_id=1), 20).broker_epoch == 102
    finally:
        channel.close()


def test_gives_up_at_the_deadline(servers: list[tuple[FakeController, str, grpc.Server]]) -> None:
    _, (_, second, _), _ = servers
    channel = ControllerChannel([second])  # never active, no hint
    try:
        started = time.monotonic()
        with pytest.raises(ControllerUnavailableError, match="NOT_CONTROLLER"):
            channel.call("RegisterBroker", pb.RegisterBrokerRequest(broker_id=1), 0.5)
        assert time.monotonic() - started < 10
    finally:
        channel.close()


def test_close_cancels_a_long_poll(servers: list[tuple[FakeController, str, grpc.Server]]) -> None:
    (fake, first, _), _, _ = servers
    channel = ControllerChannel([first])
    errors: list[BaseException] = []

    def poll() -> None:
        try:
            channel.call("FetchMetadata", pb.FetchMetadataRequest(), 60, active=False)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=poll)
    thread.start()
    deadline = time.monotonic() + 10
    while fake.calls == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert thread.is_alive()
    channel.close()
    thread.join(10)
    assert not thread.is_alive()
    assert len(errors) == 1
    assert isinstance(errors[0], ChannelClosedError)
