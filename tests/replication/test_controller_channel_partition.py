"""The broker's controller channel under a network partition (issue 16, found by the partition faults of
the local chaos backend): a metadata long poll to a controller that a partition cut off would hang until its
deadline while the rest of the cluster moved on; once a heartbeat learns of the new active controller, the
read is asked again of it."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest

from broker.controller_channel import ControllerChannel
from proto import controller_pb2 as pb
from proto import controller_pb2_grpc


class _Controller(controller_pb2_grpc.ControllerServicer):
    """``cut``: answers nothing (its calls hang until the caller gives up, as behind a dropped link)."""

    def __init__(self, cut: bool) -> None:
        self.cut = cut

    def _hang(self, context: Any) -> None:
        while context.is_active():
            time.sleep(0.02)

    def FetchMetadata(self, request: Any, context: Any) -> Any:  # noqa: N802 (gRPC's names)
        if self.cut:
            self._hang(context)
        return pb.FetchMetadataResponse()

    def BrokerHeartbeat(self, request: Any, context: Any) -> Any:  # noqa: N802
        if self.cut:
            self._hang(context)
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
