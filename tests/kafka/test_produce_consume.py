"""Stock Kafka clients against the Kafka listener: produce with every acks level and codec, consume from
earliest, latest and a timestamp, and records crossing between the Kafka protocol and gRPC unchanged."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from odradek import Consumer as OdradekConsumer
from odradek import Producer as OdradekProducer
from odradek import TopicPartition as OdradekTopicPartition
from tests.broker.cluster import Cluster
from tests.kafka.helpers import consume, create_topic

pytestmark = pytest.mark.slow

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_confluent_produce_every_codec_and_acks_read_back_by_kafka_python(bootstrap: str, acks: str) -> None:
    from kafka import KafkaConsumer

    topic = f"codecs-acks-{acks}"
    create_topic(bootstrap, topic)
    sent = []
    for codec in CODECS:
        producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "compression.type": codec,
                             "enable.idempotence": acks == "all", "linger.ms": 5})  # fmt: skip
        for i in range(50):
            value = f"{codec}-{i}-".encode() * 3
            producer.produce(topic, key=f"k{i}".encode(), value=value)
            sent.append(value)
        assert producer.flush(30) == 0
    reader = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                           consumer_timeout_ms=15000, enable_auto_commit=False)  # fmt: skip
    values = [m.value for _, m in zip(range(len(sent)), reader, strict=False)]
    reader.close()
    if acks != "0":
        assert values == sent
    else:  # nothing waits for an acks=0 append: two producers' requests may land in either order, each in order
        assert sorted(values) == sorted(sent)
        for codec in CODECS:
            mine = [v for v in values if v.startswith(codec.encode() + b"-")]
            assert mine == [v for v in sent if v.startswith(codec.encode() + b"-")]


def test_kafka_python_snappy_producer_read_by_confluent(bootstrap: str) -> None:
    from kafka import KafkaProducer

    topic = "kp-snappy"
    create_topic(bootstrap, topic, partitions=2)
    producer = KafkaProducer(bootstrap_servers=bootstrap, compression_type="snappy", acks="all")
    for i in range(40):
        producer.send(topic, key=f"k{i}".encode(), value=f"v{i}".encode(), headers=[("h", b"%d" % i)])
    producer.flush(30)
    producer.close()
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "kp-snappy-reader",
                         "auto.offset.reset": "earliest"})  # fmt: skip
    consumer.subscribe([topic])
    got = consume(consumer, 40)
    consumer.close()
    assert sorted(m.value() for m in got) == sorted(f"v{i}".encode() for i in range(40))
    assert all(m.headers() == [("h", m.value()[1:])] for m in got)


def test_consume_from_latest_and_from_a_timestamp(bootstrap: str) -> None:
    topic = "positions"
    create_topic(bootstrap, topic)
    producer = Producer({"bootstrap.servers": bootstrap})
    base = int(time.time() * 1000) - 100_000
    for i in range(10):
        producer.produce(topic, value=b"old-%d" % i, timestamp=base + i * 1000)
    assert producer.flush(30) == 0
    latest = Consumer({"bootstrap.servers": bootstrap, "group.id": "latest-reader", "auto.offset.reset": "latest"})
    latest.subscribe([topic])
    deadline = time.monotonic() + 30
    while not latest.assignment() and time.monotonic() < deadline:
        latest.poll(0.2)
    low, high = latest.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    assert (low, high) == (0, 10)
    # the position must be resolved (ListOffsets latest) before the new record is sent; position() stays unset
    # until a record is consumed, but the cached high watermark is set once the partition's offsets are known
    def resolved() -> bool:
        return latest.get_watermark_offsets(TopicPartition(topic, 0), cached=True)[1] >= 0

    while not resolved() and time.monotonic() < deadline:
        latest.poll(0.2)
    assert resolved(), "the consumer did not resolve its position within 30 s"
    producer.produce(topic, value=b"new")
    assert producer.flush(30) == 0
    assert [m.value() for m in consume(latest, 1)] == [b"new"]
    latest.close()

    by_time = Consumer({"bootstrap.servers": bootstrap, "group.id": "time-reader"})
    wanted = by_time.offsets_for_times([TopicPartition(topic, 0, base + 6500)], timeout=10)
    assert wanted[0].offset == 7
    by_time.assign(wanted)
    assert [m.value() for m in consume(by_time, 4)] == [b"old-7", b"old-8", b"old-9", b"new"]
    by_time.close()


def test_records_cross_protocols_unchanged(cluster: Cluster, bootstrap: str) -> None:
    """Keys, values, headers and timestamps: gRPC (odradek client) -> Kafka protocol and back."""
    topic = "crossing"
    create_topic(bootstrap, topic)
    ts = int(time.time() * 1000) - 5000
    with OdradekProducer({"bootstrap.servers": cluster.bootstrap_servers}) as producer:
        for i in range(20):
            key = b"key-%d" % i if i % 3 else None
            headers = [("a", b"1"), ("b", b"x" * i)]
            value = b"grpc-%d" % i
            sent = producer.send(topic, value=value, key=key, headers=headers, partition=0, timestamp_ms=ts + i)
            sent.result(10)
    kafka = Producer({"bootstrap.servers": bootstrap})
    for i in range(20):
        kafka.produce(topic, value=b"kafka-%d" % i, key=b"key-%d" % i if i % 3 else None, partition=0,
                      headers=[("a", b"1"), ("b", b"y" * i)], timestamp=ts + 100 + i)  # fmt: skip
    assert kafka.flush(30) == 0

    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": "crossing-kafka"})
    reader.assign([TopicPartition(topic, 0, 0)])
    via_kafka = [(m.offset(), m.key(), m.value(), m.headers() or [], m.timestamp()[1])
                 for m in consume(reader, 40)]  # fmt: skip
    reader.close()
    odradek = OdradekConsumer({"bootstrap.servers": cluster.bootstrap_servers, "auto.offset.reset": "earliest"})
    odradek.assign([OdradekTopicPartition(topic, 0)])
    via_grpc: list[tuple[object, ...]] = []
    deadline = time.monotonic() + 30
    while len(via_grpc) < 40 and time.monotonic() < deadline:
        for r in odradek.poll(timeout_ms=500):
            via_grpc.append((r.offset, r.key, r.value, [(k, v) for k, v in r.headers], r.timestamp))
    odradek.close()
    assert via_grpc == via_kafka
    assert via_kafka[0][1:] == (None, b"grpc-0", [("a", b"1"), ("b", b"")], ts)
    assert via_kafka[25][1:] == (b"key-5", b"kafka-5", [("a", b"1"), ("b", b"yyyyy")], ts + 105)
