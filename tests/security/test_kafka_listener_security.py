"""The Kafka-protocol listener secured, tested with real Kafka clients (confluent-kafka / librdkafka, and
kafka-python's admin client for ListTransactions, which confluent-kafka lacks): SASL_SSL with SCRAM and PLAIN,
and the same authorizer as the gRPC listeners."""

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
    from kafka import KafkaAdminClient

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
                       "offsets.topic.num.partitions": "2", "group.initial.rebalance.delay.ms": "0",
                       "transaction.state.log.num.partitions": "2", "transaction.state.log.replication.factor": "1",
                       "transaction.state.log.min.isr": "1"},
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


def test_list_transactions_shows_the_ids_the_caller_may_describe(secured: tuple[Cluster, TlsFiles]) -> None:
    """ListTransactions (66) over SASL_SSL from kafka-python's admin client: bob (WRITE on the transactional ids
    ``tx-*``, which implies DESCRIBE) opens two transactions with librdkafka's transactional producer; erin, with
    DESCRIBE on ``tx-visible`` alone, is listed that one only; carol, with no ACL, none; bob both."""
    cluster, files = secured
    with Admin({"bootstrap.servers": cluster.bootstrap_servers, **files.client_config()}) as admin:
        admin.upsert_scram_credential("erin", "SCRAM-SHA-256", "erin-secret", 4096)
        admin.create_acls([
            AclBinding(ResourceType.TRANSACTIONAL_ID, "tx-", PatternType.PREFIXED, "User:bob", "*",
                       AclOperation.WRITE, AclPermissionType.ALLOW),
            AclBinding(ResourceType.TRANSACTIONAL_ID, "tx-visible", PatternType.LITERAL, "User:erin", "*",
                       AclOperation.DESCRIBE, AclPermissionType.ALLOW),
        ])  # fmt: skip
    bob = client(cluster, files, "bob", "bob-secret")
    producers = [open_transaction(bob, txn_id) for txn_id in ("tx-visible", "tx-hidden")]
    try:

        def listed(user: str, password: str, mechanism: str = "SCRAM-SHA-256") -> list[str]:
            kafka_admin = KafkaAdminClient(
                bootstrap_servers=cluster.kafka_bootstrap_servers, security_protocol="SASL_SSL",
                ssl_cafile=str(files.ca), sasl_mechanism=mechanism, sasl_plain_username=user,
                sasl_plain_password=password, request_timeout_ms=10000,
            )  # fmt: skip
            try:
                by_broker = kafka_admin.list_transactions()
            finally:
                kafka_admin.close()
            return sorted(t.transactional_id for listing in by_broker.values() for t in listing)

        assert listed("bob", "bob-secret") == ["tx-hidden", "tx-visible"]
        # erin's ACL came in the same metadata batch as bob's (one create_acls call): bob's wait was erin's too
        assert listed("erin", "erin-secret") == ["tx-visible"]
        assert listed("carol", "carol-secret", "SCRAM-SHA-512") == []
    finally:
        for producer in producers:
            producer.abort_transaction(30)
        producers.clear()  # librdkafka's producers go now, before the fixture stops the broker


def open_transaction(config: dict[str, Any], txn_id: str) -> Producer:
    """A librdkafka transactional producer with one record sent in an open transaction. The first tries may
    meet a broker that has not yet received the ACL (bounded retries, a new producer each time: the error
    is fatal to the one that met it)."""
    deadline = time.monotonic() + 30
    while True:
        producer = Producer({**config, "transactional.id": txn_id, "transaction.timeout.ms": 60000})
        try:
            producer.init_transactions(15)
            break
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED or time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    producer.begin_transaction()
    producer.produce("orders", f"in {txn_id}".encode())
    producer.flush(30)
    return producer
