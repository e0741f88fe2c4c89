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

import pytest

from odradek import Producer
from tests.broker.cluster import established_tcp
from tests.deploy import helpers
from tests.deploy.conftest import SECURITY_DIR, SecuredCluster
from tests.deploy.helpers import PARTITIONS, WAIT_S, consume_all, create_topic, full_isr, wait_for

pytestmark = [pytest.mark.docker, pytest.mark.timeout(1800)]

TOPIC = "secured"
RECORDS = 300
REPLICATION_PORT = 19792  # the compose file's listener ports inside each broker's container
DATA_PORT = 19892
DATA_EXTERNAL_PORT = 9892
BROKERS = ("broker-0", "broker-1", "broker-2")


def established(cluster: SecuredCluster, broker: str, *, local: int | None = None, remote: int | None = None) -> int:
    """How many TCP connections are established now in ``broker``'s container with that local / remote port."""
    text = cluster.backend.exec(broker, ["sh", "-c", "cat /proc/net/tcp /proc/net/tcp6 2>/dev/null; true"])
    return sum(1 for here, there in established_tcp(text) if local in (None, here) and remote in (None, there))


def host_config(cluster: SecuredCluster) -> dict[str, str]:
    """The admin by SCRAM-SHA-512 over SASL_SSL, on the published EXTERNAL ports."""
    return {**cluster.properties("client.properties"), "bootstrap.servers": cluster.backend.bootstrap_servers}


def leaders(cluster: SecuredCluster) -> dict[int, int]:
    """{partition: leader} of TOPIC, once each has a leader and its full ISR (bounded)."""
    a = helpers.admin(host_config(cluster))
    try:
        return wait_for(lambda: full_isr(a, TOPIC), WAIT_S, f"{TOPIC} to have leaders and full ISRs")
    finally:
        a.close()


def read_all(cluster: SecuredCluster) -> list[bytes]:
    """Every value of TOPIC up to its end offsets now, read from the host (SASL_SSL, DATA_EXTERNAL)."""
    return [v for records in consume_all(host_config(cluster), TOPIC).values() for v in records.values()]


def test_host_clients_produce_and_fetch_on_data_external_by_sasl(
    secured_cluster: SecuredCluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="odradek")
    cluster = secured_cluster
    config = host_config(cluster)
    assert config["security.protocol"] == "SASL_SSL"
    assert config["sasl.mechanism"] == "SCRAM-SHA-512"
    leader_of = create_topic(config, TOPIC)
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
# as JSON the offsets, the container's TCP tables while the producer was open, and what it warned of.
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
tables = ""
for table in ("/proc/net/tcp", "/proc/net/tcp6"):  # while the producer's connections are open
    try:
        tables += open(table).read()
    except OSError:
        pass
producer.close()
print(json.dumps({"offsets": offsets, "tables": tables, "warnings": warnings}))
"""


def test_clients_in_the_network_produce_on_data_by_certificate(secured_cluster: SecuredCluster) -> None:
    leader_of = leaders(secured_cluster)
    out = secured_cluster.backend.exec("broker-1", [
        "python", "-c", INSIDE_PRODUCER, f"{SECURITY_DIR}/admin-cert.properties",
        "broker-0:19092,broker-1:19092,broker-2:19092", TOPIC,
    ], timeout_s=WAIT_S)  # fmt: skip
    result = json.loads(out.strip().splitlines()[-1])
    assert len(result["offsets"]) == 30
    assert all(offset >= 0 for offset in result["offsets"])
    on_data = [c for c in established_tcp(result["tables"]) if c[1] == DATA_PORT]
    assert len(on_data) >= len(set(leader_of.values())), on_data  # one per leader, on DATA (SSL)
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
