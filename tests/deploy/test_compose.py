"""The compose cluster for real: clients on the host and in the compose network, a partition leader killed
with ``docker kill`` under acks=all load (no acknowledged record lost), the compose chaos backend's
faults (pause, network isolation), each checked by what the cluster then reports, and the observability
services: Prometheus scraping every node, the console answering.

One cluster (``compose_cluster``, module scope) serves every test, in file order; each test leaves every
node running and connected.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

import grpc
import pytest

from chaos.backends import Capability, NodeState
from chaos.backends.compose import ComposeBackend
from odradek import Admin, Producer, RecordMetadata
from odradek.errors import OdradekError
from proto import broker_pb2, broker_pb2_grpc
from tests.deploy import helpers
from tests.deploy.helpers import PARTITIONS, WAIT_S, full_isr, wait_for

pytestmark = [pytest.mark.docker, pytest.mark.timeout(1800)]

T = TypeVar("T")
INTERNAL_BOOTSTRAP = "broker-0:19092,broker-1:19092,broker-2:19092"


def host(cluster: ComposeBackend) -> dict[str, str]:
    """The host's clients' config: the published EXTERNAL ports, plaintext."""
    return {"bootstrap.servers": cluster.bootstrap_servers}


def admin(cluster: ComposeBackend) -> Admin:
    return helpers.admin(host(cluster))


def create_topic(cluster: ComposeBackend, name: str) -> None:
    helpers.create_topic(host(cluster), name)


def consume_all(cluster: ComposeBackend, topic: str, timeout_s: float = WAIT_S) -> dict[int, dict[int, bytes]]:
    """Every record of ``topic`` up to its current end offsets, from the host: {partition: {offset: value}}."""
    return helpers.consume_all(host(cluster), topic, timeout_s)


# --- listeners: clients inside the compose network and on the host --------------------------------------


def test_clients_on_the_host_and_in_the_compose_network(
    compose_cluster: ComposeBackend, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="odradek")
    cluster = compose_cluster
    a = admin(cluster)
    try:
        description = wait_for(a.describe_cluster, WAIT_S, "DescribeCluster from the host")
    finally:
        a.close()
    # the host was answered the EXTERNAL listener's addresses: its own published ports; and, for its Produce and
    # Fetch, the DATA_EXTERNAL listeners' (published too), where the compose network is told of DATA's
    assert sorted(b.address for b in description.brokers) == sorted(cluster.bootstrap_servers.split(","))
    with grpc.insecure_channel(cluster.bootstrap_servers.split(",")[0]) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)  # type: ignore[no-untyped-call]
        nodes = stub.Metadata(broker_pb2.MetadataRequest(), timeout=30).brokers
    assert sorted(f"{b.data_host}:{b.data_port}" for b in nodes) == sorted(cluster.data_addresses)
    assert len(description.controllers) == 3
    assert description.controller_id in (0, 1, 2)
    create_topic(cluster, "listeners")

    # a client inside the network (in broker-1's container) bootstraps from the PLAINTEXT listener
    produce = ["odradek", "produce", "listeners", "--acks", "all", "--bootstrap-servers", INTERNAL_BOOTSTRAP]
    cluster.exec("broker-1", produce, stdin="inside-1\ninside-2\n")
    with Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"}) as producer:
        producer.send("listeners", value=b"outside-1").result(timeout=60)
    inside = cluster.exec("broker-2", ["odradek", "consume", "listeners", "--from-beginning", "--max-messages", "3",
                                       "--timeout-ms", "60000", "--bootstrap-servers", "broker-0:19092"])  # fmt: skip
    assert sorted(inside.split()) == ["inside-1", "inside-2", "outside-1"]
    outside = consume_all(cluster, "listeners")
    assert sorted(v for records in outside.values() for v in records.values()) == [b"inside-1", b"inside-2",
                                                                                   b"outside-1"]  # fmt: skip
    # the host's clients reached the published DATA_EXTERNAL ports (else they say so and use gRPC)
    assert not [r.getMessage() for r in caplog.records if "DATA listener" in r.getMessage()]


# Inside the network: Metadata v1 by hand over a raw socket (the image has no Kafka client), printing the
# brokers it advertises as "id host:port" lines.
METADATA_PROBE = """
import socket, struct, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=30)
body = struct.pack(">hhih", 3, 1, 7, 5) + b"probe" + struct.pack(">i", -1)
s.sendall(struct.pack(">i", len(body)) + body)
def read(n):
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        assert chunk, "connection closed"
        out += chunk
    return out
frame = read(struct.unpack(">i", read(4))[0])
(correlation, count), pos = struct.unpack_from(">ii", frame), 8
assert correlation == 7
for _ in range(count):
    node, size = struct.unpack_from(">ih", frame, pos)
    host = frame[pos + 6 : pos + 6 + size].decode()
    port, rack = struct.unpack_from(">ih", frame, pos + 6 + size)
    pos += 6 + size + 6 + max(rack, 0)
    print(node, f"{host}:{port}")
"""


def test_kafka_clients_on_the_host_and_in_the_compose_network(compose_cluster: ComposeBackend) -> None:
    """The KAFKA listeners: a stock Kafka client on the host (confluent-kafka) produces and reads back through
    the published KAFKA_EXTERNAL ports, the odradek client reads the same records over gRPC, and inside the
    network the KAFKA listener advertises broker-N:29092."""
    from confluent_kafka import Consumer as KafkaConsumer
    from confluent_kafka import Producer as KafkaProducer
    from confluent_kafka import TopicPartition as KafkaTopicPartition

    cluster = compose_cluster
    create_topic(cluster, "kafka-protocol")
    kafka = cluster.kafka_bootstrap_servers
    producer = KafkaProducer({"bootstrap.servers": kafka, "acks": "all", "enable.idempotence": True,
                              "compression.type": "snappy"})  # fmt: skip
    values = [b"kafka-%d" % i for i in range(30)]
    for i, value in enumerate(values):
        producer.produce("kafka-protocol", value=value, partition=i % PARTITIONS)
    assert producer.flush(WAIT_S) == 0
    metadata = producer.list_topics(timeout=30)
    assert sorted(f"{b.host}:{b.port}" for b in metadata.brokers.values()) == sorted(kafka.split(","))
    consumer = KafkaConsumer({"bootstrap.servers": kafka, "group.id": "compose-kafka", "enable.auto.commit": False})
    consumer.assign([KafkaTopicPartition("kafka-protocol", p, 0) for p in range(PARTITIONS)])
    got: list[bytes] = []
    deadline = time.monotonic() + WAIT_S
    while len(got) < len(values) and time.monotonic() < deadline:
        for message in consumer.consume(100, 1.0):
            assert message.error() is None, message.error()
            got.append(message.value() or b"")
    consumer.close()
    assert sorted(got) == sorted(values)
    over_grpc = consume_all(cluster, "kafka-protocol")
    assert sorted(v for records in over_grpc.values() for v in records.values()) == sorted(values)
    inside = cluster.exec("broker-1", ["python", "-c", METADATA_PROBE, "broker-0", "29092"])
    assert sorted(inside.split("\n")[:-1]) == [f"{i} broker-{i}:29092" for i in range(3)]


# --- docker kill of a partition leader -------------------------------------------------------------------


def send_all(producer: Producer, topic: str, values: list[bytes]) -> tuple[dict[bytes, RecordMetadata], int]:
    """Send every value (round robin over the partitions) and wait for each; (acknowledged, failed count)."""
    futures: list[tuple[bytes, Future[RecordMetadata]]] = [
        (value, producer.send(topic, value=value, partition=i % PARTITIONS)) for i, value in enumerate(values)
    ]
    acked: dict[bytes, RecordMetadata] = {}
    failed = 0
    for value, future in futures:
        try:
            acked[value] = future.result(timeout=300)
        except OdradekError:
            failed += 1
    return acked, failed


def test_killing_a_partition_leader_loses_no_acknowledged_record(compose_cluster: ComposeBackend) -> None:
    cluster = compose_cluster
    topic = "acked"
    create_topic(cluster, topic)
    a = admin(cluster)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "linger.ms": 5,
                         "enable.idempotence": True, "delivery.timeout.ms": 240000,
                         "request.timeout.ms": 15000})  # fmt: skip
    try:
        before, failed_before = send_all(producer, topic, [b"before-%04d" % i for i in range(300)])
        assert failed_before == 0, f"{failed_before} sends failed with every broker up"
        leader = a.describe_topics([topic])[topic].partitions[0].leader
        victim = f"broker-{leader}"
        pending = [producer.send(topic, value=b"during-%04d" % i, partition=i % PARTITIONS) for i in range(300)]
        cluster.kill(victim)
        assert {n.name: n.state for n in cluster.nodes()}[victim] is NodeState.KILLED
        after, failed_after = send_all(producer, topic, [b"after-%04d" % i for i in range(300)])
        during: dict[bytes, RecordMetadata] = {}
        for i, future in enumerate(pending):
            with contextlib.suppress(OdradekError):
                during[b"during-%04d" % i] = future.result(timeout=300)
        # with the leader dead, the other two replicas still make min.insync.replicas: sends go on
        moved = a.describe_topics([topic])[topic].partitions[0]
        assert moved.leader not in (-1, leader), f"partition 0 still led by {moved.leader}"
        assert len(after) > 0, f"no send acknowledged after {victim} died ({failed_after} failed)"
        cluster.start_node(victim, timeout_s=WAIT_S)
        wait_for(lambda: full_isr(a, topic), WAIT_S, f"{victim} to rejoin every ISR of {topic}")
    finally:
        producer.close()
        a.close()
    acked = {**before, **during, **after}
    stored = consume_all(cluster, topic)
    lost = [(v, md.partition, md.offset) for v, md in acked.items() if stored[md.partition].get(md.offset) != v]
    assert not lost, f"{len(lost)} of {len(acked)} acknowledged records lost or changed, e.g. {lost[:5]}"
    print(f"acks=all: {len(acked)} acknowledged ({len(during)} in flight when {victim} was killed), none lost")


# --- the chaos backend's other faults ----------------------------------------------------------------------


def broker_alive(cluster: ComposeBackend, broker_id: int) -> bool:
    """Whether the cluster (asked through the brokers still reachable) lists ``broker_id`` as unfenced."""
    a = admin(cluster)
    try:
        return any(b.node_id == broker_id and not b.fenced for b in a.describe_cluster().brokers)
    finally:
        a.close()


def test_compose_backend_pause_and_isolate(compose_cluster: ComposeBackend) -> None:
    cluster = compose_cluster
    assert cluster.capabilities == frozenset({Capability.KILL, Capability.PAUSE, Capability.ISOLATE})  # no PARTITION
    names = [f"controller-{i}" for i in range(3)] + [f"broker-{i}" for i in range(3)]
    assert [n.name for n in cluster.nodes()] == names
    # pause: the frozen broker stops heartbeating and the controller fences it; resume brings it back
    cluster.pause("broker-2")
    assert {n.name: n.state for n in cluster.nodes()}["broker-2"] is NodeState.PAUSED
    wait_for(lambda: not broker_alive(cluster, 2), WAIT_S, "broker 2 to be fenced while paused")
    cluster.resume("broker-2")
    wait_for(lambda: broker_alive(cluster, 2), WAIT_S, "broker 2 to be unfenced after resume")
    # isolate: cut off from the controllers, it is fenced; healed (same address), it is back
    cluster.isolate("broker-1")
    assert {n.name: n.state for n in cluster.nodes()}["broker-1"] is NodeState.ISOLATED
    wait_for(lambda: not broker_alive(cluster, 1), WAIT_S, "broker 1 to be fenced while isolated")
    cluster.heal("broker-1")
    wait_for(lambda: broker_alive(cluster, 1), WAIT_S, "broker 1 to be unfenced after heal")
    cluster.wait_healthy(WAIT_S)
    assert all(n.state is NodeState.RUNNING for n in cluster.nodes())


def prometheus_query(cluster: ComposeBackend, query: str) -> list[dict[str, Any]]:
    url = f"{cluster.prometheus_url}/api/v1/query?" + urllib.parse.urlencode({"query": query})
    with urllib.request.urlopen(url, timeout=10) as answer:  # noqa: S310 (our own Prometheus on loopback)
        doc = json.loads(answer.read())
    assert doc["status"] == "success", doc
    result: list[dict[str, Any]] = doc["data"]["result"]
    return result


def http_get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as answer:  # noqa: S310 (the compose console on loopback)
        assert answer.status == 200
        return str(answer.read().decode())


def test_prometheus_scrapes_every_node_and_the_console_answers(compose_cluster: ComposeBackend) -> None:
    def every_target_up() -> bool:
        up = prometheus_query(compose_cluster, 'up{job=~"odradek-.*"} == 1')
        return len(up) == 6

    def brokers_running() -> str:
        result = prometheus_query(compose_cluster, "count(kafka_server_kafkaserver_brokerstate == 3)")
        return str(result[0]["value"][1]) if result else "0"  # count() of no series is an empty result

    # the cluster is shared by the module's tests (kills, pauses, isolations before this one): every broker unfenced
    # first, then Prometheus's next scrape must see each of them RUNNING (state 3)
    wait_for(lambda: all(broker_alive(compose_cluster, b) for b in range(3)), WAIT_S, "every broker to be unfenced")
    wait_for(lambda: _quietly(every_target_up), WAIT_S, "Prometheus to scrape all 6 nodes")
    nodes = {r["metric"]["node"] for r in prometheus_query(compose_cluster, 'up{job=~"odradek-.*"}')}
    assert nodes == {f"{role}-{i}" for role in ("controller", "broker") for i in range(3)}
    active = prometheus_query(compose_cluster, "sum(kafka_controller_kafkacontroller_activecontrollercount)")
    assert float(active[0]["value"][1]) == 1
    wait_for(lambda: _quietly(brokers_running) == "3", WAIT_S, "Prometheus to scrape broker state 3 from 3 brokers")
    with urllib.request.urlopen(f"{compose_cluster.prometheus_url}/api/v1/rules", timeout=10) as answer:  # noqa: S310
        groups = json.loads(answer.read())["data"]["groups"]
    assert "OdradekUnderReplicatedPartitions" in {rule["name"] for g in groups for rule in g["rules"]}

    overview = wait_for(lambda: _quietly(lambda: http_get(compose_cluster.console_url + "/")), WAIT_S,
                        "the console to answer")  # fmt: skip
    assert "brokers alive" in overview
    assert overview.count("SERVING") == 6
    assert "Create topic" in http_get(compose_cluster.console_url + "/topics")


def _quietly(probe: Callable[[], T]) -> T | None:
    """``probe()``, or None while the service is not up yet (connection refused, reset, 5xx)."""
    try:
        return probe()
    except (OSError, ValueError):
        return None
