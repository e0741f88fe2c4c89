"""The Consumer against an in-process fake cluster over real gRPC: round trips, seeks, resets, failover."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from log.record import BatchBuilder, build_batch
from odradek import Consumer, ConsumerRecord, Producer, TopicPartition
from odradek.errors import (
    CorruptMessageError,
    IllegalStateError,
    InvalidGroupIdError,
    InvalidTopicError,
    KafkaTimeoutError,
    MessageTooLargeError,
    NoOffsetForPartitionError,
    OffsetOutOfRangeError,
)
from odradek.types import OffsetAndTimestamp
from tests.clients.fake_broker import FakeCluster

T0 = TopicPartition("t", 0)
T1 = TopicPartition("t", 1)
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def consumer(cluster: FakeCluster, **config: object) -> Consumer:
    settings = {"bootstrap.servers": cluster.bootstrap, "auto.offset.reset": "earliest", "fetch.max.wait.ms": 100}
    return Consumer({**settings, **config})


def poll_until(c: Consumer, count: int, timeout_s: float = 10) -> list[ConsumerRecord]:
    deadline = time.monotonic() + timeout_s
    records: list[ConsumerRecord] = []
    while len(records) < count and time.monotonic() < deadline:
        records.extend(c.poll(timeout_ms=100))
    return records


def fill(cluster: FakeCluster, tp: TopicPartition, count: int, per_batch: int = 10, start_ms: int = 1_000) -> None:
    """Append ``count`` records (value b"<offset>", timestamp start_ms + offset) in batches."""
    offset = cluster.partition(tp).log_end_offset
    while count > 0:
        n = min(per_batch, count)
        builder = BatchBuilder()
        for i in range(offset, offset + n):
            builder.append(start_ms + i, None, b"%d" % i)
        cluster.append(tp, builder.build())
        offset += n
        count -= n


@pytest.mark.parametrize("compression", sorted(CODECS))
def test_round_trip_with_the_producer(cluster: FakeCluster, compression: str) -> None:
    cluster.create_topic("t", 2)
    sent = []
    with Producer({"bootstrap.servers": cluster.bootstrap, "compression.type": compression, "linger.ms": 1}) as p:
        for i in range(100):
            headers = [("i", b"%d" % i), ("empty", b""), ("null", None)]
            key = None if i % 5 == 0 else b"k%d" % (i % 7)
            md = p.send("t", b"v%d" % i, key=key, headers=headers, timestamp_ms=10_000 + i).result(10)
            sent.append((md.partition, md.offset, 10_000 + i, key, b"v%d" % i, tuple(headers)))
    with consumer(cluster) as c:
        c.assign([T0, T1])
        records = poll_until(c, 100)
    got = sorted((r.partition, r.offset, r.timestamp, r.key, r.value, r.headers) for r in records)
    assert got == sorted(sent)
    assert all(r.topic == "t" and r.timestamp_type == 0 for r in records)


def test_poll_respects_max_poll_records_and_keeps_order(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 1)
    fill(cluster, T0, 95, per_batch=30)
    with consumer(cluster, **{"max.poll.records": 20}) as c:
        c.assign([T0])
        sizes = []
        records: list[ConsumerRecord] = []
        while len(records) < 95:
            batch = c.poll(timeout_ms=2000)
            assert batch
            sizes.append(len(batch))
            records.extend(batch)
        assert max(sizes) <= 20
        assert [r.offset for r in records] == list(range(95))
        assert [r.value for r in records] == [b"%d" % i for i in range(95)]
        assert c.position(T0) == 95
        assert c.poll(timeout_ms=50) == []


def test_small_partition_fetch_size_still_makes_progress(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 1)
    fill(cluster, T0, 50, per_batch=10)
    with consumer(cluster, **{"max.partition.fetch.bytes": 100}) as c:
        c.assign([T0])
        assert [r.offset for r in poll_until(c, 50)] == list(range(50))
    fetches = cluster.calls_of("Fetch")
    assert len(fetches) >= 5
    assert all(p.partition_max_bytes >= 100 for f in fetches for t in f.topics for p in t.partitions)


def test_a_cut_batch_makes_the_fetch_size_grow(cluster: FakeCluster) -> None:
    """A broker without KIP-74 cuts answers at the fetch size: the consumer asks for more next time."""
    cluster.whole_first_batch = False
    cluster.create_topic("t", 1)
    cluster.append(T0, build_batch([b"x" * 500], timestamp_ms=1))
    cluster.append(T0, build_batch([b"y" * 10], timestamp_ms=1))
    with consumer(cluster, **{"max.partition.fetch.bytes": 100}) as c:
        c.assign([T0])
        assert [r.value for r in poll_until(c, 2)] == [b"x" * 500, b"y" * 10]
    sizes = [p.partition_max_bytes for f in cluster.calls_of("Fetch") for t in f.topics for p in t.partitions]
    assert sizes[:4] == [100, 200, 400, 800]


def test_a_batch_larger_than_fetch_max_bytes_is_an_error(cluster: FakeCluster) -> None:
    cluster.whole_first_batch = False
    cluster.create_topic("t", 1)
    cluster.append(T0, build_batch([b"x" * 500], timestamp_ms=1))
    with consumer(cluster, **{"max.partition.fetch.bytes": 100, "fetch.max.bytes": 200}) as c:
        c.assign([T0])
        with pytest.raises(MessageTooLargeError, match=r"larger than fetch.max.bytes \(200\)"):
            poll_until(c, 1)


def test_one_fetch_per_leader_for_many_partitions(make_cluster: Callable[..., FakeCluster]) -> None:
    cluster = make_cluster((1, 2))
    cluster.create_topic("t", 6)
    tps = [TopicPartition("t", p) for p in range(6)]
    for tp in tps:
        fill(cluster, tp, 5)
    with consumer(cluster) as c:
        c.assign(tps)
        assert len(poll_until(c, 30)) == 30
    first_round = cluster.calls_of("Fetch")[:2]
    assert sorted(len(f.topics[0].partitions) for f in first_round) == [3, 3]


def test_seek_and_seek_to_beginning_and_end(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 1)
    fill(cluster, T0, 40, per_batch=8)
    with consumer(cluster) as c:
        c.assign([T0])
        c.seek(T0, 13)  # inside the second batch: the first records of that batch are dropped
        assert c.position(T0) == 13
        assert [r.offset for r in poll_until(c, 27)] == list(range(13, 40))
        c.seek_to_beginning()
        assert c.position(T0) == 0
        assert poll_until(c, 1)[0].offset == 0
        c.seek_to_end([T0])
        assert c.position(T0) == 40
        fill(cluster, T0, 2)
        assert [r.offset for r in poll_until(c, 2)] == [40, 41]
        with pytest.raises(ValueError, match="non-negative"):
            c.seek(T0, -1)
        with pytest.raises(IllegalStateError, match="not assigned"):
            c.seek(T1, 0)


def test_seek_discards_prefetched_data(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 1)
    fill(cluster, T0, 100, per_batch=10)
    with consumer(cluster, **{"max.poll.records": 5}) as c:
        c.assign([T0])
        assert [r.offset for r in c.poll(timeout_ms=5000)] == [0, 1, 2, 3, 4]
        c.seek(T0, 77)
        assert poll_until(c, 1)[0].offset == 77


def test_auto_offset_reset_latest(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 1)
    fill(cluster, T0, 10)
    with consumer(cluster, **{"auto.offset.reset": "latest"}) as c:
        c.assign([T0])
        assert c.poll(timeout_ms=100) == []
        assert c.position(T0) == 10
        fill(cluster, T0, 3)
        assert [r.offset for r in poll_until(c, 3)] == [10, 11, 12]


def test_auto_offset_reset_none(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 1)
    fill(cluster, T0, 10)
    with consumer(cluster, **{"auto.offset.reset": "none"}) as c:
        c.assign([T0])
        with pytest.raises(NoOffsetForPartitionError, match="t-0 has no position"):
            c.poll(timeout_ms=100)
        c.seek(T0, 500)
        with pytest.raises(OffsetOutOfRangeError, match="out of range and auto.offset.reset is none"):
            poll_until(c, 1)
        c.seek(T0, 5)
        assert poll_until(c, 5)[0].offset == 5


def test_out_of_range_resets_to_earliest(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 1)
    fill(cluster, T0, 30)
    cluster.truncate_front(T0, 20)  # retention removed offsets below 20
    with consumer(cluster) as c:
        c.assign([T0])
        c.seek(T0, 3)
        assert [r.offset for r in poll_until(c, 10)] == list(range(20, 30))


def test_out_of_range_resets_to_latest(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 1)
    fill(cluster, T0, 30)
    with consumer(cluster, **{"auto.offset.reset": "latest"}) as c:
        c.assign([T0])
        c.seek(T0, 1000)
        assert c.poll(timeout_ms=300) == []
        assert c.position(T0) == 30


def test_leader_change_is_followed(make_cluster: Callable[..., FakeCluster]) -> None:
    cluster = make_cluster((1, 2))
    cluster.create_topic("t", 1, leaders=[1])
    fill(cluster, T0, 10)
    with consumer(cluster, **{"retry.backoff.ms": 10}) as c:
        c.assign([T0])
        assert len(poll_until(c, 10)) == 10
        cluster.set_leader(T0, 2)
        fill(cluster, T0, 10)
        assert [r.offset for r in poll_until(c, 10)] == list(range(10, 20))
    fetched_from = [node for node, rpc, _ in cluster.calls if rpc == "Fetch"]
    assert fetched_from[0] == 1
    assert fetched_from[-1] == 2


def test_retriable_fetch_errors_are_retried(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 1)
    fill(cluster, T0, 10)
    cluster.inject("Fetch", T0, "NOT_LEADER_OR_FOLLOWER", "UNKNOWN_TOPIC_OR_PARTITION", "FENCED_LEADER_EPOCH")
    with consumer(cluster, **{"retry.backoff.ms": 5}) as c:
        c.assign([T0])
        assert [r.offset for r in poll_until(c, 10)] == list(range(10))


def test_non_retriable_fetch_error_is_raised_by_poll(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 1)
    fill(cluster, T0, 10)
    cluster.inject("Fetch", T0, "INVALID_TOPIC_EXCEPTION")
    with consumer(cluster) as c:
        c.assign([T0])
        with pytest.raises(InvalidTopicError):
            poll_until(c, 1)
        assert len(poll_until(c, 10)) == 10  # raised once; then the partition is fetched again


def test_corrupt_batch_is_raised_and_not_skipped(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 1)
    fill(cluster, T0, 5)
    good = bytearray(build_batch([b"a", b"b"], timestamp_ms=1))
    good[-1] ^= 0xFF  # breaks the CRC
    with cluster.lock:
        part = cluster.partition(T0)
        part.batches.append((5, 7, 1, bytes(good)))
        part.log_end_offset = 7
    with consumer(cluster) as c:
        c.assign([T0])
        records = poll_until(c, 5)
        assert [r.offset for r in records] == [0, 1, 2, 3, 4]
        with pytest.raises(CorruptMessageError, match="t-0 at offset 5"):
            poll_until(c, 1)
        assert c.position(T0) == 5


def test_control_batches_are_skipped(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 1)
    fill(cluster, T0, 3)
    marker = BatchBuilder(producer_id=7, producer_epoch=0, is_transactional=True, is_control=True)
    marker.append(1, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00")
    cluster.append(T0, marker.build())
    fill(cluster, T0, 2)
    with consumer(cluster) as c:
        c.assign([T0])
        assert [r.offset for r in poll_until(c, 5)] == [0, 1, 2, 4, 5]
        assert c.position(T0) == 6


def test_offsets_for_times_and_beginning_end(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 2)
    fill(cluster, T0, 20, start_ms=1_000)
    with consumer(cluster) as c:
        found = c.offsets_for_times({T0: 1_005, T1: 5})
        assert found == {T0: OffsetAndTimestamp(5, 1_005, 0), T1: None}
        assert c.offsets_for_times({T0: 999_999}) == {T0: None}
        assert c.beginning_offsets([T0, T1]) == {T0: 0, T1: 0}
        assert c.end_offsets([T0, T1]) == {T0: 20, T1: 0}
        with pytest.raises(ValueError, match="non-negative int"):
            c.offsets_for_times({T0: -1})


def test_offsets_for_times_of_an_unknown_topic_times_out(cluster: FakeCluster) -> None:
    with consumer(cluster) as c, pytest.raises(KafkaTimeoutError, match="nope-0"):
        c.offsets_for_times({TopicPartition("nope", 0): 1}, timeout_ms=200)


def test_assignment_and_pause(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 2)
    fill(cluster, T0, 5)
    fill(cluster, T1, 5)
    with consumer(cluster) as c:
        c.assign([T1, T0, T0])
        assert c.assignment() == {T0, T1}
        c.pause(T1)
        assert c.paused() == {T1}
        records = poll_until(c, 5)
        assert {r.partition for r in records} == {0}
        c.resume(T1)
        assert {r.partition for r in poll_until(c, 5)} == {1}
        c.assign([T1])
        assert c.assignment() == {T1}
        assert c.position(T1) == 5  # kept
        c.unsubscribe()
        assert c.assignment() == set()
        with pytest.raises(IllegalStateError, match="not assigned any partitions"):
            c.poll(0)
        with pytest.raises(TypeError, match="TopicPartition"):
            c.assign(["t"])  # type: ignore[list-item]


def test_group_calls_need_a_group_id(cluster: FakeCluster) -> None:
    with consumer(cluster, **{"enable.auto.commit": False}) as c:  # groups: tests/clients/test_group_consumer.py
        with pytest.raises(InvalidGroupIdError, match="group.id"):
            c.subscribe(["t"])
        with pytest.raises(InvalidGroupIdError, match="group.id"):
            c.commit()
        with pytest.raises(InvalidGroupIdError, match="group.id"):
            c.committed(T0)


def test_closed_consumer_refuses(cluster: FakeCluster) -> None:
    c = consumer(cluster)
    c.close()
    c.close()
    with pytest.raises(IllegalStateError, match="closed"):
        c.poll(0)


def test_topics_and_partitions_for(cluster: FakeCluster) -> None:
    cluster.create_topic("b", 2)
    cluster.create_topic("a", 1)
    cluster.create_topic("__internal", 1)
    cluster.internal_topics.add("__internal")
    with consumer(cluster) as c:
        assert c.topics() == ["a", "b"]
        assert c.partitions_for("b") == [0, 1]


def test_long_poll_returns_when_data_arrives(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 1)
    with consumer(cluster, **{"fetch.max.wait.ms": 5000}) as c:
        c.assign([T0])
        assert c.poll(timeout_ms=200) == []
        import threading

        timer = threading.Timer(0.2, fill, args=(cluster, T0, 1))
        timer.start()
        started = time.monotonic()
        records = poll_until(c, 1, timeout_s=10)
        timer.join()
        assert [r.offset for r in records] == [0]
        assert time.monotonic() - started < 4  # woken by the data, not by fetch.max.wait.ms


def test_the_next_fetch_is_in_flight_while_the_application_works(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 1)
    fill(cluster, T0, 50, per_batch=10)
    with consumer(cluster, **{"max.poll.records": 10, "max.partition.fetch.bytes": 300}) as c:
        c.assign([T0])
        first = c.poll(timeout_ms=5000)
        assert first
        # poll() returned with records and had already asked for what follows them
        deadline = time.monotonic() + 5
        while len(cluster.calls_of("Fetch")) < 2 and time.monotonic() < deadline:
            time.sleep(0.005)
        offsets = [p.fetch_offset for f in cluster.calls_of("Fetch") for t in f.topics for p in t.partitions]
        assert offsets[0] == 0
        assert offsets[1] > first[-1].offset


def test_a_caught_up_consumer_sends_its_next_fetch_from_the_next_poll(cluster: FakeCluster) -> None:
    """At the high watermark the next fetch would only wait at the leader: poll() returns the records without
    sending it (no send between the records and the application), and the next poll() sends it at once."""
    cluster.create_topic("t", 1)
    fill(cluster, T0, 5, per_batch=5)
    with consumer(cluster, **{"fetch.max.wait.ms": 5000}) as c:
        c.assign([T0])
        first = poll_until(c, 5)
        assert [r.offset for r in first] == [0, 1, 2, 3, 4]
        fetches = len(cluster.calls_of("Fetch"))
        time.sleep(0.3)  # a fetch sent before poll() returned would have reached the broker by now
        assert len(cluster.calls_of("Fetch")) == fetches
        fill(cluster, T0, 1)
        started = time.monotonic()
        assert [r.offset for r in c.poll(timeout_ms=5000)] == [5]
        assert time.monotonic() - started < 4  # the fetch answered with the record, not after fetch.max.wait.ms
        assert len(cluster.calls_of("Fetch")) == fetches + 1
        offsets = [p.fetch_offset for f in cluster.calls_of("Fetch") for t in f.topics for p in t.partitions]
        assert offsets[-1] == 5
