"""The OffsetsForLeaderEpoch handler (replication/truncation.py TR1, epoch_cache.py EC2), without gRPC."""

from __future__ import annotations

from broker.handlers import offsets_for_leader_epoch
from log.record import build_batch
from proto import broker_pb2 as pb
from tests.broker.conftest import START_MS, BrokerHarness
from tests.broker.test_fetch_handler import append


def ask(harness: BrokerHarness, epoch: int, current: int = -1, topic: str = "t") -> pb.OffsetForLeaderPartitionResult:
    request = pb.OffsetsForLeaderEpochRequest(replica_id=1, partitions=[
        pb.OffsetForLeaderPartition(topic=topic, partition=0, current_leader_epoch=current, leader_epoch=epoch)
    ])  # fmt: skip
    (answer,) = offsets_for_leader_epoch.handle(harness.ctx, request).partitions
    return answer


def test_tr1_offsets_for_leader_epoch_handler(harness: BrokerHarness) -> None:
    harness.create_topic("t")
    append(harness, build_batch([b"a", b"b"], timestamp_ms=START_MS))
    epoch = harness.partition("t").leader_epoch
    latest = ask(harness, epoch, current=epoch)
    assert (latest.leader_epoch, latest.end_offset, latest.error.code) == (epoch, 2, "")
    assert ask(harness, epoch, current=epoch + 1).error.code == "UNKNOWN_LEADER_EPOCH"
    assert ask(harness, epoch, topic="nope").error.code == "UNKNOWN_TOPIC_OR_PARTITION"
