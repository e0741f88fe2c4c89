"""The idempotent Producer (odradek/idempotence.py rules P1-P7) against the fake cluster, whose partitions
run the broker's own sequence checks (log.producer_state): lost answers, errors with requests in flight,
epoch bumps."""

from __future__ import annotations

import pytest

from log.record import parse_header
from log.record.header import BatchHeader
from odradek import Producer, TopicPartition
from odradek.accumulator import ProducerBatch
from odradek.errors import OutOfOrderSequenceNumberError
from odradek.idempotence import IdempotenceState, Verdict
from tests.clients.fake_broker import LOSE_RESPONSE, FakeCluster
from tests.support.launcher import wait_until

T0 = TopicPartition("t", 0)
T1 = TopicPartition("t", 1)


def producer(cluster: FakeCluster, **config: object) -> Producer:
    settings = {"bootstrap.servers": cluster.bootstrap, "linger.ms": 0, "retry.backoff.ms": 10, **config}
    return Producer(settings)


def headers(cluster: FakeCluster, tp: TopicPartition) -> list[BatchHeader]:
    with cluster.lock:
        return [parse_header(data) for _, _, _, data in cluster.partition(tp).batches]


def values(cluster: FakeCluster, tp: TopicPartition) -> list[bytes | None]:
    return [r.value for r in cluster.records(tp)]


def test_p1_batches_carry_the_producer_id_and_per_partition_sequences(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 2)
    with producer(cluster) as p:
        for i in range(6):
            p.send("t", b"%d" % i, partition=i % 2).result(10)
            p.send("t", b"%d" % i, partition=0).result(10)
    (init,) = cluster.calls_of("InitProducerId")
    assert (init.producer_id, init.producer_epoch) == (-1, -1)
    for tp, count in ((T0, 9), (T1, 3)):
        hs = headers(cluster, tp)
        assert {(h.producer_id, h.producer_epoch) for h in hs} == {(1000, 0)}
        assert [h.base_sequence for h in hs] == list(range(count))


def test_without_idempotence_no_producer_id_is_sent(cluster: FakeCluster) -> None:
    cluster.create_topic("t")
    with producer(cluster, **{"enable.idempotence": False}) as p:
        p.send("t", b"x").result(10)
    assert cluster.calls_of("InitProducerId") == []
    assert [(h.producer_id, h.base_sequence) for h in headers(cluster, T0)] == [(-1, -1)]


def test_p4_a_lost_answer_is_retried_and_written_once_with_its_original_offsets(cluster: FakeCluster) -> None:
    cluster.create_topic("t")
    with producer(cluster) as p:
        assert p.send("t", b"a").result(10).offset == 0
        cluster.inject("Produce", T0, LOSE_RESPONSE)
        assert p.send("t", b"b").result(10).offset == 1  # the duplicate's answer: the first copy's offset
        assert p.send("t", b"c").result(10).offset == 2
    assert values(cluster, T0) == [b"a", b"b", b"c"]
    assert len(cluster.calls_of("Produce")) == 4  # a, b (answer lost), b again, c


def test_without_idempotence_a_lost_answer_writes_twice(cluster: FakeCluster) -> None:
    """The control experiment of the test above: what idempotence prevents."""
    cluster.create_topic("t")
    with producer(cluster, **{"enable.idempotence": False}) as p:
        cluster.inject("Produce", T0, LOSE_RESPONSE)
        p.send("t", b"b").result(10)
    assert values(cluster, T0) == [b"b", b"b"]


def test_p3_p5_an_error_with_requests_in_flight_keeps_the_order(cluster: FakeCluster) -> None:
    cluster.create_topic("t")
    with producer(cluster, **{"batch.size": 100}) as p:
        p.send("t", b"warm").result(10)
        cluster.produce_gate.clear()
        cluster.inject("Produce", T0, "NOT_ENOUGH_REPLICAS")  # the first request in flight fails, unwritten
        futures = []
        for i in range(5):
            futures.append(p.send("t", b"r%d" % i + b"x" * 60))
            wait_until(lambda n=i + 1: cluster.produce_active >= n, 5, f"{i + 1} requests in flight")
        cluster.produce_gate.set()
        offsets = [f.result(10).offset for f in futures]
    assert offsets == [1, 2, 3, 4, 5]
    assert values(cluster, T0) == [b"warm"] + [b"r%d" % i + b"x" * 60 for i in range(5)]
    assert cluster.produce_active_max >= 5


def test_p6_unknown_producer_id_bumps_the_epoch_and_resends(cluster: FakeCluster) -> None:
    cluster.create_topic("t")
    with producer(cluster) as p:
        p.send("t", b"a").result(10)
        cluster.inject("Produce", T0, "UNKNOWN_PRODUCER_ID")
        assert p.send("t", b"b").result(10).offset == 1
        p.send("t", b"c").result(10)
    inits = cluster.calls_of("InitProducerId")
    assert [(r.producer_id, r.producer_epoch) for r in inits] == [(-1, -1), (1000, 0)]
    assert [(h.producer_epoch, h.base_sequence) for h in headers(cluster, T0)] == [(0, 0), (1, 0), (1, 1)]
    assert values(cluster, T0) == [b"a", b"b", b"c"]


def test_p6_out_of_order_at_the_head_fails_that_batch_and_bumps_the_epoch(cluster: FakeCluster) -> None:
    cluster.create_topic("t")
    with producer(cluster) as p:
        p.send("t", b"a").result(10)
        cluster.inject("Produce", T0, "OUT_OF_ORDER_SEQUENCE_NUMBER")
        with pytest.raises(OutOfOrderSequenceNumberError):
            p.send("t", b"b").result(10)
        assert p.send("t", b"c").result(10).offset == 1
    assert values(cluster, T0) == [b"a", b"c"]
    assert [(h.producer_epoch, h.base_sequence) for h in headers(cluster, T0)] == [(0, 0), (1, 0)]


def test_p7_a_bump_waits_for_retries_of_unknown_fate_in_other_partitions(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 2)
    with producer(cluster) as p:
        p.send("t", b"a0", partition=0).result(10)
        p.send("t", b"a1", partition=1).result(10)
        cluster.produce_gate.clear()
        cluster.inject("Produce", T1, LOSE_RESPONSE)  # partition 1: written, answer lost -> retried, old epoch
        cluster.inject("Produce", T0, "UNKNOWN_PRODUCER_ID")  # partition 0: bump
        f1 = p.send("t", b"b1", partition=1)
        f0 = p.send("t", b"b0", partition=0)
        wait_until(lambda: cluster.produce_active >= 1, 5, "a request in flight")
        cluster.produce_gate.set()
        assert f0.result(10).offset == 1
        assert f1.result(10).offset == 1
    assert values(cluster, T1) == [b"a1", b"b1"]  # exactly once: the retry kept its epoch and sequence
    assert values(cluster, T0) == [b"a0", b"b0"]


# ------------------------------------------------------------------------------ the pure rules P1-P7


def drained(state: IdempotenceState, tp: TopicPartition, records: int = 1, append_id: int = -1) -> ProducerBatch:
    batch = ProducerBatch(tp, 0, 0.0, 0)
    for _ in range(records):
        batch.append(0, None, b"x", ())
    batch.append_id = append_id
    assert state.may_drain(batch, 0)
    state.on_drain(batch)
    batch.in_flight = True
    return batch


def answered(*batches: ProducerBatch) -> None:
    for batch in batches:
        batch.in_flight = False


def test_p1_p3_sequences_and_retries() -> None:
    state = IdempotenceState()
    assert state.needs_producer_id()
    assert not state.may_drain(ProducerBatch(T0, 0, 0.0, 0), 0)  # no producer id yet
    state.set_producer_id(7, 0)
    batches = [drained(state, T0, records=3) for _ in range(5)]
    assert [b.base_sequence for b in batches] == [0, 3, 6, 9, 12]
    assert [b.head_when_sent for b in batches] == [True, False, False, False, False]
    assert not state.may_drain(batches[0], 1)  # P3: a retry waits until nothing else is in flight
    assert state.may_drain(batches[0], 0)


def test_p2_at_most_five_appends_from_the_oldest_unanswered_one() -> None:
    state = IdempotenceState()
    state.set_producer_id(7, 0)
    appends = [drained(state, T0, append_id=i) for i in range(5)]
    assert state.may_drain(_fresh(T0, append_id=4), 1)  # more batches of the newest append
    assert not state.may_drain(_fresh(T0, append_id=5), 0)  # a sixth append
    assert state.may_drain(_fresh(T1, append_id=5), 0)
    for middle in appends[1:4]:
        state.resolved(middle)
    assert not state.may_drain(_fresh(T0, append_id=5), 0)  # the oldest is unanswered: the broker's window
    state.resolved(appends[0])
    assert state.may_drain(_fresh(T0, append_id=5), 0)


def _fresh(tp: TopicPartition, append_id: int) -> ProducerBatch:
    batch = ProducerBatch(tp, 0, 0.0, 0)
    batch.append_id = append_id
    return batch


def test_p5_a_refusal_caused_by_requests_racing_is_retried_without_a_bump() -> None:
    state = IdempotenceState()
    state.set_producer_id(7, 0)
    first, second = drained(state, T0), drained(state, T0)
    answered(first, second)
    state.resolved(first)  # the broker wrote the first after refusing the second: answers came in that order
    assert state.on_error(second, "UNKNOWN_PRODUCER_ID", retriable=False) is Verdict.RETRY
    assert not state.bump_requested
    assert second.base_sequence == 1


def test_p6_a_genuine_refusal_drops_the_later_queued_sequences_and_bumps_after_the_in_flight_ones() -> None:
    state = IdempotenceState()
    state.set_producer_id(7, 0)
    head, queued, flying = drained(state, T0), drained(state, T0), drained(state, T0)
    other = drained(state, T1)
    answered(head, queued)  # ``queued`` came back with a retriable error and waits in the queue
    assert state.on_error(queued, "NETWORK_EXCEPTION", retriable=True) is Verdict.RETRY
    assert state.on_error(head, "UNKNOWN_PRODUCER_ID", retriable=False) is Verdict.RESEQUENCE
    assert state.bump_requested
    assert (head.base_sequence, queued.base_sequence, flying.base_sequence) == (-1, -1, 2)
    assert not state.needs_producer_id()  # ``flying`` and the other partition's batch are unanswered
    answered(flying)  # behind the refused one: it cannot have been written, whatever the answer
    assert state.on_error(flying, "NETWORK_EXCEPTION", retriable=True) is Verdict.RESEQUENCE
    assert flying.base_sequence == -1
    assert not state.may_drain(ProducerBatch(T1, 0, 0.0, 0), 0)  # fresh batches wait for the bump
    assert not state.needs_producer_id()
    state.resolved(other)
    assert state.needs_producer_id()
    state.set_producer_id(7, 1)
    for expected, batch in enumerate((head, queued, flying)):
        assert state.may_drain(batch, 0)
        state.on_drain(batch)
        assert (batch.producer_epoch, batch.base_sequence) == (1, expected)


def test_p6_out_of_order_for_the_first_unanswered_batch_fails_it() -> None:
    state = IdempotenceState()
    state.set_producer_id(7, 0)
    head = drained(state, T0)
    answered(head)
    assert state.on_error(head, "OUT_OF_ORDER_SEQUENCE_NUMBER", retriable=False) is Verdict.FAIL
    assert state.bump_requested
    assert state.needs_producer_id()
