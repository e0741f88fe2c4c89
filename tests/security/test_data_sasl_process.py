"""SASL clients on a broker's ``DATA`` listener (SASL_SSL) with real processes: one controller and one broker whose
SASL sessions last 1.5 s (``connections.max.reauth.ms``). A producer and a consumer of a SCRAM user send and
fetch there for several session lifetimes on the same two connections: each re-authenticates in place (KIP-368:
an AUTH frame with its renewed token ahead of a request), where a connection whose session ran out would have
been closed by the broker and opened again. After a restart of the broker (a new key: the old tokens are
refused), the clients authenticate anew and every acknowledged record is read back once, in order."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from odradek import Admin, Consumer, NewTopic, Producer, TopicPartition
from tests.broker.cluster import Cluster, established_peer_ports
from tests.security.tls_files import TlsFiles, make_tls_files

pytestmark = pytest.mark.slow

REAUTH_MS = 1500
WAIT_S = 30.0


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[tuple[Cluster, TlsFiles]]:
    files = make_tls_files(tmp_path / "tls")
    client_tls = grpc.ssl_channel_credentials(files.ca.read_bytes(), files.client_key.read_bytes(),
                                              files.client_cert.read_bytes())  # fmt: skip
    with Cluster(
        tmp_path, brokers=1, client_listener="CLIENT", data=True,
        controller_config=files.node_config("CONTROLLER:SSL"),
        broker_config={**files.node_config("PLAINTEXT:SSL,CLIENT:SASL_SSL,DATA:SASL_SSL,CONTROLLER:SSL"),
                       "listener.name.client.ssl.client.auth": "none", "listener.name.data.ssl.client.auth": "none",
                       "connections.max.reauth.ms": str(REAUTH_MS), "offsets.topic.replication.factor": "1"},
        channel_credentials=client_tls,
    ) as cluster:  # fmt: skip
        yield cluster, files


def client_ports(address: str) -> set[int]:
    return set(established_peer_ports(address))


def poll_until(consumer: Consumer, want: int) -> list[bytes]:
    got: list[bytes] = []
    deadline = time.monotonic() + WAIT_S
    while len(got) < want and time.monotonic() < deadline:
        got.extend(r.value for r in consumer.poll(timeout_ms=200))
    return got


def test_sasl_clients_reauthenticate_in_place_on_the_data_listener_and_after_a_restart(
    secured: tuple[Cluster, TlsFiles],
) -> None:
    cluster, files = secured
    with Admin({"bootstrap.servers": cluster.bootstrap_servers, **files.client_config()}) as admin:
        admin.create_topics([NewTopic("t", num_partitions=1, replication_factor=1)])
        admin.upsert_scram_credential("bob", "SCRAM-SHA-512", "bob-secret", 4096)
    bob = {"bootstrap.servers": cluster.client_addresses[0], "security.protocol": "SASL_SSL",
           "ssl.ca.location": str(files.ca), "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "bob",
           "sasl.password": "bob-secret"}  # fmt: skip
    data = cluster.data_addresses[0]
    producer = Producer({**bob, "acks": "all", "linger.ms": 0, "enable.idempotence": True,
                         "delivery.timeout.ms": 60000, "request.timeout.ms": 5000})  # fmt: skip
    consumer = Consumer({**bob, "auto.offset.reset": "earliest"})
    tp = TopicPartition("t", 0)
    try:
        consumer.assign([tp])
        assert producer.send("t", value=b"first").result(timeout=WAIT_S).offset == 0
        assert poll_until(consumer, 1) == [b"first"]
        connections = client_ports(data)
        assert len(connections) == 2  # the producer's and the consumer's, on the DATA listener

        # three session lifetimes of traffic: renewed tokens go ahead of requests on the same connections
        sent = [b"first"]
        deadline = time.monotonic() + 3 * REAUTH_MS / 1000
        while time.monotonic() < deadline:
            value = f"during-{len(sent)}".encode()
            assert producer.send("t", value=value).result(timeout=WAIT_S).offset == len(sent)
            sent.append(value)
            time.sleep(0.05)
        assert poll_until(consumer, len(sent) - 1) == sent[1:]
        assert client_ports(data) == connections  # none was closed for an expired session and opened again

        # a restarted broker signs with a new key: the old tokens are refused, the clients authenticate anew
        cluster.stop_broker(0)
        cluster.start_broker(0)
        after = [f"after-{i}".encode() for i in range(20)]
        futures = [producer.send("t", value=v) for v in after]
        offsets = [f.result(timeout=WAIT_S).offset for f in futures]
        assert offsets == list(range(len(sent), len(sent) + len(after)))
        assert poll_until(consumer, len(after)) == after
        assert len(client_ports(data)) == 2
        assert client_ports(data).isdisjoint(connections)
        consumer.seek(tp, 0)
        assert poll_until(consumer, len(sent) + len(after)) == sent + after  # every acknowledged record, once
    finally:
        producer.close()
        consumer.close()
