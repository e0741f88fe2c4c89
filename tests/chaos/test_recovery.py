"""When the harness calls the cluster recovered and how far it drains the consumers (no cluster: brokers are
in-process gRPC servers answering Metadata with a set image).

The case behind them: after a partition that put the leader of a partition and the active controller on the
minority side heals, the deposed leader answers for a few hundred ms from the metadata image it had before the
cut (itself unfenced and leading, full ISRs) and, as the leader it thinks it is, ListOffsets with its old end
offset. A recovery judged on its answer alone, followed by end offsets read from it, stopped the drain short
of the writes the new leader acknowledged meanwhile: 350 "unseen-write" anomalies that no consumer could have
avoided (CI, seed 7, episode 4 of tests/chaos/test_chaos_runs.py::test_partitions).
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any, cast

import grpc
import pytest

from chaos.backends import Node, NodeState
from chaos.faults import BrokerView, Nemesis, PartitionView, assess, broker_view
from chaos.history import History
from chaos.runner import acknowledged_ends, drain_targets
from odradek import Admin
from proto import broker_pb2, broker_pb2_grpc
from tests.chaos.histories import Builder

TOPIC = "t"


def image(controller: int, unfenced: list[int], leader: int, epoch: int, isr: list[int], offset: int,
          partitions: int = 2) -> broker_pb2.MetadataResponse:  # fmt: skip
    """A Metadata answer: every partition led by ``leader`` in ``epoch`` with ``isr``, replicas 0, 1, 2."""
    response = broker_pb2.MetadataResponse(controller_id=controller, metadata_offset=offset)
    for b in unfenced:
        response.brokers.add(node_id=b, host="127.0.0.1", port=1)
    topic = response.topics.add(name=TOPIC)
    for p in range(partitions):
        topic.partitions.add(partition=p, leader=leader, leader_epoch=epoch, replicas=[0, 1, 2], isr=isr)
    return response


class FakeBroker(broker_pb2_grpc.BrokerServicer):
    def __init__(self, answer: broker_pb2.MetadataResponse) -> None:
        self.answer = answer

    def Metadata(self, request: Any, context: Any) -> Any:  # noqa: N802 (the gRPC method's name)
        return self.answer


class FakeBackend:
    """Just ``nodes()``: what :meth:`Nemesis.healthy` asks of a backend."""

    def __init__(self, addresses: list[str]) -> None:
        self.addresses = addresses

    def nodes(self) -> list[Node]:
        return [Node("broker", i, a, NodeState.RUNNING) for i, a in enumerate(self.addresses)]


@pytest.fixture
def brokers() -> Iterator[tuple[list[FakeBroker], list[str]]]:
    fakes = [FakeBroker(broker_pb2.MetadataResponse()) for _ in range(3)]
    servers, addresses = [], []
    for fake in fakes:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        broker_pb2_grpc.add_BrokerServicer_to_server(fake, server)  # type: ignore[no-untyped-call]
        addresses.append(f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}")
        server.start()
        servers.append(server)
    try:
        yield fakes, addresses
    finally:
        for server in servers:
            server.stop(0).wait(5)


@pytest.fixture
def history(tmp_path: Path) -> Iterator[History]:
    h = History(tmp_path / "history.jsonl")
    try:
        yield h
    finally:
        h.close()


def nemesis(addresses: list[str], history: History) -> Nemesis:
    # healthy() asks every broker itself; the Admin is for the episodes' targets, not used here
    return Nemesis(FakeBackend(addresses), history, cast(Admin, None), TOPIC, 2, out=lambda _: None)


def test_a_deposed_leader_on_its_old_image_is_not_a_recovery(
    brokers: tuple[list[FakeBroker], list[str]], history: History
) -> None:
    """Broker 2 led in epoch 0 and was cut off with the active controller 2: its own image still shows the
    cluster whole. Brokers 0 and 1 know better (broker 0 leads in epoch 1, broker 2 fenced, then back in the
    ISR). Not recovered until broker 2 has caught up, although its view alone looks healthy."""
    fakes, addresses = brokers
    stale = image(controller=2, unfenced=[0, 1, 2], leader=2, epoch=0, isr=[0, 1, 2], offset=10)
    fakes[2].answer = stale
    fakes[0].answer = fakes[1].answer = image(0, [0, 1], 0, 1, [0, 1], offset=14)
    n = nemesis(addresses, history)
    assert n.healthy() == "broker-0 sees controller 0, fenced brokers [2]"
    fakes[0].answer = fakes[1].answer = image(0, [0, 1, 2], 0, 1, [0, 1, 2], offset=16)
    assert assess({"broker-2": broker_view(addresses[2], TOPIC)}, TOPIC, 2, [0, 1, 2]) is None  # alone: "healthy"
    assert n.healthy() == ("broker-1 sees t-0 led by 0 in epoch 1 (metadata offset 16), broker-2 by 2 in epoch 0 "
                           "(offset 10)")  # fmt: skip
    fakes[2].answer = image(0, [0, 1, 2], 0, 1, [0, 1, 2], offset=16)
    assert n.healthy() is None


def test_an_unreachable_broker_is_not_a_recovery(brokers: tuple[list[FakeBroker], list[str]], history: History) -> None:
    fakes, addresses = brokers
    for fake in fakes:
        fake.answer = image(0, [0, 1, 2], 0, 1, [0, 1, 2], offset=16)
    addresses[1] = "127.0.0.1:1"  # nothing listens there
    problem = nemesis(addresses, history).healthy()
    assert problem is not None
    assert problem.startswith("broker-1: Metadata: UNAVAILABLE"), problem


def view(leader: int = 0, epoch: int = 1, isr: tuple[int, ...] = (0, 1, 2), **fields: Any) -> BrokerView:
    parts = tuple(PartitionView(p, leader, epoch, isr, (0, 1, 2)) for p in range(2))
    return BrokerView(**{"controller_id": 0, "unfenced": frozenset({0, 1, 2}), "topic_error": "",
                         "partitions": parts, "metadata_offset": 16, **fields})  # fmt: skip


def test_assess_each_view_and_their_agreement() -> None:
    assert assess({"broker-0": view(), "broker-1": view(), "broker-2": view()}, TOPIC, 2, [0, 1, 2]) is None
    assert assess({"broker-0": view(controller_id=-1)}, TOPIC, 2, [0]) == (
        "broker-0 sees controller -1, fenced brokers []"
    )
    assert assess({"broker-0": view(isr=(0, 1))}, TOPIC, 2, [0, 1, 2]) == (
        "broker-0 sees t-0: leader 0, isr [0, 1], replicas [0, 1, 2]"
    )
    assert assess({"broker-0": view(leader=-1)}, TOPIC, 2, [0, 1, 2]) == (
        "broker-0 sees t-0: leader -1, isr [0, 1, 2], replicas [0, 1, 2]"
    )
    assert assess({"broker-0": view(partitions=())}, TOPIC, 2, [0]) == "broker-0 sees t with 0 partitions"
    assert assess({"broker-0": view(), "broker-1": view(epoch=2)}, TOPIC, 2, [0, 1, 2]) == (
        "broker-0 sees t-0 led by 0 in epoch 1 (metadata offset 16), broker-1 by 0 in epoch 2 (offset 16)"
    )


def test_the_drain_reaches_past_every_acknowledged_write() -> None:
    """The CI case: partition 0's end offset listed from the deposed leader was 947 while the new leader had
    acknowledged writes up to offset 1296; the consumers must be asked to read them."""
    h = Builder()
    h.send("producer-0", "a", 0, 946, 1.0, 1.1)
    h.send("producer-1", "b", 0, 1296, 2.0, 2.1)
    h.send("producer-1", "c", 0, None, 2.0, 2.1, outcome="unknown")
    h.send("producer-0", "d", 1, 40, 1.0, 1.1)
    acknowledged = acknowledged_ends(h.ops)
    assert acknowledged == {0: 1297, 1: 41}
    assert drain_targets({0: 947, 1: 45, 2: 0}, acknowledged) == {0: 1297, 1: 45, 2: 0}
