"""The Produce handler against real logs: every error path, acks 0/1/all, and that bad input changes nothing."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from broker.handlers import fetch, produce
from log.record import build_batch
from proto import broker_pb2 as pb
from tests.broker.cluster import wait_for
from tests.broker.conftest import START_MS, BrokerHarness, batch


def produce_request(
    topic: str, records: bytes | Sequence[tuple[int, bytes]], *, acks: int = 1, timeout_ms: int = 5000
) -> pb.ProduceRequest:
    items = [(0, records)] if isinstance(records, bytes) else list(records)
    return pb.ProduceRequest(
        acks=acks,
        timeout_ms=timeout_ms,
        topics=[pb.ProduceTopicData(name=topic, partitions=[pb.ProducePartitionData(partition=p, records=r)
                                                            for p, r in items])],
    )  # fmt: skip


def answer(response: pb.ProduceResponse, partition: int = 0) -> pb.ProducePartitionResponse:
    return next(p for p in response.topics[0].partitions if p.partition == partition)


def test_acks_1_and_0_answer_after_the_leader_append(harness: BrokerHarness) -> None:
    harness.create_topic("t")
    first = answer(produce.handle(harness.ctx, produce_request("t", batch([b"a", b"b"]), acks=1)))
    second = answer(produce.handle(harness.ctx, produce_request("t", batch([b"c"]), acks=0)))
    assert not first.error.code
    assert not second.error.code
    assert (first.base_offset, second.base_offset) == (0, 2)
    assert first.log_append_time_ms == -1
    assert first.log_start_offset == 0
    assert harness.partition("t").log_end_offset == 3


def test_acks_all_with_the_isr_only_the_leader_completes_at_once(harness: BrokerHarness) -> None:
    harness.create_topic("t")
    result = answer(produce.handle(harness.ctx, produce_request("t", batch(), acks=-1, timeout_ms=60_000)))
    assert not result.error.code
    assert result.base_offset == 0
    assert harness.replicas.produce_purgatory.size == 0


def test_unknown_topic_or_partition(harness: BrokerHarness) -> None:
    harness.create_topic("t")
    assert answer(produce.handle(harness.ctx, produce_request("nope", batch()))).error.code == (
        "UNKNOWN_TOPIC_OR_PARTITION"
    )
    response = produce.handle(harness.ctx, produce_request("t", [(5, batch())]))
    assert answer(response, 5).error.code == "UNKNOWN_TOPIC_OR_PARTITION"


def test_not_leader_or_follower(harness: BrokerHarness) -> None:
    harness.register(1)
    harness.create_topic("led-elsewhere", replicas=[1, 0], leader=1)
    harness.create_topic("not-here", replicas=[1])
    for topic in ("led-elsewhere", "not-here"):
        result = answer(produce.handle(harness.ctx, produce_request(topic, batch())))
        assert result.error.code == "NOT_LEADER_OR_FOLLOWER", topic
        assert result.base_offset == -1


def test_invalid_required_acks_appends_nothing(harness: BrokerHarness) -> None:
    harness.create_topic("t")
    result = answer(produce.handle(harness.ctx, produce_request("t", batch(), acks=2)))
    assert result.error.code == "INVALID_REQUIRED_ACKS"
    assert harness.partition("t").log_end_offset == 0


def test_message_too_large(harness: BrokerHarness) -> None:
    harness.create_topic("t", configs={"max.message.bytes": "200"})
    result = answer(produce.handle(harness.ctx, produce_request("t", batch([b"x" * 500]))))
    assert result.error.code == "MESSAGE_TOO_LARGE"
    assert harness.partition("t").log_end_offset == 0


def test_corrupt_batches_change_nothing_and_do_not_stop_other_partitions(harness: BrokerHarness) -> None:
    harness.create_topic("t", partitions=2)
    broken = bytearray(batch([b"hello"]))
    broken[-2] ^= 0x55  # the CRC no longer matches
    response = produce.handle(harness.ctx, produce_request("t", [(0, bytes(broken)), (1, batch())]))
    assert answer(response, 0).error.code == "CORRUPT_MESSAGE"
    assert not answer(response, 1).error.code
    for garbage in (b"\x00" * 7, b"not a record batch at all, just bytes" * 3, b""):
        code = answer(produce.handle(harness.ctx, produce_request("t", garbage))).error.code
        assert code in ("CORRUPT_MESSAGE", "INVALID_RECORD"), (garbage, code)
    assert harness.partition("t", 0).log_end_offset == 0
    assert harness.partition("t", 1).log_end_offset == 1


def test_not_enough_replicas(harness: BrokerHarness) -> None:
    harness.register(1)
    harness.create_topic("t", replicas=[0, 1], isr=[0], configs={"min.insync.replicas": "2"})
    result = answer(produce.handle(harness.ctx, produce_request("t", batch(), acks=-1)))
    assert result.error.code == "NOT_ENOUGH_REPLICAS"
    assert harness.partition("t").log_end_offset == 0
    assert not answer(produce.handle(harness.ctx, produce_request("t", batch(), acks=1))).error.code


def test_acks_all_times_out_when_the_isr_does_not_follow(harness: BrokerHarness) -> None:
    harness.register(1)
    harness.create_topic("t", replicas=[0, 1], isr=[0, 1])
    result = answer(produce.handle(harness.ctx, produce_request("t", batch(), acks=-1, timeout_ms=50)))
    assert result.error.code == "REQUEST_TIMED_OUT"
    assert result.base_offset == 0  # the records are in the leader's log, just not committed
    assert harness.replicas.produce_purgatory.size == 0


def follower_fetch(harness: BrokerHarness, offset: int, replica_id: int = 1) -> pb.FetchResponse:
    request = pb.FetchRequest(
        replica_id=replica_id, replica_epoch=harness.broker_epoch(replica_id), max_wait_ms=0, max_bytes=1 << 20,
        topics=[pb.FetchTopic(name="t", partitions=[pb.FetchPartition(partition=0, fetch_offset=offset,
                                                                      current_leader_epoch=-1)])],
    )  # fmt: skip
    return fetch.handle(harness.ctx, request)


def test_acks_all_completes_when_the_follower_catches_up(harness: BrokerHarness) -> None:
    harness.register(1)
    harness.create_topic("t", replicas=[0, 1], isr=[0, 1])
    results: list[pb.ProduceResponse] = []
    thread = threading.Thread(
        target=lambda: results.append(produce.handle(harness.ctx, produce_request("t", batch([b"a", b"b"]), acks=-1,
                                                                                  timeout_ms=30_000)))
    )  # fmt: skip
    thread.start()
    wait_for(lambda: harness.partition("t").log_end_offset == 2, 10, "the append")
    follower_fetch(harness, 0)  # the follower fetches the records: its position is still 0
    assert thread.is_alive(), "acks=all answered before the ISR had the records"
    assert not results
    follower_fetch(harness, 2)  # the follower reports position 2: HW 2
    thread.join(10)
    assert results
    assert not answer(results[0]).error.code
    assert harness.partition("t").high_watermark == 2


def test_acks_all_fails_when_leadership_moves(harness: BrokerHarness) -> None:
    harness.register(1)
    harness.create_topic("t", replicas=[0, 1], isr=[0, 1])
    results: list[pb.ProduceResponse] = []
    thread = threading.Thread(
        target=lambda: results.append(produce.handle(harness.ctx, produce_request("t", batch(), acks=-1,
                                                                                  timeout_ms=30_000)))
    )  # fmt: skip
    thread.start()
    wait_for(lambda: harness.replicas.produce_purgatory.size == 1, 10, "the produce to wait")
    harness.change("t", leader=1)
    thread.join(10)
    assert results
    assert answer(results[0]).error.code == "NOT_LEADER_OR_FOLLOWER"


def test_a_request_that_must_not_wait_stops_at_a_held_batch_and_resumes_in_order(harness: BrokerHarness) -> None:
    """The gRPC event loop appends with ``hold=False``: it stops at the first batch that would be held for its
    turn (S8), nothing after it appended; :func:`produce.resume` goes on from it on a thread that may wait,
    in the request's order."""
    harness.create_topic("t", partitions=2)

    def idempotent(seq: int) -> bytes:
        return build_batch([b"v%d" % seq], timestamp_ms=START_MS, producer_id=7, producer_epoch=0, base_sequence=seq)

    assert not answer(produce.handle(harness.ctx, produce_request("t", idempotent(0)))).error.code
    request = produce_request("t", [(0, idempotent(2)), (1, batch([b"after"]))])  # sequence 1 is still on its way
    started = produce.begin(harness.ctx, request, hold=False)
    assert isinstance(started, produce.PendingProduce)
    assert started.pending.held
    assert harness.partition("t", 1).log_end_offset == 0  # nothing after the held batch went in
    resumed: list[object] = []
    thread = threading.Thread(target=lambda: resumed.append(produce.resume(harness.ctx, started)))
    thread.start()
    assert not answer(produce.handle(harness.ctx, produce_request("t", idempotent(1)))).error.code  # it arrives
    thread.join(10.0)
    response = resumed[0]
    assert isinstance(response, pb.ProduceResponse)
    assert (answer(response, 0).base_offset, answer(response, 1).base_offset) == (2, 0)
    assert not answer(response, 0).error.code
