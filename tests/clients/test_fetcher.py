"""Pure pieces of the consumer and the network layer: CompletedFetch, metadata snapshots, backoff, exports."""

from __future__ import annotations

import random
import subprocess
import sys

from log.record import BatchBuilder, build_batch
from odradek.backoff import ExponentialBackoff
from odradek.fetcher import CompletedFetch, PartitionState
from odradek.net.metadata import Cluster
from odradek.types import ConsumerRecord, TopicPartition
from proto import broker_pb2, common_pb2

T0 = TopicPartition("t", 0)


def batch(base_offset: int, count: int, *, log_append_time: bool = False, control: bool = False) -> bytes:
    if control:
        builder = BatchBuilder(
            base_offset=base_offset, producer_id=1, producer_epoch=0, is_transactional=True, is_control=True
        )
        builder.append(5, b"\x00\x00\x00\x00", b"")
        return builder.build()
    builder = BatchBuilder(base_offset=base_offset, log_append_time=log_append_time)
    for i in range(count):
        builder.append(100 + i, None, b"%d" % (base_offset + i), [("h", b"x")])
    return builder.build()


def take_all(data: bytes, position: int, step: int = 1000) -> tuple[list[ConsumerRecord], int]:
    fetch = CompletedFetch(T0, data, 1 << 20)
    out: list[ConsumerRecord] = []
    while not fetch.exhausted:
        position = fetch.take(position, step, out)
    return out, position


def test_takes_records_in_steps_and_moves_the_position() -> None:
    data = batch(0, 5) + batch(5, 5)
    fetch = CompletedFetch(T0, data, 1 << 20)
    out: list[ConsumerRecord] = []
    assert fetch.take(0, 3, out) == 3
    assert fetch.take(3, 4, out) == 7
    assert fetch.take(7, 100, out) == 10
    assert fetch.exhausted
    assert [r.offset for r in out] == list(range(10))
    assert out[0] == ConsumerRecord("t", 0, 0, 100, None, b"0", (("h", b"x"),), 0)


def test_records_below_the_position_are_dropped() -> None:
    out, position = take_all(batch(0, 10), 4)
    assert [r.offset for r in out] == [4, 5, 6, 7, 8, 9]
    assert position == 10


def test_batches_wholly_below_the_position_are_skipped() -> None:
    out, position = take_all(batch(0, 5) + batch(5, 5), 7)
    assert [r.offset for r in out] == [7, 8, 9]
    assert position == 10


def test_control_batches_are_skipped_but_move_the_position() -> None:
    out, position = take_all(batch(0, 2) + batch(2, 1, control=True), 0)
    assert [r.offset for r in out] == [0, 1]
    assert position == 3


def test_log_append_time_is_reported() -> None:
    out, _ = take_all(batch(0, 2, log_append_time=True), 0)
    assert {r.timestamp_type for r in out} == {1}
    assert {r.timestamp for r in out} == {101}  # the batch's max timestamp, as the broker stamped it


def test_a_trailing_partial_batch_is_ignored() -> None:
    data = batch(0, 3) + batch(3, 3)
    out, position = take_all(data[:-10], 0)
    assert [r.offset for r in out] == [0, 1, 2]
    assert position == 3


def test_a_corrupt_batch_stops_the_answer_with_an_error() -> None:
    bad = bytearray(batch(3, 3))
    bad[-1] ^= 1
    fetch = CompletedFetch(T0, batch(0, 3) + bytes(bad), 1 << 20)
    out: list[ConsumerRecord] = []
    assert fetch.take(0, 100, out) == 3
    assert fetch.exhausted
    assert getattr(fetch.error, "code", None) == "CORRUPT_MESSAGE"
    assert [r.offset for r in out] == [0, 1, 2]


def test_compressed_batches_decode() -> None:
    data = build_batch([b"a", b"b", b"c"], timestamp_ms=7, compression=4, base_offset=10)
    out, position = take_all(data, 11)
    assert [(r.offset, r.value) for r in out] == [(11, b"b"), (12, b"c")]
    assert position == 13


def test_partition_state_seek_and_reset_renew_the_generation() -> None:
    state = PartitionState(T0, 100)
    first = state.generation
    state.seek(5)
    assert (state.position, state.fetch_offset) == (5, 5)
    assert state.generation != first
    second = state.generation
    state.request_reset("earliest")
    assert state.position is None
    assert state.reset == "earliest"
    assert state.generation != second
    assert PartitionState(T0, 100).generation not in (first, second, state.generation)


def test_cluster_snapshot_from_a_metadata_response() -> None:
    response = broker_pb2.MetadataResponse(
        cluster_id="c",
        controller_id=9,
        brokers=[
            broker_pb2.BrokerNode(node_id=1, host="h1", port=1),
            broker_pb2.BrokerNode(node_id=2, host="h2", port=2),
            broker_pb2.BrokerNode(node_id=3, host="h3", port=3, fenced=True),
        ],
        topics=[
            broker_pb2.TopicMetadata(
                name="t",
                partitions=[
                    broker_pb2.PartitionMetadata(partition=1, leader=2, leader_epoch=4, replicas=[2, 1], isr=[2]),
                    broker_pb2.PartitionMetadata(partition=0, leader=1, replicas=[1, 2], isr=[1, 2]),
                    broker_pb2.PartitionMetadata(partition=2, leader=3, replicas=[3]),
                    broker_pb2.PartitionMetadata(
                        partition=3, leader=-1, error=common_pb2.Error(code="LEADER_NOT_AVAILABLE")
                    ),
                ],
            ),
            broker_pb2.TopicMetadata(name="gone", error=common_pb2.Error(code="UNKNOWN_TOPIC_OR_PARTITION")),
        ],
    )
    cluster = Cluster.from_response(response, 5.0)
    assert set(cluster.brokers) == {1, 2}
    assert cluster.address(2) == "h2:2"
    assert cluster.leader(TopicPartition("t", 0)) == 1
    assert cluster.leader(TopicPartition("t", 2)) == -1  # fenced leader: not usable
    assert cluster.leader(TopicPartition("t", 3)) == -1
    assert cluster.leader(TopicPartition("t", 9)) == -1
    assert cluster.topics["t"].available == (0, 1)
    assert [p.partition for p in cluster.topics["t"].partitions] == [0, 1, 2, 3]
    assert cluster.partition_count("t") == 4
    assert cluster.partition_count("gone") is None
    assert cluster.topics["gone"].error == "UNKNOWN_TOPIC_OR_PARTITION"
    info = cluster.partition(TopicPartition("t", 1))
    assert info is not None
    assert (info.leader_epoch, info.replicas, info.isr) == (4, (2, 1), (2,))


def test_exponential_backoff() -> None:
    backoff = ExponentialBackoff(100, 1000, jitter=0.0)
    assert [backoff.backoff_ms(n) for n in range(6)] == [100, 200, 400, 800, 1000, 1000]
    jittered = ExponentialBackoff(100, 1000, rng=random.Random(1))
    assert all(80 <= jittered.backoff_ms(0) <= 120 for _ in range(100))
    assert ExponentialBackoff(0, 1000).backoff_ms(5) == 0.0
    assert ExponentialBackoff(100, 50, jitter=0.0).backoff_ms(3) == 100  # a maximum below the initial is raised


def test_odradek_exports_the_interface_and_loads_grpc_lazily() -> None:
    code = (
        "import sys, odradek; assert 'grpc' not in sys.modules; "
        "from odradek import Producer, Consumer, Admin, NewTopic, TopicPartition, RecordMetadata, ConsumerRecord; "
        "assert 'grpc' in sys.modules; assert odradek.__version__; "
        "assert TopicPartition('a', 1) < TopicPartition('b', 0); assert hash(TopicPartition('a', 1))"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
