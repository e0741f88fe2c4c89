"""The secured compose cluster for real (``deploy/docker-compose.yml`` with ``deploy/docker-compose.secured.yml``
laid over it): the host's clients authenticate by SCRAM over SASL_SSL and produce and fetch on the brokers'
``DATA_EXTERNAL`` listeners (an AUTH frame with their session token), the compose network's clients by
certificate on ``DATA`` (SSL), followers fetch on the ``REPLICATION`` listeners (SSL, certificates), and a client
without TLS is not answered. Each check is what the containers' sockets show (``/proc/net/tcp`` of each broker's
network namespace), not what the configuration says.

One cluster (``secured_cluster``, module scope) serves every test, in file order.
"""

from __future__ import annotations

import json
import logging
import socket
import ssl
import struct
import time

import pytest

from odradek import Admin, Consumer, NewTopic, Producer, TopicPartition
from odradek.errors import OdradekError
from tests.deploy.conftest import SECURITY_DIR, SecuredCluster

pytestmark = [pytest.mark.docker, pytest.mark.timeout(1800)]

TOPIC = "secured"
PARTITIONS = 3
RECORDS = 300
WAIT_S = 180.0
REPLICATION_PORT = 19792  # the compose file's listener ports inside each broker's container
DATA_PORT = 19892
DATA_EXTERNAL_PORT = 9892
BROKERS = ("broker-0", "broker-1", "broker-2")


def established(cluster: SecuredCluster, broker: str, *, local: int | None = None, remote: int | None = None) -> int:
    """How many TCP connections are established now in ``broker``'s container with that local / remote port."""
    text = cluster.backend.exec(broker, ["sh", "-c", "cat /proc/net/tcp /proc/net/tcp6 2>/dev/null; true"])
    count = 0
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 4 or fields[3] != "01":  # 01: ESTABLISHED (the header line has "st")
            continue
        here, there = int(fields[1].rpartition(":")[2], 16), int(fields[2].rpartition(":")[2], 16)
        if (local is None or here == local) and (remote is None or there == remote):
            count += 1
    return count


def host_config(cluster: SecuredCluster) -> dict[str, str]:
    """The admin by SCRAM-SHA-512 over SASL_SSL, on the published EXTERNAL ports."""
    return {**cluster.properties("client.properties"), "bootstrap.servers": cluster.backend.bootstrap_servers}


def wait_for_leaders(admin: Admin) -> dict[int, int]:
    """{partition: leader} once every partition of TOPIC has a leader and its full ISR (bounded)."""
    deadline = time.monotonic() + WAIT_S
    last: object = None
    while time.monotonic() < deadline:
        try:
            partitions = admin.describe_topics([TOPIC])[TOPIC].partitions
            if len(partitions) == PARTITIONS and all(p.leader >= 0 and len(p.isr) == 3 for p in partitions):
                return {p.partition: p.leader for p in partitions}
            last = partitions
        except OdradekError as exc:
            last = exc
        time.sleep(0.5)
    raise AssertionError(f"{TOPIC} got no leaders with full ISRs within {WAIT_S:.0f} s (last: {last!r})")


def leaders(cluster: SecuredCluster) -> dict[int, int]:
    admin = Admin({**host_config(cluster), "request.timeout.ms": 10000})
    try:
        return wait_for_leaders(admin)
    finally:
        admin.close()


def read_all(cluster: SecuredCluster) -> list[bytes]:
    """Every value of TOPIC up to its end offsets now, read from the host (SASL_SSL, DATA_EXTERNAL)."""
    tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    consumer = Consumer({**host_config(cluster), "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.assign(tps)
        consumer.seek_to_beginning(tps)
        ends = consumer.end_offsets(tps)
        values: list[bytes] = []
        deadline = time.monotonic() + WAIT_S
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, f"could not read {TOPIC} to {ends} within {WAIT_S:.0f} s"
            values.extend(r.value or b"" for r in consumer.poll(timeout_ms=1000))
        return values
    finally:
        consumer.close()


def test_host_clients_produce_and_fetch_on_data_external_by_sasl(
    secured_cluster: SecuredCluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="odradek")
    cluster = secured_cluster
    config = host_config(cluster)
    assert config["security.protocol"] == "SASL_SSL"
    assert config["sasl.mechanism"] == "SCRAM-SHA-512"
    admin = Admin({**config, "request.timeout.ms": 10000})
    try:
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3, config={"min.insync.replicas": "2"})])
        leader_of = wait_for_leaders(admin)
    finally:
        admin.close()
    before = {b: established(cluster, b, local=DATA_EXTERNAL_PORT) for b in BROKERS}
    producer = Producer({**config, "acks": "all"})
    try:
        futures = [producer.send(TOPIC, value=f"host-{i}".encode(), partition=i % PARTITIONS) for i in range(RECORDS)]
        producer.flush(timeout=120)
        assert all(f.result(timeout=1).offset >= 0 for f in futures)
        # the producer holds a connection to each partition leader's DATA_EXTERNAL listener (published on the
        # host); a client that cannot use it says so (a WARNING naming the DATA listener) and uses gRPC
        for broker_id in sorted(set(leader_of.values())):
            broker = f"broker-{broker_id}"
            assert established(cluster, broker, local=DATA_EXTERNAL_PORT) > before[broker], broker
    finally:
        producer.close()
    values = read_all(cluster)
    assert sorted(values) == sorted(f"host-{i}".encode() for i in range(RECORDS))
    assert not [r.getMessage() for r in caplog.records if "DATA listener" in r.getMessage()]


def test_followers_fetch_on_the_replication_listeners(secured_cluster: SecuredCluster) -> None:
    leader_of = leaders(secured_cluster)
    for broker_id, broker in enumerate(BROKERS):
        if broker_id in leader_of.values():  # its followers are connected to its REPLICATION listener
            assert established(secured_cluster, broker, local=REPLICATION_PORT) >= 1, broker
        if any(leader != broker_id for leader in leader_of.values()):  # it follows another broker's partition
            assert established(secured_cluster, broker, remote=REPLICATION_PORT) >= 1, broker


# Inside the network (broker-1's container): the admin by certificate through the PLAINTEXT listener (SSL); prints
# as JSON how many connections the producer had open to DATA listeners and what it warned of.
INSIDE_PRODUCER = """
import json, logging, sys
from odradek import Producer
from odradek.security.config import load_properties

warnings = []
handler = logging.Handler()
handler.emit = lambda record: warnings.append(record.getMessage())
logging.getLogger("odradek").addHandler(handler)
logging.getLogger("odradek").setLevel(logging.WARNING)
config = {**load_properties(sys.argv[1]), "bootstrap.servers": sys.argv[2], "acks": "all"}
producer = Producer(config)
futures = [producer.send(sys.argv[3], value=f"inside-{i}".encode(), partition=i % 3) for i in range(30)]
producer.flush(timeout=120)
offsets = [f.result(timeout=1).offset for f in futures]
connections = 0
for table in ("/proc/net/tcp", "/proc/net/tcp6"):
    try:
        lines = open(table).read().splitlines()[1:]
    except OSError:
        continue
    for line in lines:
        fields = line.split()
        if fields[3] == "01" and int(fields[2].rpartition(":")[2], 16) == int(sys.argv[4]):
            connections += 1
producer.close()
print(json.dumps({"offsets": offsets, "connections": connections, "warnings": warnings}))
"""


def test_clients_in_the_network_produce_on_data_by_certificate(secured_cluster: SecuredCluster) -> None:
    leader_of = leaders(secured_cluster)
    out = secured_cluster.backend.exec("broker-1", [
        "python", "-c", INSIDE_PRODUCER, f"{SECURITY_DIR}/admin-cert.properties",
        "broker-0:19092,broker-1:19092,broker-2:19092", TOPIC, str(DATA_PORT),
    ], timeout_s=WAIT_S)  # fmt: skip
    result = json.loads(out.strip().splitlines()[-1])
    assert len(result["offsets"]) == 30
    assert all(offset >= 0 for offset in result["offsets"])
    assert result["connections"] >= len(set(leader_of.values())), result  # one per leader, on DATA (SSL)
    assert not [w for w in result["warnings"] if "DATA listener" in w], result["warnings"]
    values = read_all(secured_cluster)
    assert sorted(v for v in values if v.startswith(b"inside-")) == sorted(f"inside-{i}".encode() for i in range(30))


def test_a_client_without_tls_is_not_answered(secured_cluster: SecuredCluster) -> None:
    """The published DATA_EXTERNAL port completes a TLS handshake with the cluster's CA; a DATA frame in plain
    text there is refused (a TLS alert or the connection closed), never answered."""
    address = secured_cluster.backend.data_addresses[0]
    host, _, port = address.rpartition(":")
    context = ssl.create_default_context(cafile=str(secured_cluster.security / "ca.pem"))
    with (
        socket.create_connection((host, int(port)), timeout=30) as raw,
        context.wrap_socket(raw, server_hostname=host) as tls,
    ):
        assert tls.version() is not None  # the handshake completed: a TLS listener of the cluster's CA
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        frame = struct.pack(">iB", 5, 1) + b"\x00\x00\x00\x00"  # length, kind PRODUCE, four bytes of "message"
        sock.sendall(frame)
        received = b""
        while True:
            chunk = sock.recv(4096)  # bounded by the socket's timeout: an unanswered wait fails the test
            if not chunk:
                break
            received += chunk
    assert received == b"" or received[0] == 0x15, received[:32]  # nothing, or a TLS alert record
