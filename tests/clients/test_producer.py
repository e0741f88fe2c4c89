"""The Producer against an in-process fake cluster over real gRPC."""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable

import pytest

from odradek import Producer, RecordMetadata, TopicPartition
from odradek.errors import (
    IllegalStateError,
    InvalidTopicError,
    KafkaTimeoutError,
    MessageTooLargeError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
)
from odradek.partitioner import partition_for_key
from tests.clients.fake_broker import FakeCluster

T0 = TopicPartition("t", 0)


def producer(cluster: FakeCluster, **config: object) -> Producer:
    return Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 1, **config})


@pytest.mark.parametrize("compression", ["none", "gzip", "snappy", "lz4", "zstd"])
@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_records_land_with_keys_headers_and_timestamps(cluster: FakeCluster, compression: str, acks: str) -> None:
    cluster.create_topic("t", 1)
    with producer(cluster, acks=acks, **{"compression.type": compression, "enable.idempotence": acks == "all"}) as p:
        futures = [
            p.send("t", value=b"value-%d" % i, key=b"key-%d" % i if i % 2 else None,
                   headers=[("h", b"%d" % i), ("null", None)] if i % 3 == 0 else None, timestamp_ms=1_000 + i)
            for i in range(50)
        ]  # fmt: skip
        results = [f.result(timeout=10) for f in futures]
    if acks == "0":
        assert {md.offset for md in results} == {-1}
    else:
        assert [md.offset for md in results] == list(range(50))
    assert [md.timestamp for md in results] == [1_000 + i for i in range(50)]
    records = cluster.records(T0)
    assert [r.value for r in records] == [b"value-%d" % i for i in range(50)]
    assert [r.key for r in records] == [b"key-%d" % i if i % 2 else None for i in range(50)]
    assert [r.headers for r in records] == [
        ((("h", b"%d" % i), ("null", None)) if i % 3 == 0 else ()) for i in range(50)
    ]
    assert [r.timestamp for r in records] == [1_000 + i for i in range(50)]
    assert all(r.batch_attributes & 7 == ["none", "gzip", "snappy", "lz4", "zstd"].index(compression) for r in records)


def test_default_timestamp_is_now(cluster: FakeCluster) -> None:
    cluster.create_topic("t")
    before = int(time.time() * 1000)
    with producer(cluster) as p:
        md = p.send("t", b"x").result(10)
    assert before <= md.timestamp <= int(time.time() * 1000)


def test_keyed_records_go_where_the_java_client_sends_them(make_cluster: Callable[..., FakeCluster]) -> None:
    cluster = make_cluster((1, 2, 3))
    cluster.create_topic("t", 6)
    with producer(cluster) as p:
        results = {key: p.send("t", b"v", key=key).result(10) for key in (b"user-%d" % i for i in range(40))}
    for key, md in results.items():
        assert md.partition == partition_for_key(key, 6)
    assert len({md.partition for md in results.values()}) > 1


def test_explicit_partition(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 3)
    with producer(cluster) as p:
        assert p.send("t", b"x", key=b"k", partition=2).result(10).partition == 2
        with pytest.raises(ValueError, match=r"invalid partition 3 for topic 't': it has partitions 0\.\.2"):
            p.send("t", b"x", partition=3)
        assert p.partitions_for("t") == [0, 1, 2]


def test_null_keys_stick_to_a_partition_per_batch(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 4)
    with producer(cluster, **{"linger.ms": 1000, "batch.size": 2000}) as p:
        futures = [p.send("t", b"x" * 100) for _ in range(200)]
        p.flush(10)
    partitions = [f.result(0).partition for f in futures]
    runs = [partitions[0]]
    for partition in partitions[1:]:
        if partition != runs[-1]:
            runs.append(partition)
    assert len(runs) > 3  # it moved on as batches filled
    assert len(runs) < 40  # but in runs of a batch, not record by record
    assert len(set(partitions)) > 1


def test_partitioner_ignore_keys(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 4)
    with producer(cluster, **{"partitioner.ignore.keys": True, "linger.ms": 1000}) as p:
        futures = [p.send("t", b"x", key=b"user-%d" % i) for i in range(20)]
        p.flush(10)
    assert len({f.result(0).partition for f in futures}) == 1


def test_retries_after_not_leader_with_a_metadata_refresh(make_cluster: Callable[..., FakeCluster]) -> None:
    cluster = make_cluster((1, 2))
    cluster.create_topic("t", 1, leaders=[1])
    with producer(cluster, **{"retry.backoff.ms": 10}) as p:
        assert p.send("t", b"before").result(10).offset == 0
        cluster.set_leader(T0, 2)  # the client's metadata still says 1
        metadata_calls = len(cluster.calls_of("Metadata"))
        futures = [p.send("t", b"after-%d" % i) for i in range(20)]
        assert [f.result(10).offset for f in futures] == list(range(1, 21))
    assert len(cluster.calls_of("Metadata")) > metadata_calls
    produced_on = [node for node, rpc, _ in cluster.calls if rpc == "Produce"]
    assert produced_on[0] == 1
    assert produced_on[-1] == 2
    assert [r.value for r in cluster.records(T0)] == [b"before"] + [b"after-%d" % i for i in range(20)]


def test_retriable_errors_are_retried_in_order(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 1)
    cluster.inject("Produce", T0, "NOT_ENOUGH_REPLICAS", "REQUEST_TIMED_OUT", "LEADER_NOT_AVAILABLE")
    with producer(cluster, **{"retry.backoff.ms": 5, "batch.size": 200}) as p:
        futures = [p.send("t", b"%03d" % i) for i in range(30)]
        assert [f.result(10).offset for f in futures] == list(range(30))
    assert [r.value for r in cluster.records(T0)] == [b"%03d" % i for i in range(30)]


def test_non_retriable_error_fails_the_futures(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 1)
    cluster.inject("Produce", T0, "INVALID_TOPIC_EXCEPTION")
    with producer(cluster) as p:
        with pytest.raises(InvalidTopicError):
            p.send("t", b"x").result(10)
        assert p.send("t", b"y").result(10).offset == 0


def test_retries_are_bounded(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 1)
    cluster.inject("Produce", T0, *["NOT_LEADER_OR_FOLLOWER"] * 10)
    with producer(cluster, retries=2, **{"retry.backoff.ms": 1}) as p, pytest.raises(NotLeaderOrFollowerError):
        p.send("t", b"x").result(10)
    assert len(cluster.calls_of("Produce")) == 3


def test_delivery_timeout_fails_the_future(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 1)
    cluster.inject("Produce", T0, *["NOT_ENOUGH_REPLICAS"] * 1000)
    config = {"delivery.timeout.ms": 300, "request.timeout.ms": 200, "linger.ms": 0, "retry.backoff.ms": 20}
    with producer(cluster, **config) as p:
        future = p.send("t", b"x")
        with pytest.raises(
            KafkaTimeoutError, match=r"expiring 1 record\(s\) for t-0: .*; last error: producing to t-0"
        ):
            future.result(timeout=10)
    assert not isinstance(future.exception(), NotEnoughReplicasError)  # a timeout, naming its cause


def test_delivery_timeout_while_the_broker_does_not_answer(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 1)
    p = producer(cluster, **{"delivery.timeout.ms": 400, "request.timeout.ms": 150, "linger.ms": 0})
    try:
        p.send("t", b"warm").result(10)
        cluster.produce_gate.clear()
        future = p.send("t", b"x")
        with pytest.raises(KafkaTimeoutError):
            future.result(timeout=10)
    finally:
        cluster.produce_gate.set()
        p.close(5)


def test_unknown_topic_blocks_up_to_max_block_ms(cluster: FakeCluster) -> None:
    with producer(cluster, **{"max.block.ms": 200}) as p:
        started = time.monotonic()
        with pytest.raises(KafkaTimeoutError, match="topic 'nope' not present in metadata after 200 ms"):
            p.send("nope", b"x")
        assert time.monotonic() - started >= 0.19


def test_a_topic_created_while_waiting_is_found(cluster: FakeCluster) -> None:
    with producer(cluster, **{"max.block.ms": 10_000, "retry.backoff.ms": 10}) as p:
        threading_timer = __import__("threading").Timer(0.2, cluster.create_topic, args=("late", 1))
        threading_timer.start()
        assert p.send("late", b"x").result(10).offset == 0
        threading_timer.join()


def test_input_validation(cluster: FakeCluster) -> None:
    cluster.create_topic("t")
    with producer(cluster, **{"max.request.size": 1000}) as p:
        with pytest.raises(TypeError, match=r"value must be bytes or None, got str; encode it first"):
            p.send("t", "text")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="key must be bytes or None, got int"):
            p.send("t", b"x", key=7)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="headers must be a list"):
            p.send("t", b"x", headers={"a": b"b"})  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="a header key must be a str"):
            p.send("t", b"x", headers=[(b"a", b"b")])  # type: ignore[list-item]
        with pytest.raises(TypeError, match="each header must be a"):
            p.send("t", b"x", headers=[("a",)])  # type: ignore[list-item]
        with pytest.raises(ValueError, match="timestamp_ms must be a non-negative int"):
            p.send("t", b"x", timestamp_ms=-5)
        with pytest.raises(MessageTooLargeError, match=r"larger than max.request.size \(1000\)"):
            p.send("t", b"x" * 1000)
        assert p.send("t", bytearray(b"ok"), key=memoryview(b"k")).result(10).offset == 0
    assert cluster.records(T0)[0].value == b"ok"


def test_record_larger_than_buffer_memory(cluster: FakeCluster) -> None:
    cluster.create_topic("t")
    with producer(cluster, **{"buffer.memory": 500}) as p, pytest.raises(MessageTooLargeError, match="buffer.memory"):
        p.send("t", b"x" * 600)


def test_flush_waits_for_lingering_records(cluster: FakeCluster) -> None:
    cluster.create_topic("t")
    with producer(cluster, **{"linger.ms": 60_000}) as p:
        futures = [p.send("t", b"x") for _ in range(5)]
        assert not any(f.done() for f in futures)
        p.flush(timeout=10)
        assert all(f.done() for f in futures)


def test_flush_times_out(cluster: FakeCluster) -> None:
    cluster.create_topic("t")
    p = producer(cluster)
    try:
        p.send("t", b"warm").result(10)
        cluster.produce_gate.clear()
        p.send("t", b"x")
        with pytest.raises(KafkaTimeoutError, match="flush"):
            p.flush(timeout=0.1)
    finally:
        cluster.produce_gate.set()
        p.close(5)


def test_close_delivers_what_is_queued_then_refuses(cluster: FakeCluster) -> None:
    cluster.create_topic("t")
    p = producer(cluster, **{"linger.ms": 60_000})
    futures = [p.send("t", b"x") for _ in range(10)]
    p.close()
    assert [f.result(0).offset for f in futures] == list(range(10))
    with pytest.raises(IllegalStateError, match="closed"):
        p.send("t", b"x")
    p.close()  # twice is fine


def test_close_with_a_timeout_fails_what_is_left(cluster: FakeCluster) -> None:
    cluster.create_topic("t")
    p = producer(cluster)
    p.send("t", b"warm").result(10)
    cluster.produce_gate.clear()
    future = p.send("t", b"x")
    try:
        p.close(timeout=0.1)
        with pytest.raises(IllegalStateError, match="closed forcefully"):
            future.result(timeout=5)
    finally:
        cluster.produce_gate.set()


def test_close_from_a_callback_does_not_deadlock(cluster: FakeCluster) -> None:
    cluster.create_topic("t")
    p = producer(cluster)
    closed = concurrent.futures.Future[None]()

    def on_done(_: object) -> None:
        p.close()
        closed.set_result(None)

    p.send("t", b"x").add_done_callback(on_done)
    closed.result(timeout=10)
    p.close()


def test_callbacks_get_the_metadata(cluster: FakeCluster) -> None:
    cluster.create_topic("t")
    seen: list[RecordMetadata] = []
    with producer(cluster) as p:
        p.send("t", b"x").add_done_callback(lambda f: seen.append(f.result()))
        p.flush(10)
    assert seen == [RecordMetadata("t", 0, 0, seen[0].timestamp)]


def test_many_partitions_travel_in_one_request_per_broker(make_cluster: Callable[..., FakeCluster]) -> None:
    cluster = make_cluster((1, 2))
    cluster.create_topic("t", 8)
    with producer(cluster, **{"linger.ms": 60_000}) as p:
        for partition in range(8):
            p.send("t", b"x", partition=partition)
        p.flush(10)
    requests = cluster.calls_of("Produce")
    assert len(requests) == 2
    assert sorted(len(r.topics[0].partitions) for r in requests) == [4, 4]


def test_broker_down_then_back_is_retried(make_cluster: Callable[..., FakeCluster]) -> None:
    cluster = make_cluster((1, 2))
    cluster.create_topic("t", 1, leaders=[2])
    with producer(cluster, **{"retry.backoff.ms": 20, "retry.backoff.max.ms": 100}) as p:
        assert p.send("t", b"a").result(10).offset == 0
        cluster.stop_broker(2)
        future = p.send("t", b"b")
        time.sleep(0.2)
        cluster.start_broker(2)
        assert future.result(10).offset == 1


def test_max_in_flight_requests_per_broker(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 4)
    config = {"max.in.flight.requests.per.connection": 2, "linger.ms": 0, "enable.idempotence": False}
    p = producer(cluster, **config)
    try:
        p.send("t", b"warm", partition=0).result(10)
        cluster.produce_gate.clear()
        futures = [p.send("t", b"x", partition=0)]
        wait_until(lambda: cluster.produce_active == 1)
        futures.append(p.send("t", b"x", partition=1))
        wait_until(lambda: cluster.produce_active == 2)
        futures += [p.send("t", b"x", partition=partition) for partition in (2, 3)]
        time.sleep(0.1)  # room for a third request, which must not come
        assert cluster.produce_active == 2
        cluster.produce_gate.set()
        assert all(f.result(10).offset >= 0 for f in futures)
        assert cluster.produce_active_max == 2
    finally:
        cluster.produce_gate.set()
        p.close(5)


def test_buffer_memory_back_pressure_blocks_send_then_times_out(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 1)
    config = {"buffer.memory": 20_000, "batch.size": 16384, "max.block.ms": 200, "linger.ms": 0}
    p = producer(cluster, **config)
    try:
        p.send("t", b"warm").result(10)
        cluster.produce_gate.clear()
        p.send("t", b"x" * 1000)  # its batch holds 16 KiB of the 20 KiB while the broker does not answer
        wait_until(lambda: cluster.produce_active == 1)
        started = time.monotonic()
        with pytest.raises(KafkaTimeoutError, match=r"failed to allocate 16384 bytes within max.block.ms \(200 ms\)"):
            p.send("t", b"y" * 1000)  # the first batch is in flight: this one needs 16 KiB of 3.6 free
        assert time.monotonic() - started >= 0.19
        cluster.produce_gate.set()
        assert p.send("t", b"z").result(10).offset > 0  # memory came back with the answer
    finally:
        cluster.produce_gate.set()
        p.close(5)


def wait_until(condition: Callable[[], bool], timeout_s: float = 5) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.005)
