"""A secured cluster (TLS everywhere, SASL_SSL clients, the authorizer on) loses nothing when leaders are killed:
a SCRAM user produces with acks=all through two leader kills, the second one moving leadership back to the
broker restarted after the first, where the producer's SASL session died with the process and is made again
(CS2); every acknowledged record is then read back, once."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from odradek import Admin, Consumer, NewTopic, Producer, TopicPartition
from odradek.security.acls import AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType
from tests.broker.cluster import Cluster
from tests.security.tls_files import TlsFiles, make_tls_files

pytestmark = pytest.mark.slow

TOPIC = "payments"


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[tuple[Cluster, TlsFiles]]:
    files = make_tls_files(tmp_path / "tls")
    authz = {"authorizer.class.name": "odradek.StandardAuthorizer", "super.users": "User:CN=node;User:CN=alice"}
    client_tls = grpc.ssl_channel_credentials(files.ca.read_bytes(), files.client_key.read_bytes(),
                                              files.client_cert.read_bytes())  # fmt: skip
    with Cluster(
        tmp_path, brokers=2, client_listener="CLIENT",
        controller_config={**files.node_config("CONTROLLER:SSL"), **authz},
        broker_config={**files.node_config("PLAINTEXT:SSL,CLIENT:SASL_SSL,CONTROLLER:SSL"), **authz,
                       "listener.name.client.ssl.client.auth": "none", "offsets.topic.replication.factor": "2",
                       "replica.lag.time.max.ms": "5000"},
        channel_credentials=client_tls,
    ) as cluster:  # fmt: skip
        yield cluster, files


class Sender(threading.Thread):
    """Sends "0", "1", ... until stopped; keeps what was acknowledged."""

    def __init__(self, config: dict[str, object]) -> None:
        super().__init__(daemon=True)
        self.producer = Producer({**config, "acks": "all", "linger.ms": 0, "delivery.timeout.ms": 60000,
                                  "request.timeout.ms": 3000})  # fmt: skip
        self.acked: list[bytes] = []
        self.failed: list[BaseException] = []
        self.stop = threading.Event()

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            future = self.producer.send(TOPIC, value=str(i).encode())
            future.add_done_callback(self._done(str(i).encode()))
            i += 1
            time.sleep(0.01)
        self.producer.flush(timeout=90)
        self.producer.close()

    def _done(self, value: bytes) -> object:
        def done(future: object) -> None:
            error = future.exception()  # type: ignore[attr-defined]
            (self.failed if error is not None else self.acked).append(error or value)

        return done

    def wait_acked(self, count: int, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while len(self.acked) < count:
            assert time.monotonic() < deadline, f"only {len(self.acked)} of {count} acknowledged; {self.failed[:3]}"
            time.sleep(0.05)


def test_leader_kills_lose_nothing(secured: tuple[Cluster, TlsFiles]) -> None:
    cluster, files = secured
    with Admin({"bootstrap.servers": cluster.bootstrap_servers, **files.client_config()}) as admin:
        admin.create_topics([NewTopic(TOPIC, num_partitions=1, replication_factor=2,
                                      config={"min.insync.replicas": "1"})])  # fmt: skip
        admin.upsert_scram_credential("bob", "SCRAM-SHA-512", "bob-secret", 4096)
        admin.create_acls([AclBinding(ResourceType.TOPIC, TOPIC, PatternType.LITERAL, "User:bob", "*", op,
                                      AclPermissionType.ALLOW) for op in (AclOperation.WRITE, AclOperation.READ)])
    for i in range(2):
        cluster.wait_for(lambda i=i: cluster.has_leaders(i, TOPIC, 1), 30, f"{TOPIC} on broker {i}")
    bob = {"bootstrap.servers": ",".join(cluster.client_addresses), "security.protocol": "SASL_SSL",
           "ssl.ca.location": str(files.ca), "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "bob",
           "sasl.password": "bob-secret"}  # fmt: skip

    def both_in_isr() -> bool:
        return len(cluster.partition_metadata(TOPIC, 0, via=alive()).isr) == 2

    def alive() -> int:
        return next(i for i, b in enumerate(cluster.brokers) if b.alive())

    sender = Sender(bob)
    sender.start()
    try:
        sender.wait_acked(50)
        first = cluster.leader(TOPIC)
        cluster.kill_broker(first)
        sender.wait_acked(len(sender.acked) + 50)
        cluster.start_broker(first)
        cluster.wait_for(both_in_isr, 60, "the restarted broker back in the ISR")
        second = cluster.leader(TOPIC, via=first)
        assert second != first
        cluster.kill_broker(second)  # leadership goes back to the restarted broker: a new SASL session there
        cluster.wait_for(lambda: cluster.leader(TOPIC, via=first) == first, 30, "the restarted broker leading")
        sender.wait_acked(len(sender.acked) + 50)
        cluster.start_broker(second)
    finally:
        sender.stop.set()
        sender.join(120)
    assert not sender.is_alive()
    acked = list(sender.acked)
    assert len(acked) >= 150
    assert not sender.failed, sender.failed[:3]  # the kills and the new SASL session cost retries, not records

    consumer = Consumer({**bob, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(TOPIC, 0)])
        seen: list[bytes | None] = []
        deadline = time.monotonic() + 60
        while not set(acked) <= set(seen) and time.monotonic() < deadline:
            seen += [r.value for r in consumer.poll(timeout_ms=500)]
    finally:
        consumer.close()
    assert set(acked) <= set(seen), f"lost: {sorted(set(acked) - set(seen))[:10]}"
    assert len(seen) == len(set(seen)), "a record was written twice"
