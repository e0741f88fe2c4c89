"""SASL and the authorizer with real processes: one controller and two brokers; nodes and the admin (alice)
authenticate by certificate on SSL listeners (mutual TLS), users by SCRAM or PLAIN on the brokers' SASL_SSL
``CLIENT`` listener. The authorizer (StandardAuthorizer) is on everywhere, with ``super.users`` the nodes and
alice. Every refused call changes nothing; ACL changes take effect on every broker without a restart."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from odradek import Admin, Consumer, NewTopic, Producer, TopicPartition
from odradek.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    KafkaError,
    SaslAuthenticationFailedError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
)
from odradek.security.acls import AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType
from proto import broker_pb2, broker_pb2_grpc, controller_pb2, controller_pb2_grpc
from tests.broker.cluster import Cluster
from tests.security.tls_files import TlsFiles, make_tls_files

pytestmark = pytest.mark.slow

SUPERS = "User:CN=node;User:CN=alice"


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[tuple[Cluster, TlsFiles]]:
    files = make_tls_files(tmp_path / "tls")
    authz = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer", "super.users": SUPERS}
    client_tls = grpc.ssl_channel_credentials(files.ca.read_bytes(), files.client_key.read_bytes(),
                                              files.client_cert.read_bytes())  # fmt: skip
    with Cluster(
        tmp_path, brokers=2, client_listener="CLIENT",
        controller_config={**files.node_config("CONTROLLER:SSL"), **authz},
        broker_config={**files.node_config("PLAINTEXT:SSL,CLIENT:SASL_SSL,CONTROLLER:SSL"), **authz,
                       "listener.name.client.ssl.client.auth": "none", "offsets.topic.replication.factor": "2",
                       "offsets.topic.num.partitions": "2", "transaction.state.log.replication.factor": "2",
                       "transaction.state.log.min.isr": "1", "transaction.state.log.num.partitions": "2"},
        channel_credentials=client_tls,
    ) as cluster:  # fmt: skip
        yield cluster, files


def user(cluster: Cluster, files: TlsFiles, name: str, password: str, mechanism: str = "SCRAM-SHA-256",
         via: int | None = None) -> dict[str, object]:  # fmt: skip
    servers = cluster.client_addresses[via] if via is not None else ",".join(cluster.client_addresses)
    return {"bootstrap.servers": servers, "security.protocol": "SASL_SSL", "ssl.ca.location": str(files.ca),
            "sasl.mechanism": mechanism, "sasl.username": name, "sasl.password": password}  # fmt: skip


def admin_of(config: dict[str, object]) -> Admin:
    return Admin({**config, "default.api.timeout.ms": 5000, "request.timeout.ms": 3000})


def acl(principal: str, op: AclOperation, rtype: ResourceType = ResourceType.TOPIC, name: str = "orders",
        pattern: PatternType = PatternType.LITERAL) -> AclBinding:  # fmt: skip
    return AclBinding(rtype, name, pattern, principal, "*", op, AclPermissionType.ALLOW)


def expect(error: type[KafkaError], call: Callable[[], Any]) -> KafkaError:
    with pytest.raises(error) as caught:
        call()
    return caught.value


def produce(config: dict[str, object], topic: str, values: list[bytes], idempotence: bool = True) -> list[int]:
    producer = Producer({**config, "max.block.ms": 5000, "delivery.timeout.ms": 10000, "request.timeout.ms": 3000,
                         "linger.ms": 0, "enable.idempotence": idempotence})  # fmt: skip
    try:
        return [producer.send(topic, value=v).result(timeout=15).offset for v in values]
    finally:
        producer.close()


def test_sasl_and_acls(secured: tuple[Cluster, TlsFiles]) -> None:
    cluster, files = secured
    alice_config = {"bootstrap.servers": cluster.bootstrap_servers, **files.client_config()}
    alice = admin_of(alice_config)
    try:
        alice.create_topics([NewTopic("orders", num_partitions=1, replication_factor=2)])
        alice.upsert_scram_credential("bob", "SCRAM-SHA-256", "bob-secret", 4096)
        alice.upsert_scram_credential("carol", "SCRAM-SHA-512", "carol-secret", 4096)
        bob = user(cluster, files, "bob", "bob-secret")

        # --- authentication ---
        for wrong in (user(cluster, files, "bob", "nope"), user(cluster, files, "nobody", "bob-secret"),
                      user(cluster, files, "carol", "carol-secret", "SCRAM-SHA-256")):  # fmt: skip
            with admin_of(wrong) as refused:
                error = expect(SaslAuthenticationFailedError, refused.list_topics)
                assert "invalid credentials" in str(error)
        with admin_of(user(cluster, files, "carol", "carol-secret", "PLAIN")) as carol:
            assert carol.list_topics() == []  # PLAIN on SASL_SSL authenticates (against SCRAM credentials)

        # --- topics: nothing without ACLs, and nothing changes ---
        with admin_of(bob) as bob_admin:
            assert bob_admin.list_topics() == []  # Metadata hides what bob may not describe
            expect(TopicAuthorizationFailedError, lambda: produce(bob, "orders", [b"x"]))
            expect(TopicAuthorizationFailedError, lambda: bob_admin.delete_topics(["orders"]))
            expect(TopicAuthorizationFailedError,
                   lambda: bob_admin.create_topics([NewTopic("bobs", num_partitions=1, replication_factor=1)]))
            expect(ClusterAuthorizationFailedError, lambda: bob_admin.create_acls([acl("User:bob", AclOperation.ALL)]))
            expect(ClusterAuthorizationFailedError, lambda: bob_admin.describe_acls())
            expect(ClusterAuthorizationFailedError,
                   lambda: bob_admin.upsert_scram_credential("bob", "SCRAM-SHA-256", "hijack", 4096))
        assert "orders" in alice.list_topics()
        assert "bobs" not in alice.list_topics()
        assert alice.list_offsets({TopicPartition("orders", 0): "latest"})[TopicPartition("orders", 0)] == 0
        assert alice.describe_acls() == []

        # --- an ACL takes effect on every broker, without a restart ---
        alice.create_acls([acl("User:bob", AclOperation.WRITE)])
        for via in (0, 1):
            with admin_of(user(cluster, files, "bob", "bob-secret", via=via)) as bob_admin:
                assert bob_admin.list_topics() == ["orders"]  # WRITE implies DESCRIBE
        assert produce(bob, "orders", [b"a", b"b"]) == [0, 1]

        # --- consuming needs READ on the group and on the topic: assign() with a group.id looks the group's
        # committed offsets up first (OffsetFetch needs the group), as Kafka's consumer does ---
        orders = TopicPartition("orders", 0)
        consumer_config = {**bob, "group.id": "billing", "auto.offset.reset": "earliest",
                           "enable.auto.commit": False, "default.api.timeout.ms": 5000}  # fmt: skip
        consumer = Consumer(consumer_config)
        try:
            consumer.assign([orders])
            expect(GroupAuthorizationFailedError, lambda: consumer.poll(timeout_ms=3000))
            expect(GroupAuthorizationFailedError, lambda: consumer.commit({orders: 2}))
        finally:
            consumer.close()
        alice.create_acls([acl("User:bob", AclOperation.READ, ResourceType.GROUP, "bill", PatternType.PREFIXED)])
        consumer = Consumer(consumer_config)
        try:
            consumer.assign([orders])
            expect(TopicAuthorizationFailedError, lambda: consumer.poll(timeout_ms=3000))
        finally:
            consumer.close()
        alice.create_acls([acl("User:bob", AclOperation.READ)])
        consumer = Consumer(consumer_config)
        try:
            consumer.assign([orders])
            seen: list[bytes | None] = []
            for _ in range(40):
                seen += [r.value for r in consumer.poll(timeout_ms=250)]
                if len(seen) >= 2:
                    break
            assert seen == [b"a", b"b"]
            consumer.commit({orders: 2})
            assert consumer.committed(orders) == 2
        finally:
            consumer.close()

        # --- a DENY wins, and removing ACLs takes effect too ---
        alice.create_acls([AclBinding(ResourceType.TOPIC, "ord", PatternType.PREFIXED, "User:bob", "*",
                                      AclOperation.WRITE, AclPermissionType.DENY)])  # fmt: skip
        expect(TopicAuthorizationFailedError, lambda: produce(bob, "orders", [b"c"], idempotence=False))
        # an idempotent producer needs WRITE on some topic (or IdempotentWrite) for its producer id: none is left
        expect(ClusterAuthorizationFailedError, lambda: produce(bob, "orders", [b"c"]))
        from odradek.security.acls import AclBindingFilter

        removed = alice.delete_acls([AclBindingFilter(principal="User:bob", permission_type=AclPermissionType.DENY)])
        assert len(removed) == 1
        assert produce(bob, "orders", [b"c"]) == [2]
    finally:
        alice.close()


def test_broker_only_operations_need_cluster_action(secured: tuple[Cluster, TlsFiles]) -> None:
    cluster, files = secured
    with admin_of({"bootstrap.servers": cluster.bootstrap_servers, **files.client_config()}) as alice:
        alice.upsert_scram_credential("bob", "SCRAM-SHA-256", "bob-secret", 4096)
        alice.create_topics([NewTopic("orders", num_partitions=1, replication_factor=1)])
        alice.create_acls([acl("User:bob", AclOperation.ALL)])  # everything on the topic, nothing on the cluster
    from odradek.net.channels import ChannelPool
    from odradek.security.config import SecurityConfig

    pool = ChannelPool(max_message_bytes=1 << 20, security=SecurityConfig.from_mapping(user(cluster, files, "bob",
                                                                                             "bob-secret")))
    try:
        stub = pool.stub(cluster.client_addresses[0])
        follower_fetch = broker_pb2.FetchRequest(replica_id=1, replica_epoch=1, max_wait_ms=0, topics=[
            broker_pb2.FetchTopic(name="orders", partitions=[broker_pb2.FetchPartition(partition=0, fetch_offset=0)])])
        with pytest.raises(grpc.RpcError) as refused:
            stub.Fetch(follower_fetch, timeout=5)
        assert refused.value.code() is grpc.StatusCode.PERMISSION_DENIED
        assert refused.value.details().startswith("CLUSTER_AUTHORIZATION_FAILED")
        consumer_fetch = broker_pb2.FetchRequest(replica_id=-1, max_wait_ms=0, topics=follower_fetch.topics)
        assert stub.Fetch(consumer_fetch, timeout=5) is not None  # the same data as a consumer: allowed
        # a consumer's FetchStream through the client's channel: its SASL interceptor adds bob's token to the
        # stream; each message is checked as a Fetch
        assert len(list(stub.FetchStream(iter([consumer_fetch, consumer_fetch]), timeout=5))) == 2
        with pytest.raises(grpc.RpcError) as streamed_follower:
            list(stub.FetchStream(iter([consumer_fetch, follower_fetch]), timeout=5))
        assert streamed_follower.value.code() is grpc.StatusCode.PERMISSION_DENIED
        # the followers' stream too: each message is checked as a Fetch (bob's own session token)
        from odradek.security.sasl_client import SaslSession

        channel = grpc.secure_channel(cluster.client_addresses[0], grpc.ssl_channel_credentials(files.ca.read_bytes()))
        token = SaslSession(channel, SecurityConfig.from_mapping(user(cluster, files, "bob", "bob-secret"))).token()
        raw: Any = broker_pb2_grpc.BrokerStub(channel)  # type: ignore[no-untyped-call]
        with pytest.raises(grpc.RpcError) as streamed:
            list(raw.ReplicaFetch(iter([follower_fetch]), timeout=5, metadata=[("authorization", f"Bearer {token}")]))
        assert streamed.value.code() is grpc.StatusCode.PERMISSION_DENIED
        assert streamed.value.details().startswith("CLUSTER_AUTHORIZATION_FAILED")
        with pytest.raises(grpc.RpcError) as anonymous:  # and without a session: not even authenticated
            list(raw.ReplicaFetch(iter([consumer_fetch]), timeout=5))
        assert anonymous.value.code() is grpc.StatusCode.UNAUTHENTICATED
        channel.close()
    finally:
        pool.close()

    # a valid certificate of a non-broker cannot register as a broker or heartbeat in a broker's name
    eve = grpc.ssl_channel_credentials(files.ca.read_bytes(), files.eve_key.read_bytes(), files.eve_cert.read_bytes())
    with grpc.secure_channel(cluster.controllers[0].address, eve) as channel:
        controller: Any = controller_pb2_grpc.ControllerStub(channel)  # type: ignore[no-untyped-call]
        for call in (
            lambda: controller.RegisterBroker(controller_pb2.RegisterBrokerRequest(
                broker_id=0, incarnation_id="00000000-0000-4000-8000-000000000001",
                endpoints={"PLAINTEXT": "127.0.0.1:1"}), timeout=5),
            lambda: controller.BrokerHeartbeat(controller_pb2.BrokerHeartbeatRequest(broker_id=0, broker_epoch=1),
                                               timeout=5),
            lambda: controller.FetchMetadata(controller_pb2.FetchMetadataRequest(from_offset=0), timeout=5),
        ):  # fmt: skip
            with pytest.raises(grpc.RpcError) as denied:
                call()
            assert denied.value.code() is grpc.StatusCode.PERMISSION_DENIED
            assert denied.value.details().startswith("CLUSTER_AUTHORIZATION_FAILED")
    assert all(b.alive() for b in cluster.brokers)


def test_transactional_id_acls(secured: tuple[Cluster, TlsFiles]) -> None:
    """TRANSACTIONAL_ID end to end: without WRITE on it, init_transactions is refused and nothing is created;
    with it, a transaction commits; ListTransactions shows a principal only the ids it may DESCRIBE."""
    cluster, files = secured
    alice_config = {"bootstrap.servers": cluster.bootstrap_servers, **files.client_config()}
    alice = admin_of(alice_config)
    try:
        alice.create_topics([NewTopic("orders", num_partitions=1, replication_factor=2)])
        alice.upsert_scram_credential("dave", "SCRAM-SHA-256", "dave-secret", 4096)
        alice.create_acls([acl("User:dave", AclOperation.WRITE)])  # the topic, not the transactional id
        dave = user(cluster, files, "dave", "dave-secret")
        txn_config = {**dave, "transactional.id": "tx-dave", "max.block.ms": 5000, "request.timeout.ms": 3000,
                      "linger.ms": 0}  # fmt: skip
        refused = Producer(txn_config)
        try:
            expect(TransactionalIdAuthorizationFailedError, refused.init_transactions)
        finally:
            refused.close()
        assert [t for t in alice.list_transactions() if t.transactional_id == "tx-dave"] == []  # nothing created
        alice.create_acls([acl("User:dave", AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, "tx-dave")])
        producer = Producer(txn_config)
        try:
            for attempt in range(50):  # the ACL reaches both brokers with the metadata (bounded)
                try:
                    producer.init_transactions()
                    break
                except TransactionalIdAuthorizationFailedError:
                    producer.close()
                    producer = Producer(txn_config)
                    assert attempt < 49, "the ACL did not take effect"
            producer.begin_transaction()
            producer.send("orders", value=b"in-txn", partition=0)
            producer.commit_transaction()
        finally:
            producer.close()
        reader = Consumer({**alice_config, "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
        try:
            reader.assign([TopicPartition("orders", 0)])
            values: list[bytes] = []
            cluster.wait_for(lambda: values.extend(r.value or b"" for r in reader.poll(200)) or values, 15,
                             "the committed record")  # fmt: skip
            assert values == [b"in-txn"]
        finally:
            reader.close()
        other = Producer({**alice_config, "transactional.id": "tx-alice", "max.block.ms": 5000})
        other.init_transactions()
        other.close()
        with admin_of(dave) as dave_admin:
            assert [t.transactional_id for t in dave_admin.list_transactions()] == ["tx-dave"]  # DESCRIBE filter
        assert {t.transactional_id for t in alice.list_transactions()} >= {"tx-dave", "tx-alice"}
    finally:
        alice.close()
