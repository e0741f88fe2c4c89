"""The client library against real ``odradek controller`` and ``odradek broker`` processes.

Produce with every codec and acks level, then consume everything back in order with keys, headers and
timestamps intact; admin calls; offsets_for_times and seeks against real logs.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from odradek import Admin, Consumer, NewTopic, Producer, TopicPartition
from odradek.errors import TopicAlreadyExistsError, UnknownTopicOrPartitionError
from tests.broker.cluster import Cluster

pytestmark = pytest.mark.slow

CODECS = ["none", "gzip", "lz4", "zstd"]
BASE_TS = 1_700_000_000_000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with Cluster(tmp_path_factory.mktemp("e2e"), brokers=2) as c:
        yield c


def consume_all(bootstrap: str, tps: list[TopicPartition], expected: int, timeout_polls: int = 100) -> list:
    consumer = Consumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest"})
    try:
        consumer.assign(tps)
        out: list = []
        for _ in range(timeout_polls):
            out.extend(consumer.poll(timeout_ms=200))
            if len(out) >= expected:
                break
        return out
    finally:
        consumer.close()


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_every_codec_and_acks_round_trip(cluster: Cluster, codec: str, acks: str) -> None:
    topic = f"rt-{codec}-{acks}"
    cluster.create_topic(topic, partitions=2, replication_factor=1)
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap_servers, "acks": acks, "compression.type": codec, "linger.ms": 2}
    )
    sent = []
    try:
        for i in range(300):
            key = None if i % 7 == 0 else f"key-{i % 11}".encode()
            headers = [("n", str(i).encode()), ("empty", None)] if i % 3 == 0 else []
            fut = producer.send(topic, value=f"value-{i}".encode(), key=key, headers=headers,
                                timestamp_ms=BASE_TS + i)
            sent.append((key, f"value-{i}".encode(), headers, BASE_TS + i, fut))
        producer.flush(timeout=30)
    finally:
        producer.close(timeout=30)
    metas = [f.result(timeout=1) for *_, f in sent]
    if acks != "0":
        assert all(m.offset >= 0 for m in metas)
    got = consume_all(cluster.bootstrap_servers, [TopicPartition(topic, 0), TopicPartition(topic, 1)], len(sent))
    assert len(got) == len(sent)
    by_value = {r.value: r for r in got}
    for key, value, headers, ts, _ in sent:
        record = by_value[value]
        assert record.key == key
        assert list(record.headers) == [(k, v) for k, v in headers]
        assert record.timestamp == ts
    for p in (0, 1):  # per partition: offsets dense and in send order
        records = [r for r in got if r.partition == p]
        assert [r.offset for r in records] == list(range(len(records)))
        sent_order = [v for k, v, *_ in sent if by_value[v].partition == p]
        assert [r.value for r in records] == sent_order
    keyed = {}
    for r in got:  # one key, one partition (murmur2)
        if r.key is not None:
            assert keyed.setdefault(r.key, r.partition) == r.partition


def test_admin_calls(cluster: Cluster) -> None:
    admin = Admin({"bootstrap.servers": cluster.bootstrap_servers})
    try:
        admin.create_topics([NewTopic("admin-t", num_partitions=3, replication_factor=2,
                                      config={"retention.ms": "3600000"})])
        assert "admin-t" in admin.list_topics()
        with pytest.raises(TopicAlreadyExistsError):
            admin.create_topics([NewTopic("admin-t", num_partitions=1, replication_factor=1)])
        desc = admin.describe_topics(["admin-t"])["admin-t"]
        assert [p.partition for p in desc.partitions] == [0, 1, 2]
        assert all(len(p.replicas) == 2 and p.leader in p.replicas for p in desc.partitions)
        cluster_desc = admin.describe_cluster()
        assert {b.node_id for b in cluster_desc.brokers} == {b.node_id for b in cluster.brokers}
        assert cluster_desc.controller_id in {n.node_id for n in cluster_desc.controllers}
        admin.delete_topics(["admin-t"])
        cluster.wait_for(lambda: "admin-t" not in admin.list_topics(), 30, "the topic to disappear")
        with pytest.raises(UnknownTopicOrPartitionError):
            admin.list_offsets({TopicPartition("admin-t", 0): "earliest"})
    finally:
        admin.close()


def test_offsets_for_times_and_seek(cluster: Cluster, tmp_path: Path) -> None:
    topic = "times"
    cluster.create_topic(topic, partitions=1, replication_factor=1, configs={"segment.bytes": "2048"})
    tp = TopicPartition(topic, 0)
    with Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 0}) as producer:
        for i in range(100):
            producer.send(topic, value=b"x" * 50, partition=0, timestamp_ms=BASE_TS + 10 * i).result(timeout=30)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers})
    admin = Admin({"bootstrap.servers": cluster.bootstrap_servers})
    try:
        assert admin.list_offsets({tp: "latest"}) == {tp: 100}
        assert admin.list_offsets({tp: "earliest"}) == {tp: 0}
        found = consumer.offsets_for_times({tp: BASE_TS + 10 * 42 - 5})[tp]
        assert found is not None
        assert found.offset == 42
        assert consumer.offsets_for_times({tp: BASE_TS + 10_000})[tp] is None
        consumer.assign([tp])
        consumer.seek(tp, 90)
        got = []
        for _ in range(50):
            got.extend(consumer.poll(timeout_ms=200))
            if len(got) >= 10:
                break
        assert [r.offset for r in got] == list(range(90, 100))
        consumer.seek_to_beginning()
        assert consumer.position(tp) == 0
        consumer.seek_to_end()
        assert consumer.position(tp) == 100
    finally:
        consumer.close()
        admin.close()
