"""Stock Kafka clients' transactions against the Kafka listener (librdkafka's transactional producer and
read_committed consumer, and the admin client's transaction listing): commit seen, abort never, offsets sent
with the transaction, a zombie fenced, and the same transactions read by Odradek's own read_committed
consumer (the two protocols see one log)."""

from __future__ import annotations

import socket
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from odradek import Consumer as OdradekConsumer
from odradek import TopicPartition as OdradekTopicPartition
from tests.broker.cluster import Cluster
from tests.kafka.helpers import create_topic, read_response_frame, request_frame

pytestmark = pytest.mark.slow

TXN_CONFIG = {
    "transaction.state.log.num.partitions": "3",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
}


@pytest.fixture(scope="module")
def txn_cluster(tmp_path_factory: pytest.TempPathFactory) -> Cluster:
    from tests.kafka.conftest import KAFKA_BROKER_CONFIG

    with Cluster(tmp_path_factory.mktemp("kafka-txn"), brokers=1, kafka=True,
                 broker_config={**KAFKA_BROKER_CONFIG, **TXN_CONFIG}) as c:  # fmt: skip
        yield c  # type: ignore[misc]


def txn_producer(bootstrap: str, txn_id: str) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 5,
                     "transaction.timeout.ms": 60000})  # fmt: skip


def read_committed(bootstrap: str, topic: str, partitions: int, expect: int, timeout_s: float = 20.0) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4()}",
                         "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "enable.partition.eof": False})  # fmt: skip
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            m = consumer.poll(0.3)
            if m is not None and m.error() is None:
                values.append(m.value())
            if len(values) >= expect and m is None:
                break
    finally:
        consumer.close()
    return values


def test_librdkafka_transactions_commit_and_abort(txn_cluster: Cluster) -> None:
    bootstrap = txn_cluster.kafka_bootstrap_servers
    create_topic(bootstrap, "k-txn", partitions=2)
    p = txn_producer(bootstrap, "k-txn-1")
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(20):
        p.produce("k-txn", value=f"commit-{i}".encode(), partition=i % 2)
    p.commit_transaction(30)
    p.begin_transaction()
    for i in range(20):
        p.produce("k-txn", value=f"abort-{i}".encode(), partition=i % 2)
    p.flush(30)
    p.abort_transaction(30)
    p.begin_transaction()
    p.produce("k-txn", value=b"final", partition=1)
    p.commit_transaction(30)
    expected = sorted([f"commit-{i}".encode() for i in range(20)] + [b"final"])
    assert sorted(read_committed(bootstrap, "k-txn", 2, 21)) == expected
    ours = OdradekConsumer({"bootstrap.servers": txn_cluster.bootstrap_servers, "isolation.level": "read_committed",
                            "auto.offset.reset": "earliest", "enable.auto.commit": False})  # fmt: skip
    ours.assign([OdradekTopicPartition("k-txn", 0), OdradekTopicPartition("k-txn", 1)])
    seen: list[bytes] = []
    deadline = time.monotonic() + 15
    while len(seen) < 21 and time.monotonic() < deadline:
        seen.extend(r.value or b"" for r in ours.poll(300))
    ours.close()
    assert sorted(seen) == expected


def test_librdkafka_send_offsets_and_zombie_fencing(txn_cluster: Cluster) -> None:
    bootstrap = txn_cluster.kafka_bootstrap_servers
    create_topic(bootstrap, "k-in")
    create_topic(bootstrap, "k-out")
    plain = Producer({"bootstrap.servers": bootstrap})
    for i in range(5):
        plain.produce("k-in", value=f"m{i}".encode(), partition=0)
    plain.flush(30)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "k-copier", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})  # fmt: skip
    consumer.subscribe(["k-in"])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < 5 and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m)
    assert len(got) == 5
    p = txn_producer(bootstrap, "k-copier-tx")
    p.init_transactions(30)
    p.begin_transaction()
    for m in got:
        p.produce("k-out", value=m.value().upper(), partition=0)
    p.send_offsets_to_transaction([TopicPartition("k-in", 0, got[-1].offset() + 1)],
                                  consumer.consumer_group_metadata(), 30)  # fmt: skip
    p.commit_transaction(30)
    committed = consumer.committed([TopicPartition("k-in", 0)], timeout=10)
    deadline = time.monotonic() + 10
    while committed[0].offset != 5 and time.monotonic() < deadline:
        time.sleep(0.1)
        committed = consumer.committed([TopicPartition("k-in", 0)], timeout=10)
    assert committed[0].offset == 5
    consumer.close()
    assert read_committed(bootstrap, "k-out", 1, 5) == [b"M0", b"M1", b"M2", b"M3", b"M4"]

    zombie = p
    zombie.begin_transaction()
    zombie.produce("k-out", value=b"zombie", partition=0)
    zombie.flush(30)
    successor = txn_producer(bootstrap, "k-copier-tx")
    successor.init_transactions(30)  # fences the zombie and aborts its transaction
    with pytest.raises(KafkaException) as raised:
        zombie.commit_transaction(30)
    assert raised.value.args[0].fatal() or "fenced" in str(raised.value).lower()
    successor.begin_transaction()
    successor.produce("k-out", value=b"successor", partition=0)
    successor.commit_transaction(30)
    assert read_committed(bootstrap, "k-out", 1, 6) == [b"M0", b"M1", b"M2", b"M3", b"M4", b"successor"]


def kafka_call(address: str, api_key: int, version: int, body: object) -> object:
    """One request on the Kafka protocol, by hand (confluent-kafka has no transaction admin calls): header v2,
    the kio body, then the response header v1 and body."""
    from kio.index import load_response_schema
    from kio.schema.response_header.v1.header import ResponseHeader
    from kio.serial import entity_reader

    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=20) as conn:
        conn.sendall(request_frame(api_key, version, 7, body))
        payload = read_response_frame(conn)
    header, used = entity_reader(ResponseHeader)(payload, 0)
    assert header.correlation_id == 7
    response, _ = entity_reader(load_response_schema(api_key, version))(payload, used)
    return response


def test_list_and_describe_transactions_on_the_kafka_protocol(txn_cluster: Cluster) -> None:
    from kio.index import load_request_schema

    bootstrap = txn_cluster.kafka_bootstrap_servers
    create_topic(bootstrap, "k-admin")
    p = txn_producer(bootstrap, "k-admin-tx")
    p.init_transactions(30)
    p.begin_transaction()
    p.produce("k-admin", value=b"x", partition=0)
    p.flush(30)
    address = bootstrap.split(",")[0]
    listing = kafka_call(address, 66, 0, load_request_schema(66, 0)(state_filters=(), producer_id_filters=()))
    states = {t.transactional_id: t.transaction_state for t in listing.transaction_states}  # type: ignore[attr-defined]
    assert states["k-admin-tx"] == "Ongoing"
    described = kafka_call(address, 65, 0, load_request_schema(65, 0)(transactional_ids=("k-admin-tx", "nope")))
    found = {t.transactional_id: t for t in described.transaction_states}  # type: ignore[attr-defined]
    assert [(d.topic, tuple(d.partitions)) for d in found["k-admin-tx"].topics] == [("k-admin", (0,))]
    assert found["nope"].error_code.name == "transactional_id_not_found"
    p.abort_transaction(30)
