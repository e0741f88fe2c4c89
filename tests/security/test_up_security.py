"""``odradek up --security ssl|sasl_ssl``: one command makes a secured cluster and the client settings to use it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from odradek.security.config import load_properties
from tests.broker.cluster import established_connections
from tests.cli.helpers import UpProcess, odradek
from tests.support.launcher import wait_until

pytestmark = pytest.mark.slow


def console_overview(env: dict[str, str], servers: str, properties: Path) -> None:
    """``odradek console --command-config``: its overview lists the topic and every node SERVING (health over
    TLS with the admin's certificate)."""
    import subprocess
    import sys
    import time
    import urllib.request

    from controller.ports import free_ports

    port = free_ports(1)[0]
    console = subprocess.Popen(
        [sys.executable, "-m", "odradek.cli", "console", "--port", str(port), "--bootstrap-servers", servers,
         "--command-config", str(properties)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        page = ""
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=30) as answer:  # noqa: S310
                    page = answer.read().decode()
                    break
            except OSError:
                assert console.poll() is None, console.stderr.read().decode() if console.stderr else ""
                time.sleep(0.2)
        assert page.count("SERVING") == 3  # 1 controller, 2 brokers
        assert "UNREACHABLE" not in page
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/topics", timeout=30) as answer:  # noqa: S310
            assert "orders" in answer.read().decode()
    finally:
        console.terminate()
        console.wait(30)
        if console.stderr is not None:
            console.stderr.close()


def sasl_clients_on_the_data_listeners(keys: dict[str, str], servers: str, data_listeners: list[str]) -> None:
    """A SASL producer and consumer (the admin's ``client.properties``) hold connections to the leader's DATA
    listener, authenticated there by their session tokens, and every record comes back."""
    from odradek import Consumer, Producer, TopicPartition

    config = {**keys, "bootstrap.servers": servers}
    producer = Producer({**config, "acks": "all"})
    consumer = Consumer({**config, "auto.offset.reset": "earliest"})
    try:
        futures = [producer.send("orders", value=f"sasl-{i}".encode(), partition=1) for i in range(50)]
        producer.flush(timeout=30)
        offsets = [f.result(timeout=1).offset for f in futures]
        assert offsets == list(range(offsets[0], offsets[0] + 50))  # after what the CLI produced there, if any
        consumer.assign([TopicPartition("orders", 1)])
        consumer.seek(TopicPartition("orders", 1), offsets[0])
        got: list[bytes] = []
        for _ in range(150):
            got.extend(r.value for r in consumer.poll(timeout_ms=200))
            if len(got) >= 50:
                break
        assert got == [f"sasl-{i}".encode() for i in range(50)]
        assert sum(established_connections(a) for a in data_listeners) == 2  # the producer's and the consumer's
    finally:
        producer.close()
        consumer.close()


@pytest.mark.parametrize("mode", ["ssl", "sasl_ssl"])
def test_up_with_security(mode: str, start_up: Callable[..., UpProcess], env: dict[str, str]) -> None:
    up = start_up(1, 2, extra=("--security", mode))
    doc = up.wait_ready()
    assert doc["security"] == mode
    properties = Path(doc["client_properties"])
    assert properties.stat().st_mode & 0o777 == 0o600
    keys = load_properties(properties)
    assert keys["security.protocol"] == ("SSL" if mode == "ssl" else "SASL_SSL")
    kafka_servers = doc["kafka_bootstrap_servers"]
    assert kafka_servers
    servers = doc["bootstrap_servers"]
    assert f"--command-config {properties}" in up.stdout()

    def cli(*args: str, config: bool = True, stdin: bytes | None = None) -> tuple[int, str, str]:
        extra = ["--command-config", str(properties)] if config else []
        done = odradek([*args, "--bootstrap-servers", servers, *extra], env, input=stdin)
        return done.returncode, done.stdout.decode(), done.stderr.decode()

    code, _, err = cli("topics", "create", "orders", "--partitions", "2", "--replication-factor", "2")
    assert code == 0, err
    # the clients produce and fetch on the brokers' DATA listeners (SSL by certificate; SASL_SSL with the session
    # token of their SASL exchange), which a client that cannot use says on stderr before it falls back to gRPC
    assert all(b.get("data_listen") for b in doc["brokers"])
    code, _, err = cli("produce", "orders", stdin=b"one\ntwo\nthree\n")
    assert code == 0, err
    assert "DATA listener" not in err
    code, out, err = cli("consume", "orders", "--from-beginning", "--max-messages", "3", "--timeout-ms", "20000")
    assert code == 0, err
    assert "DATA listener" not in err
    assert sorted(out.split()) == ["one", "three", "two"]
    # the followers replicate over the brokers' REPLICATION listeners (SSL, certificates, CLUSTER_ACTION)
    links = [b["replication_listen"] for b in doc["brokers"]]
    wait_until(lambda: sum(established_connections(a) for a in links) >= 1, 30, "a follower on a replication listener")
    code, out, _ = cli("topics", "describe", "orders")
    assert code == 0
    assert [line.split("Isr:")[1].strip().count(",") for line in out.splitlines() if "Isr:" in line] == [1, 1]
    code, out, _ = cli("cluster")
    assert code == 0
    assert out.count("SERVING") == 3  # health over TLS

    # a Kafka client (librdkafka) with the same keys on the Kafka-protocol listener
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from confluent_kafka.admin import AdminClient

    kafka_config = {k: v for k, v in keys.items() if not k.startswith("ssl.certificate") and k != "ssl.key.location"}
    if mode == "ssl":  # librdkafka names the client certificate's keys so too
        kafka_config |= {"ssl.certificate.location": keys["ssl.certificate.location"],
                         "ssl.key.location": keys["ssl.key.location"]}  # fmt: skip
    listed = AdminClient({**kafka_config, "bootstrap.servers": kafka_servers}).list_topics(timeout=15)
    assert "orders" in listed.topics

    # without the settings the cluster answers nothing
    code, _, err = cli("topics", "list", config=False)
    assert code != 0
    # a user without ACLs sees nothing and may do nothing (the authorizer is on)
    if mode == "sasl_ssl":
        sasl_clients_on_the_data_listeners(keys, servers, [b["data_listen"] for b in doc["brokers"]])
        code, _, err = cli("users", "add", "bob", "--mechanism", "SCRAM-SHA-512", stdin=b"bob-secret\n")
        assert code == 0, err
        bob = properties.with_name("bob.properties")
        bob.write_text(properties.read_text().replace("sasl.username=admin", "sasl.username=bob")
                       .replace(f"sasl.password={keys['sasl.password']}", "sasl.password=bob-secret"))  # fmt: skip
        done = odradek(["topics", "list", "--bootstrap-servers", servers, "--command-config", str(bob)], env)
        assert done.returncode == 0, done.stderr
        assert done.stdout.decode().split() == []
        done = odradek(["produce", "orders", "--bootstrap-servers", servers, "--command-config", str(bob)], env,
                       input=b"x\n")  # fmt: skip
        assert done.returncode != 0
        assert "AUTHORIZATION_FAILED" in done.stderr.decode()

        # the web console against the secured cluster, with the same settings
        console_overview(env, servers, properties)

        # a restart keeps the CA, the certificates, the admin's password and the users
        before = properties.read_text()
        assert up.stop() == 0
        again = start_up(restart=True, data_dir=up.data_dir)
        assert again.wait_ready()["security"] == "sasl_ssl"
        assert properties.read_text() == before
        code, out, err = cli("consume", "orders", "--from-beginning", "--max-messages", "3", "--timeout-ms", "20000")
        assert code == 0, err
        assert sorted(out.split()) == ["one", "three", "two"]
        done = odradek(["topics", "list", "--bootstrap-servers", servers, "--command-config", str(bob)], env)
        assert done.returncode == 0, done.stderr
