"""An idempotent confluent-kafka producer (``enable.idempotence=true``, ``acks=all``) through a SIGKILL of
the partition leader (3 brokers, replication factor 3, ``min.insync.replicas=2``): every record is
delivered, and the log holds each exactly once and in order.

To make the retries certain rather than a matter of timing, each broker is advertised behind a
:class:`~tests.kafka.proxy.LossyKafkaProxy`: mid-stream the leader's next two Produce answers are lost
(the records are on the in-sync followers: acks=all answered) and the leader is killed; the producer
retries those batches, and every other one that was in flight, on the new leader, whose producer state came
from replication. Without idempotence (the control run) the retries write records twice, which shows the
check can fail."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from controller.ports import free_ports
from tests.broker.cluster import Cluster
from tests.kafka.conftest import KAFKA_BROKER_CONFIG
from tests.kafka.proxy import LossyKafkaProxy

pytestmark = pytest.mark.slow

TOPIC = "idempotent"
TOTAL = 2000
WINDOW = 300  # records queued or in flight at most: a stream, not one burst
WAIT_S = 120.0


@pytest.fixture
def three(tmp_path: Path) -> Iterator[tuple[Cluster, list[LossyKafkaProxy]]]:
    cluster = Cluster(tmp_path, brokers=3, kafka=True, broker_config=KAFKA_BROKER_CONFIG, start=False)
    proxies = [LossyKafkaProxy(f"127.0.0.1:{port}", address)
               for port, address in zip(free_ports(3), cluster.kafka_addresses, strict=True)]  # fmt: skip
    for broker, proxy in zip(cluster.brokers, proxies, strict=True):
        broker.argv += ["--advertised", f"KAFKA://{proxy.listen}"]
    try:
        cluster.start()
        cluster.create_topic(TOPIC, partitions=1, replication_factor=3, configs={"min.insync.replicas": "2"})
        cluster.wait_for(lambda: len(cluster.partition_metadata(TOPIC, 0).isr) == 3, 30, "3 in-sync replicas")
        yield cluster, proxies
    finally:
        cluster.stop()
        for proxy in proxies:
            proxy.close()


def read_all(bootstrap: str, count: int) -> list[bytes]:
    """The partition from offset 0 to its end (at least ``count`` records), through the Kafka listener."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "idempotent-check",
                         "enable.partition.eof": True, "enable.auto.commit": False})  # fmt: skip
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + WAIT_S
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            error = message.error()
            if error is None:
                values.append(message.value() or b"")
                continue
            assert error.code() == KafkaError._PARTITION_EOF, f"consumer error: {error}"
            if len(values) >= count:
                return values
    finally:
        consumer.close()
    raise AssertionError(f"read {len(values)} records in {WAIT_S} s, expected at least {count}")


@pytest.mark.parametrize("idempotence", [True, False])
def test_a_leader_kill_with_lost_answers_loses_and_duplicates_nothing(
    three: tuple[Cluster, list[LossyKafkaProxy]], idempotence: bool
) -> None:
    cluster, proxies = three
    delivered: list[int] = []
    errors: list[str] = []

    def on_delivery(error: KafkaError | None, message: object) -> None:
        if error is not None:
            errors.append(str(error))
        else:
            delivered.append(message.offset())  # type: ignore[attr-defined]

    producer = Producer({"bootstrap.servers": ",".join(p.listen for p in proxies), "acks": "all",
                         "enable.idempotence": idempotence, "linger.ms": 2, "batch.size": 2048,
                         "retry.backoff.ms": 1000, "retry.backoff.max.ms": 1000, "request.timeout.ms": 10000,
                         "message.timeout.ms": int(WAIT_S * 1000)})  # fmt: skip
    leader = cluster.leader(TOPIC, 0)
    lossy = proxies[leader]
    deadline = time.monotonic() + WAIT_S
    for i in range(TOTAL):
        producer.produce(TOPIC, value=b"%06d" % i, on_delivery=on_delivery)
        producer.poll(0)
        if i == TOTAL // 3:
            while len(delivered) < TOTAL // 6 and time.monotonic() < deadline:
                producer.poll(0.01)  # the stream is flowing
            assert len(delivered) >= TOTAL // 6, errors
            lossy.lose_answers(2)  # retried after 1 s: by then the leader is gone
        if lossy.lost == 2 and cluster.brokers[leader].alive():
            cluster.kill_broker(leader)
        while i - len(delivered) - len(errors) >= WINDOW and time.monotonic() < deadline:
            producer.poll(0.01)
    cluster.wait_for(lambda: lossy.lost == 2, 60, "two Produce answers lost")
    if cluster.brokers[leader].alive():
        cluster.kill_broker(leader)
    assert producer.flush(WAIT_S) == 0, "records left undelivered"
    assert errors == []
    assert cluster.leader(TOPIC, 0, via=(leader + 1) % 3) != leader
    survivors = ",".join(p.listen for b, p in enumerate(proxies) if b != leader)
    values = read_all(survivors, TOTAL)
    if idempotence:
        assert sorted(delivered) == list(range(TOTAL)), "each record acknowledged once, at offsets 0..n-1"
        assert values == [b"%06d" % i for i in range(TOTAL)]
    else:
        assert sorted(set(values)) == [b"%06d" % i for i in range(TOTAL)]  # no gap either way
        assert len(values) > TOTAL  # but duplicates
