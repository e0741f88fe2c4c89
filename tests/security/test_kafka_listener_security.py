"""The Kafka-protocol listener secured, tested with a real Kafka client (confluent-kafka / librdkafka): SASL_SSL
with SCRAM and PLAIN, and the same authorizer as the gRPC listeners."""

from __future__ import annotations

import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

with warnings.catch_warnings():  # kafka-python's import (by tests.kafka.conftest) warns on this Python
    warnings.simplefilter("ignore", DeprecationWarning)
    from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
    from confluent_kafka.admin import AdminClient

from odradek import Admin, NewTopic
from odradek.security.acls import AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType
from tests.broker.cluster import Cluster
from tests.security.tls_files import TlsFiles, make_tls_files

pytestmark = pytest.mark.slow


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[tuple[Cluster, TlsFiles]]:
    files = make_tls_files(tmp_path / "tls")
    authz = {"authorizer.class.name": "odradek.StandardAuthorizer", "super.users": "User:CN=node;User:CN=alice"}
    client_tls = grpc.ssl_channel_credentials(files.ca.read_bytes(), files.client_key.read_bytes(),
                                              files.client_cert.read_bytes())  # fmt: skip
    with Cluster(
        tmp_path, brokers=1, kafka=True,
        controller_config={**files.node_config("CONTROLLER:SSL"), **authz},
        broker_config={**files.node_config("PLAINTEXT:SSL,KAFKA:SASL_SSL,CONTROLLER:SSL"), **authz,
                       "listener.name.kafka.ssl.client.auth": "none", "offsets.topic.replication.factor": "1",
                       "offsets.topic.num.partitions": "2", "group.initial.rebalance.delay.ms": "0"},
        channel_credentials=client_tls,
    ) as cluster:  # fmt: skip
        with Admin({"bootstrap.servers": cluster.bootstrap_servers, **files.client_config()}) as admin:
            admin.create_topics([NewTopic(t, num_partitions=1, replication_factor=1) for t in ("orders", "secret")])
            admin.upsert_scram_credential("bob", "SCRAM-SHA-256", "bob-secret", 4096)
            admin.upsert_scram_credential("carol", "SCRAM-SHA-512", "carol-secret", 4096)
            admin.create_acls([
                AclBinding(ResourceType.TOPIC, "orders", PatternType.LITERAL, "User:bob", "*", op,
                           AclPermissionType.ALLOW) for op in (AclOperation.WRITE, AclOperation.READ)
            ] + [AclBinding(ResourceType.GROUP, "g", PatternType.LITERAL, "User:bob", "*", AclOperation.READ,
                            AclPermissionType.ALLOW)])  # fmt: skip
        yield cluster, files


def client(cluster: Cluster, files: TlsFiles, user: str, password: str, mechanism: str = "SCRAM-SHA-256") -> dict[
        str, Any]:  # fmt: skip
    return {"bootstrap.servers": cluster.kafka_bootstrap_servers, "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(files.ca), "sasl.mechanism": mechanism, "sasl.username": user,
            "sasl.password": password}  # fmt: skip


def deliver(config: dict[str, Any], topic: str, values: list[bytes]) -> list[KafkaError | None]:
    errors: list[KafkaError | None] = []
    producer = Producer({**config, "message.timeout.ms": 15000})
    for value in values:
        producer.produce(topic, value, on_delivery=lambda err, msg: errors.append(err))
    producer.flush(30)
    assert len(errors) == len(values)
    return errors


def test_real_kafka_client_over_sasl_ssl(secured: tuple[Cluster, TlsFiles]) -> None:
    cluster, files = secured
    bob = client(cluster, files, "bob", "bob-secret")
    assert deliver(bob, "orders", [b"a", b"b", b"c"]) == [None, None, None]
    consumer = Consumer({**bob, "group.id": "g", "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.subscribe(["orders"])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < 3 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None:
                assert message.error() is None, message.error()
                got.append(message.value())
        assert got == [b"a", b"b", b"c"]
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()

    # the metadata shows bob what he may describe; writing elsewhere is refused and writes nothing
    topics = AdminClient(bob).list_topics(timeout=10).topics
    assert "orders" in topics
    assert "secret" not in topics
    refused = deliver(bob, "secret", [b"x"])
    assert refused[0] is not None
    assert refused[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    with Admin({"bootstrap.servers": cluster.bootstrap_servers, **files.client_config()}) as admin:
        from odradek import TopicPartition

        assert admin.list_offsets({TopicPartition("secret", 0): "latest"})[TopicPartition("secret", 0)] == 0

    # PLAIN over SASL_SSL, checked against the user's SCRAM credential
    carol = client(cluster, files, "carol", "carol-secret", "PLAIN")
    assert AdminClient(carol).list_topics(timeout=10).topics.keys() <= {"orders", "secret"}  # answered: signed in

    # wrong credentials and a client without TLS get nothing
    for config in (client(cluster, files, "bob", "wrong"), client(cluster, files, "nobody", "x", "SCRAM-SHA-512"),
                   {"bootstrap.servers": cluster.kafka_bootstrap_servers}):  # fmt: skip
        errors: list[KafkaError] = []
        refused = AdminClient({**config, "error_cb": errors.append, "log_level": 0})
        with pytest.raises(KafkaException):
            refused.list_topics(timeout=5)
        refused.poll(1)  # serves the error callbacks
        if "sasl.username" in config:
            assert any(e.code() == KafkaError._AUTHENTICATION and "invalid credentials" in e.str() for e in errors)
