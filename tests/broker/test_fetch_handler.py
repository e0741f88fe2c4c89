"""The Fetch handler against real logs: records unchanged, limits, errors, and the long poll's completion cases
(broker/delayed_fetch.py A-E)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import pytest

from broker.handlers import fetch, produce
from log.record import build_batch, iter_batches
from proto import broker_pb2 as pb
from replication.partition import Partition
from tests.broker.cluster import wait_for
from tests.broker.conftest import START_MS, BrokerHarness, batch
from tests.broker.test_produce_handler import answer, produce_request


def fetch_request(
    targets: Sequence[tuple[str, int, int]], *, max_wait_ms: int = 0, min_bytes: int = 1, max_bytes: int = 1 << 20,
    partition_max_bytes: int = 1 << 20, replica_id: int = -1, epoch: int = -1, replica_epoch: int = -1,
) -> pb.FetchRequest:  # fmt: skip
    request = pb.FetchRequest(replica_id=replica_id, max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes,
                              replica_epoch=replica_epoch)  # fmt: skip
    for topic, partition, offset in targets:
        request.topics.add(name=topic).partitions.add(
            partition=partition, fetch_offset=offset, partition_max_bytes=partition_max_bytes,
            current_leader_epoch=epoch,
        )  # fmt: skip
    return request


def follower_request(harness: BrokerHarness, offset: int, topic: str = "t") -> pb.FetchRequest:
    """Broker 1's fetch of ``topic``-0 from ``offset``, with its current broker epoch."""
    return fetch_request([(topic, 0, offset)], replica_id=1, replica_epoch=harness.broker_epoch(1))


def part(response: pb.FetchResponse, topic: str = "t", partition: int = 0) -> pb.FetchPartitionResponse:
    for t in response.topics:
        for p in t.partitions:
            if t.name == topic and p.partition == partition:
                return p
    raise AssertionError(f"no {topic}-{partition} in the response")


def append(harness: BrokerHarness, records: bytes, topic: str = "t", partition: int = 0) -> int:
    result = answer(produce.handle(harness.ctx, produce_request(topic, [(partition, records)])), partition)
    assert not result.error.code, result.error
    return result.base_offset


def test_records_come_back_byte_identical(harness: BrokerHarness) -> None:
    harness.create_topic("t")
    epoch = harness.partition("t").leader_epoch
    first = build_batch([b"a", b"b"], timestamp_ms=START_MS, base_offset=0, partition_leader_epoch=epoch)
    second = build_batch([b"c"], keys=[b"k"], timestamp_ms=START_MS, base_offset=2, partition_leader_epoch=epoch)
    append(harness, first)
    append(harness, second)
    result = part(fetch.handle(harness.ctx, fetch_request([("t", 0, 0)])))
    assert not result.error.code
    assert result.records == first + second
    assert (result.high_watermark, result.log_start_offset, result.log_end_offset) == (3, 0, 3)
    assert result.last_stable_offset == 3
    assert result.leader_epoch == epoch


def test_errors_per_partition(harness: BrokerHarness) -> None:
    harness.register(1)
    harness.create_topic("t")
    harness.create_topic("elsewhere", replicas=[1])
    append(harness, batch([b"a", b"b"]))
    response = fetch.handle(harness.ctx, fetch_request([("t", 0, 5), ("nope", 0, 0), ("elsewhere", 0, 0), ("t", 0, 0)]))
    out_of_range = response.topics[0].partitions[0]
    assert out_of_range.error.code == "OFFSET_OUT_OF_RANGE"
    assert (out_of_range.log_start_offset, out_of_range.log_end_offset, out_of_range.high_watermark) == (0, 2, 2)
    assert part(response, "nope").error.code == "UNKNOWN_TOPIC_OR_PARTITION"
    assert part(response, "elsewhere").error.code == "NOT_LEADER_OR_FOLLOWER"
    assert response.topics[0].partitions[1].records  # the good partition is still served


def test_leader_epoch_checks(harness: BrokerHarness) -> None:
    harness.create_topic("t")
    epoch = harness.partition("t").leader_epoch
    assert not part(fetch.handle(harness.ctx, fetch_request([("t", 0, 0)], epoch=epoch))).error.code
    harness.register(1)
    harness.change("t", replicas=[0, 1])
    harness.change("t", isr=[0, 1])
    harness.change("t", leader=1)
    harness.change("t", leader=0)  # back to broker 0, two epochs later
    assert harness.partition("t").leader_epoch == epoch + 2
    assert part(fetch.handle(harness.ctx, fetch_request([("t", 0, 0)], epoch=epoch))).error.code == (
        "FENCED_LEADER_EPOCH"
    )
    assert part(fetch.handle(harness.ctx, fetch_request([("t", 0, 0)], epoch=epoch + 3))).error.code == (
        "UNKNOWN_LEADER_EPOCH"
    )


def test_limits_and_the_first_batch_rule(harness: BrokerHarness) -> None:
    harness.create_topic("t", partitions=2)
    big = batch([b"x" * 1000])
    for _ in range(3):
        append(harness, big, partition=0)
        append(harness, big, partition=1)
    size = len(big)
    # partition_max_bytes below one batch: the first partition still gets one whole batch, the next none.
    response = fetch.handle(harness.ctx, fetch_request([("t", 0, 0), ("t", 1, 0)], partition_max_bytes=10))
    assert len(part(response, "t", 0).records) == size
    assert part(response, "t", 1).records == b""
    # max_bytes for two batches and a half: whole batches only, the budget spans partitions.
    response = fetch.handle(harness.ctx, fetch_request([("t", 0, 0), ("t", 1, 0)], max_bytes=size * 5 // 2))
    assert len(part(response, "t", 0).records) == 2 * size
    assert part(response, "t", 1).records == b""
    # no per-partition limit (0): only max_bytes counts.
    response = fetch.handle(harness.ctx, fetch_request([("t", 0, 0), ("t", 1, 0)], partition_max_bytes=0))
    assert len(part(response, "t", 0).records) == len(part(response, "t", 1).records) == 3 * size


def test_consumers_see_only_committed_records_followers_everything(harness: BrokerHarness) -> None:
    harness.register(1)
    harness.create_topic("t", replicas=[0, 1], isr=[0, 1])
    append(harness, batch([b"a"]))
    consumer = part(fetch.handle(harness.ctx, fetch_request([("t", 0, 0)])))
    assert consumer.records == b""
    assert consumer.high_watermark == 0
    assert consumer.log_end_offset == 1
    follower = part(fetch.handle(harness.ctx, follower_request(harness, 0)))
    assert [h.base_offset for _, h in iter_batches(follower.records)] == [0]
    part(fetch.handle(harness.ctx, follower_request(harness, 1)))  # reports position 1
    assert part(fetch.handle(harness.ctx, fetch_request([("t", 0, 0)]))).records == follower.records


@pytest.mark.parametrize("replica_epoch", ["stale", "missing", "unregistered"])
def test_a_fetch_posing_as_a_follower_moves_nothing(harness: BrokerHarness, replica_epoch: str) -> None:
    """A fetch that claims replica id 1 must carry broker 1's current broker epoch (KIP-903's ReplicaEpoch): else
    STALE_BROKER_EPOCH, no records, and neither the follower's position nor the high watermark moves."""
    harness.register(1)
    harness.create_topic("t", replicas=[0, 1], isr=[0, 1])
    append(harness, batch([b"a"]))
    epoch = {"stale": harness.broker_epoch(1) - 1, "missing": -1, "unregistered": harness.broker_epoch(1)}
    replica_id = 7 if replica_epoch == "unregistered" else 1
    request = fetch_request([("t", 0, 1)], replica_id=replica_id, replica_epoch=epoch[replica_epoch])
    response = fetch.handle(harness.ctx, request)
    assert response.error.code == "STALE_BROKER_EPOCH"
    answer = part(response)
    assert answer.error.code == "STALE_BROKER_EPOCH"
    assert f"broker {replica_id}" in answer.error.message
    assert answer.records == b""
    assert harness.partition("t").high_watermark == 0
    assert harness.partition("t").follower_offsets() == {1: -1}
    part(fetch.handle(harness.ctx, follower_request(harness, 1)))  # the real follower, with its epoch
    assert harness.partition("t").high_watermark == 1


def background_fetch(
    harness: BrokerHarness, request: pb.FetchRequest
) -> tuple[threading.Thread, list[pb.FetchResponse]]:
    results: list[pb.FetchResponse] = []
    thread = threading.Thread(target=lambda: results.append(fetch.handle(harness.ctx, request)))
    thread.start()
    wait_for(lambda: harness.replicas.fetch_purgatory.size == 1 or results, 10, "the fetch to wait")
    return thread, results


def test_long_poll_returns_when_data_arrives_and_not_before(harness: BrokerHarness) -> None:
    """D: the fetch waits (still pending when checked), and answers with the data once it is appended."""
    harness.create_topic("t")
    thread, results = background_fetch(harness, fetch_request([("t", 0, 0)], max_wait_ms=60_000))
    assert not results
    assert harness.replicas.fetch_purgatory.size == 1
    records = batch([b"late"])
    append(harness, records)
    thread.join(10)
    assert results, "the fetch did not return after the data arrived"
    assert part(results[0]).records[61:] == records[61:]


def test_long_poll_waits_for_min_bytes(harness: BrokerHarness) -> None:
    harness.create_topic("t")
    small = batch([b"s"])
    thread, results = background_fetch(harness, fetch_request([("t", 0, 0)], max_wait_ms=60_000,
                                                              min_bytes=3 * len(small)))  # fmt: skip
    append(harness, small)
    append(harness, small)
    assert thread.is_alive(), "answered below min_bytes"
    assert not results
    append(harness, small)
    thread.join(10)
    assert results
    assert len(part(results[0]).records) == 3 * len(small)


def test_long_poll_expires_after_max_wait(harness: BrokerHarness) -> None:
    """E: nothing arrives: an empty answer after max_wait_ms."""
    harness.create_topic("t")
    response = fetch.handle(harness.ctx, fetch_request([("t", 0, 0)], max_wait_ms=50))
    assert part(response).records == b""
    assert not part(response).error.code
    assert harness.replicas.fetch_purgatory.size == 0


def test_long_poll_completes_when_leadership_moves(harness: BrokerHarness) -> None:
    """A/B: a leadership change answers the waiting fetch, which then reports NOT_LEADER_OR_FOLLOWER."""
    harness.register(1)
    harness.create_topic("t", replicas=[0, 1])
    thread, results = background_fetch(harness, fetch_request([("t", 0, 0)], max_wait_ms=60_000))
    harness.change("t", leader=1)
    thread.join(10)
    assert results
    assert part(results[0]).error.code == "NOT_LEADER_OR_FOLLOWER"


def test_long_poll_completes_when_the_topic_is_deleted(harness: BrokerHarness) -> None:
    harness.create_topic("t")
    thread, results = background_fetch(harness, fetch_request([("t", 0, 0)], max_wait_ms=60_000))
    harness.delete_topic("t")
    thread.join(10)
    assert results
    assert part(results[0]).error.code == "UNKNOWN_TOPIC_OR_PARTITION"


def test_a_consumer_long_poll_waits_for_the_high_watermark(harness: BrokerHarness) -> None:
    """D for consumers: an append the ISR does not have yet is not data for them; the follower's progress is."""
    harness.register(1)
    harness.create_topic("t", replicas=[0, 1], isr=[0, 1])
    thread, results = background_fetch(harness, fetch_request([("t", 0, 0)], max_wait_ms=60_000))
    append(harness, batch([b"a"]))
    fetch.handle(harness.ctx, follower_request(harness, 0))  # the follower reads at 0
    assert thread.is_alive(), "a consumer saw uncommitted data"
    assert not results
    fetch.handle(harness.ctx, follower_request(harness, 1))  # HW -> 1
    thread.join(10)
    assert results
    assert part(results[0]).records


def test_the_high_watermark_answers_the_consumers_before_the_acks_all_producer(harness: BrokerHarness) -> None:
    """When a follower's fetch moves the high watermark, the consumer fetches waiting for it complete before the
    acks=all produce of the same records (``fetch.high_watermark_moved``): the record reaches its consumers first,
    its producer's answer right after."""
    harness.register(1)
    harness.create_topic("t", replicas=[0, 1], isr=[0, 1])
    order: list[str] = []
    consumer = fetch.begin_grpc(harness.ctx, fetch_request([("t", 0, 0)], max_wait_ms=60_000))
    assert isinstance(consumer, fetch.PendingFetch)
    consumer.op.add_done_callback(lambda: order.append("consumer fetch"))
    started = produce.begin(harness.ctx, produce_request("t", batch([b"a"]), acks=-1, timeout_ms=60_000))
    assert isinstance(started, produce.PendingProduce)
    operation = started.pending.operation
    assert operation is not None
    operation.add_done_callback(lambda: order.append("produce"))
    fetch.handle(harness.ctx, follower_request(harness, 0))  # the follower reads the record
    assert order == []  # neither is committed yet
    fetch.handle(harness.ctx, follower_request(harness, 1))  # HW -> 1
    assert order == ["consumer fetch", "produce"]
    assert part(fetch.finish_grpc(harness.ctx, consumer)).records
    assert not answer(produce.finish(started)).error.code


def test_a_woken_fetch_says_how_much_is_ready_to_read(harness: BrokerHarness) -> None:
    """``DelayedFetch.ready_bytes``: the bytes case D counted (the gRPC service reads that much on its event loop
    when it is at most ``fetch.inline.read.max.bytes``); 0 when the timer completed the fetch."""
    harness.create_topic("t")
    started = fetch.begin_grpc(harness.ctx, fetch_request([("t", 0, 0)], max_wait_ms=60_000))
    assert isinstance(started, fetch.PendingFetch)
    assert not started.op.is_completed
    records = batch([b"x" * 100, b"y" * 100])
    append(harness, records)
    assert started.op.wait(10)
    assert started.op.ready_bytes == len(records)
    assert part(fetch.finish_grpc(harness.ctx, started)).records == part(
        fetch.handle(harness.ctx, fetch_request([("t", 0, 0)]))).records  # fmt: skip

    expiring = fetch.begin_grpc(harness.ctx, fetch_request([("t", 0, 2)], max_wait_ms=30))
    assert isinstance(expiring, fetch.PendingFetch)
    assert expiring.op.wait(10)
    assert expiring.op.expired
    assert expiring.op.ready_bytes == 0


def test_nothing_to_read_is_a_caught_up_fetch(harness: BrokerHarness) -> None:
    """``fetch.nothing_to_read`` (the gRPC service then runs the first read on its event loop): followers at the
    log end, consumers at the high watermark; anything else, or an unknown partition, is not."""
    harness.register(1)
    harness.create_topic("t", replicas=[0, 1], isr=[0, 1])
    append(harness, batch([b"a", b"b"]))  # log end 2, high watermark 0 (the follower has nothing yet)
    assert fetch.nothing_to_read(harness.ctx, follower_request(harness, 2))
    assert not fetch.nothing_to_read(harness.ctx, follower_request(harness, 1))
    assert fetch.nothing_to_read(harness.ctx, fetch_request([("t", 0, 0)]))  # consumers: nothing below the HW
    fetch.handle(harness.ctx, follower_request(harness, 2))  # the follower has it all: HW 2
    assert not fetch.nothing_to_read(harness.ctx, fetch_request([("t", 0, 0)]))
    assert fetch.nothing_to_read(harness.ctx, fetch_request([("t", 0, 2)]))
    assert not fetch.nothing_to_read(harness.ctx, fetch_request([("t", 0, 2), ("missing", 0, 0)]))
    assert not fetch.nothing_to_read(harness.ctx, fetch_request([]))
    many = fetch_request([("t", 0, 2)] * (fetch.INLINE_CHECK_MAX_PARTITIONS + 1))
    assert not fetch.nothing_to_read(harness.ctx, many)


@pytest.fixture
def partition_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The fetch offsets of every ``Partition.read`` from now on (the real read runs)."""
    offsets: list[int] = []
    real = Partition.read

    def counted(self: Partition, fetch_offset: int, *args: Any, **kwargs: Any) -> Any:
        offsets.append(fetch_offset)
        return real(self, fetch_offset, *args, **kwargs)

    monkeypatch.setattr(Partition, "read", counted)
    return offsets


def test_a_caught_up_consumer_waits_without_a_first_read(harness: BrokerHarness, partition_reads: list[int]) -> None:
    """``fetch.skips_first_read``: a consumer at the high watermark that will wait is not read before it waits
    (that read finds nothing); the read after the wait answers it. One below the high watermark is read."""
    harness.create_topic("t")
    append(harness, batch([b"a"]))
    started = fetch.begin_grpc(harness.ctx, fetch_request([("t", 0, 1)], max_wait_ms=60_000))
    assert isinstance(started, fetch.PendingFetch)
    assert partition_reads == []
    records = batch([b"b"])
    append(harness, records)
    assert started.op.wait(10)
    result = part(fetch.finish_grpc(harness.ctx, started))
    assert partition_reads == [1]
    assert (result.records[61:], result.high_watermark, result.error.code) == (records[61:], 2, "")

    behind = fetch.begin_grpc(harness.ctx, fetch_request([("t", 0, 0)], max_wait_ms=60_000))
    assert isinstance(behind, pb.FetchResponse)  # records at once: one read
    assert partition_reads == [1, 0]
    assert len(part(behind).records) > len(records)


def test_a_caught_up_fetch_with_an_error_is_read_and_answered_at_once(
    harness: BrokerHarness, partition_reads: list[int]
) -> None:  # fmt: skip
    harness.create_topic("t")
    epoch = harness.partition("t").leader_epoch
    started = fetch.begin_grpc(harness.ctx, fetch_request([("t", 0, 0)], max_wait_ms=60_000, epoch=epoch + 1))
    assert isinstance(started, pb.FetchResponse)
    assert part(started).error.code == "UNKNOWN_LEADER_EPOCH"
    assert partition_reads == [0]
    assert harness.replicas.fetch_purgatory.size == 0


def test_a_caught_up_follower_moves_the_high_watermark_without_a_read(
    harness: BrokerHarness, partition_reads: list[int]
) -> None:  # fmt: skip
    """A follower's fetch at the log end that will wait is recorded without a read (HW4): the high watermark
    moves and completes the acks=all produce and the consumer waiting for it; the fetch itself waits for the
    next records."""
    harness.register(1)
    harness.create_topic("t", replicas=[0, 1], isr=[0, 1])
    consumer = fetch.begin_grpc(harness.ctx, fetch_request([("t", 0, 0)], max_wait_ms=60_000))
    assert isinstance(consumer, fetch.PendingFetch)
    started = produce.begin(harness.ctx, produce_request("t", batch([b"a"]), acks=-1, timeout_ms=60_000))
    assert isinstance(started, produce.PendingProduce)
    fetch.handle(harness.ctx, follower_request(harness, 0))  # the follower reads the record (a read)
    assert partition_reads == [0]
    waiting = follower_request(harness, 1)
    waiting.max_wait_ms = 60_000
    follower = fetch.begin_grpc(harness.ctx, waiting)
    assert isinstance(follower, fetch.PendingFetch)
    assert partition_reads == [0]  # no read for the report ...
    assert harness.partition("t").high_watermark == 1  # ... which moved the high watermark
    assert consumer.op.is_completed
    assert not answer(produce.finish(started)).error.code
    assert not follower.op.is_completed
    append(harness, batch([b"b"]))
    assert follower.op.wait(10)
    assert part(fetch.finish_grpc(harness.ctx, follower)).records
    assert part(fetch.finish_grpc(harness.ctx, consumer)).records
