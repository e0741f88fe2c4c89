"""The broker's controller channel under a network partition (issue 16, found by the partition faults of
the local chaos backend): a metadata long poll to a controller that a partition cut off would hang until its
deadline while the rest of the cluster moved on; once a heartbeat learns of the new active controller, the
read is asked again of it. A heartbeat that spent its deadline at the cut-off active controller does not pick
it again next time (the new active controller fenced brokers of its own side of the partition that did)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest

from broker.controller_channel import ControllerChannel, ControllerUnavailableError
from proto import controller_pb2 as pb
from proto import controller_pb2_grpc
from proto.common_pb2 import ControllerHint


class _Controller(controller_pb2_grpc.ControllerServicer):
    """``cut``: answers nothing (its calls hang until the caller gives up, as behind a dropped link);
    ``hint``: not active, answers NOT_CONTROLLER naming the active one at that address."""

    def __init__(self, cut: bool, hint: str = "") -> None:
        self.cut = cut
        self.hint = hint
        self.heartbeats = 0

    def _hang(self, context: Any) -> None:
        while context.is_active():
            time.sleep(0.02)

    def FetchMetadata(self, request: Any, context: Any) -> Any:  # noqa: N802 (gRPC's names)
        if self.cut:
            self._hang(context)
        return pb.FetchMetadataResponse()

    def BrokerHeartbeat(self, request: Any, context: Any) -> Any:  # noqa: N802
        self.heartbeats += 1
        if self.cut:
            self._hang(context)
        if self.hint:
            response = pb.BrokerHeartbeatResponse(controller=ControllerHint(node_id=2, address=self.hint))
            response.error.code = "NOT_CONTROLLER"
            return response
        return pb.BrokerHeartbeatResponse(is_caught_up=True)


@pytest.fixture
def controllers() -> Iterator[tuple[str, str]]:
    servers, addresses = [], []
    for cut in (True, False):
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        controller_pb2_grpc.add_ControllerServicer_to_server(_Controller(cut), server)
        addresses.append(f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}")
        server.start()
        servers.append(server)
    try:
        yield addresses[0], addresses[1]
    finally:
        for server in servers:
            server.stop(None)


def test_a_read_stuck_at_a_cut_off_controller_moves_to_the_new_active_one(controllers: tuple[str, str]) -> None:
    cut_off, active = controllers
    channel = ControllerChannel([cut_off, active])
    channel._reader = cut_off  # the long poll went there before the partition
    answers: list[Any] = []
    reader = threading.Thread(
        target=lambda: answers.append(channel.call("FetchMetadata", pb.FetchMetadataRequest(), 30.0, active=False))
    )
    try:
        reader.start()
        time.sleep(0.3)  # the read hangs at the cut-off controller
        channel.active = active
        assert channel.call("BrokerHeartbeat", pb.BrokerHeartbeatRequest(), 5.0).is_caught_up
        reader.join(10.0)  # not the read's 30 s
        assert not reader.is_alive()
        assert len(answers) == 1
    finally:
        channel.close()
        reader.join(35.0)


@pytest.fixture
def three_controllers() -> Iterator[tuple[list[_Controller], list[str]]]:
    """A follower that names the active controller, the old active one (cut off), the new active one."""
    fakes, servers, addresses = [], [], []
    for _ in range(3):
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        addresses.append(f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}")
        servers.append(server)
    fakes = [_Controller(False, hint=addresses[2]), _Controller(True), _Controller(False)]
    for fake, server in zip(fakes, servers, strict=True):
        controller_pb2_grpc.add_ControllerServicer_to_server(fake, server)
        server.start()
    try:
        yield fakes, addresses
    finally:
        for server in servers:
            server.stop(None)


def test_a_heartbeat_after_one_lost_at_a_cut_off_controller_goes_elsewhere(
    three_controllers: tuple[list[_Controller], list[str]],
) -> None:
    (follower, cut_off, active), addresses = three_controllers
    channel = ControllerChannel(addresses)
    channel.active = addresses[1]  # the active controller before the partition
    try:
        with pytest.raises(ControllerUnavailableError, match="DEADLINE_EXCEEDED"):
            channel.call("BrokerHeartbeat", pb.BrokerHeartbeatRequest(), 1.0)  # as the broker's heartbeats
        assert cut_off.heartbeats == 1
        for _ in range(3):  # the next heartbeats reach the new active controller at once
            assert channel.call("BrokerHeartbeat", pb.BrokerHeartbeatRequest(), 1.0).is_caught_up
        assert cut_off.heartbeats == 1
        assert channel.active == addresses[2]
        assert active.heartbeats == 3
    finally:
        channel.close()
