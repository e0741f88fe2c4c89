"""TLS on every gRPC listener, with real processes: a controller and two brokers whose listeners are all SSL
with ``ssl.client.auth=required``. Brokers reach the controller and each other over TLS (registration,
metadata, follower fetches for acks=all); a client with the CA and a certificate produces and consumes; a
plaintext client, a client that does not trust the CA, and a client without a certificate get nothing."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from odradek import Admin, Consumer, Producer, TopicPartition
from odradek.errors import KafkaError
from proto import broker_pb2, broker_pb2_grpc, controller_pb2, controller_pb2_grpc
from tests.broker.cluster import Cluster
from tests.cli.helpers import cli_env, odradek
from tests.security.tls_files import make_tls_files

pytestmark = pytest.mark.slow

REFUSED_WITHIN_MS = 3000


def refused(config: dict[str, object]) -> KafkaError:
    """What an Admin with ``config`` meets: an error (never a hang), within the bound."""
    admin = Admin({**config, "default.api.timeout.ms": REFUSED_WITHIN_MS, "request.timeout.ms": 1000})
    try:
        with pytest.raises(KafkaError) as caught:
            admin.list_topics()
    finally:
        admin.close()
    return caught.value


def test_ssl_everywhere(tmp_path: Path) -> None:
    files = make_tls_files(tmp_path / "tls")
    client_tls = grpc.ssl_channel_credentials(files.ca.read_bytes(), files.client_key.read_bytes(),
                                              files.client_cert.read_bytes())  # fmt: skip
    with Cluster(
        tmp_path, brokers=2,
        controller_config=files.node_config("CONTROLLER:SSL"),
        broker_config=files.node_config("PLAINTEXT:SSL,CONTROLLER:SSL"),
        channel_credentials=client_tls,
    ) as cluster:  # fmt: skip
        cluster.create_topic("orders", partitions=1, replication_factor=2, configs={"min.insync.replicas": "2"})
        servers = cluster.bootstrap_servers
        good = {"bootstrap.servers": servers, **files.client_config()}
        producer = Producer({**good, "acks": "all"})
        try:
            offsets = [producer.send("orders", value=f"v{i}".encode()).result(timeout=30).offset for i in range(5)]
        finally:
            producer.close()
        assert offsets == [0, 1, 2, 3, 4]  # acks=all: the follower fetched them over TLS
        consumer = Consumer({**good, "auto.offset.reset": "earliest", "enable.auto.commit": False})
        try:
            consumer.assign([TopicPartition("orders", 0)])
            seen: list[bytes | None] = []
            for _ in range(50):
                seen += [r.value for r in consumer.poll(timeout_ms=200)]
                if len(seen) >= 5:
                    break
        finally:
            consumer.close()
        assert seen == [f"v{i}".encode() for i in range(5)]

        # plaintext to a TLS listener, a client that does not trust the CA, a client without a certificate
        refused({"bootstrap.servers": servers})
        refused({"bootstrap.servers": servers, **files.client_config(ca=files.other_ca)})
        refused({"bootstrap.servers": servers, **files.client_config(cert=False)})
        stranger = {"bootstrap.servers": servers, **files.client_config(cert=False),
                    "ssl.certificate.location": str(files.stranger_cert),
                    "ssl.key.location": str(files.stranger_key)}  # fmt: skip
        refused(stranger)  # a certificate from a CA the brokers do not trust

        # the controller's listener too, and raw gRPC to a broker
        def describe_quorum(channel: grpc.Channel) -> None:
            stub: Any = controller_pb2_grpc.ControllerStub(channel)  # type: ignore[no-untyped-call]
            stub.DescribeQuorum(controller_pb2.DescribeQuorumRequest(), timeout=3)

        def metadata(channel: grpc.Channel) -> None:
            stub: Any = broker_pb2_grpc.BrokerStub(channel)  # type: ignore[no-untyped-call]
            stub.Metadata(broker_pb2.MetadataRequest(all_topics=True), timeout=3)

        calls: list[tuple[str, Callable[[grpc.Channel], None]]] = [
            (cluster.controllers[0].address, describe_quorum), (cluster.brokers[0].address, metadata),
        ]  # fmt: skip
        for address, call in calls:
            with grpc.insecure_channel(address) as channel, pytest.raises(grpc.RpcError) as plain:
                call(channel)
            assert plain.value.code() is grpc.StatusCode.UNAVAILABLE
            no_cert = grpc.ssl_channel_credentials(files.ca.read_bytes())
            with grpc.secure_channel(address, no_cert) as channel, pytest.raises(grpc.RpcError) as anonymous:
                call(channel)
            assert anonymous.value.code() is grpc.StatusCode.UNAVAILABLE
            with grpc.secure_channel(address, client_tls) as channel:
                call(channel)  # the same call with a certificate is answered
        assert cluster.has_leaders(1, "orders", 1)

        # the CLI takes the client keys from --command-config, as Kafka's tools do
        properties = tmp_path / "client.properties"
        properties.write_text("".join(f"{k}={v}\n" for k, v in files.client_config().items()))
        env = cli_env(tmp_path / "state")
        listed = odradek(["topics", "list", "--bootstrap-servers", servers, "--command-config", str(properties)], env)
        assert listed.returncode == 0, listed.stderr
        assert listed.stdout.decode().split() == ["orders"]
        missing = odradek(["topics", "list", "--bootstrap-servers", servers, "--command-config", "/nonexistent"], env)
        assert missing.returncode != 0
        assert "cannot read" in missing.stderr.decode()
