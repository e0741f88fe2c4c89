"""The leader's ISR thread (broker/isr_manager.py) against real partitions and a fake controller channel.

The controlled-shutdown stall of issue 16: the new leader proposed the shutting-down broker back into the
ISR (it was still fetching, caught up), the controller refused it (INELIGIBLE_REPLICA), and while the
proposal was pending the high watermark waited for that broker too (ISR4). The refusal then moved the high
watermark, but nothing woke the acks=all produce waiting for it: it answered REQUEST_TIMED_OUT.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.isr_manager import IsrManager
from broker.replica_manager import PendingAppend
from metadata.records import BrokerControlledShutdown
from proto import common_pb2
from proto import controller_pb2 as cpb
from tests.broker.conftest import BrokerHarness, batch

TOPIC = "t"


class FakeChannel:
    """The controller as the ISR thread sees it: ``call`` runs ``during`` (what other threads do while the
    request is on its way), records the request and answers ``error`` (or accepts)."""

    def __init__(self, error: str = "", during: Callable[[], None] | None = None) -> None:
        self.error = error
        self.during = during
        self.requests: list[cpb.AlterPartitionRequest] = []

    def call(self, method: str, request: Any, timeout_s: float, *, active: bool = True) -> Any:
        assert method == "AlterPartition"
        self.requests.append(request)
        if self.during is not None:
            self.during()
        if self.error:
            return cpb.AlterPartitionResponse(error=common_pb2.Error(code=self.error, message="refused"))
        return cpb.AlterPartitionResponse(
            leader=request.broker_id, leader_epoch=request.leader_epoch,
            partition_epoch=request.partition_epoch + 1, isr=list(request.new_isr),
        )  # fmt: skip


@pytest.fixture
def leader(tmp_path: Path) -> Iterator[BrokerHarness]:
    """Broker 0 leads t-0: replicas 0, 1, 2, ISR {0, 1}, min.insync.replicas=2; 2 is caught up, outside."""
    h = BrokerHarness(tmp_path / "broker")
    try:
        h.register(1)
        h.register(2)
        h.create_topic(TOPIC, replicas=[0, 1, 2], isr=[0, 1], leader=0, configs={"min.insync.replicas": "2"})
        partition = h.partition(TOPIC)
        partition.read(0, 1024, replica_id=1, replica_epoch=_epoch(h, 1))
        partition.read(0, 1024, replica_id=2, replica_epoch=_epoch(h, 2))
        yield h
    finally:
        h.close()


def _epoch(h: BrokerHarness, broker_id: int) -> int:
    broker = h.image.broker(broker_id)
    assert broker is not None
    return broker.broker_epoch


def test_a_refused_expansion_wakes_the_produce_it_held_back(leader: BrokerHarness) -> None:
    """ISR4 + the wake after every answer: the produce completes when the refusal moves the high watermark."""
    partition = leader.partition(TOPIC)
    waiting: list[PendingAppend] = []

    def meanwhile() -> None:  # the expansion with 2 is pending: the produce and 1's fetch arrive
        waiting.append(leader.replicas.append_records([(partition, batch())], -1, 30_000))
        partition.read(1, 1024, replica_id=1, replica_epoch=_epoch(leader, 1))
        assert partition.high_watermark == 0, "ISR4: the pending expansion holds the high watermark for 2"

    channel = FakeChannel("INELIGIBLE_REPLICA", meanwhile)
    manager = IsrManager(0, leader.replicas, channel, leader.config, lambda: 1)  # type: ignore[arg-type]
    assert manager.run_once() == 0
    assert [list(r.new_isr) for r in channel.requests] == [[0, 1, 2]]
    assert partition.high_watermark == 1  # the refusal ended the pending expansion: {0, 1} have offset 0
    assert leader.replicas.produce_purgatory.size == 0, "the produce was woken, not left to time out"
    assert [r.replication_error for r in waiting[0].wait()] == [""]


def test_isr8_no_expansion_with_a_broker_in_controlled_shutdown(leader: BrokerHarness) -> None:
    """KIP-841: the metadata says 2 is shutting down, so the leader does not propose it (it still fetches)."""
    leader.apply(BrokerControlledShutdown(2, _epoch(leader, 2)))
    channel = FakeChannel()
    manager = IsrManager(0, leader.replicas, channel, leader.config, lambda: 1, leader.metadata)  # type: ignore[arg-type]
    assert manager.run_once() == 0
    assert channel.requests == []


def test_isr8_no_expansion_with_another_life_of_the_broker(leader: BrokerHarness) -> None:
    """ISR8 with ISR7: progress reported by a life the metadata no longer has does not propose it."""
    leader.register(2)  # a new registration: 2's fetch above came from its previous life
    channel = FakeChannel()
    manager = IsrManager(0, leader.replicas, channel, leader.config, lambda: 1, leader.metadata)  # type: ignore[arg-type]
    assert manager.run_once() == 0
    assert channel.requests == []
    leader.partition(TOPIC).read(0, 1024, replica_id=2, replica_epoch=_epoch(leader, 2))  # the new life fetches
    assert manager.run_once() == 1
    assert [list(r.new_isr) for r in channel.requests] == [[0, 1, 2]]
