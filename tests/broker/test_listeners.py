"""Named listeners (Kafka's ``listeners`` / ``advertised.listeners``): the command line, the Metadata and
DescribeCluster answers per listener, and a real broker process serving two listeners."""

from __future__ import annotations

import argparse
import uuid
from pathlib import Path

import grpc
import pytest

from broker.cli import add_broker_parser, build_options
from broker.handlers import describe_cluster, metadata
from common.errors import CommandError
from controller.security.settings import NodeSecurity
from metadata.records import Endpoint, RegisterBroker, UnfenceBroker
from proto import broker_pb2 as pb
from proto import broker_pb2_grpc
from tests.broker.cluster import Cluster
from tests.broker.conftest import BrokerHarness

BASE = ("--node-id", "1", "--controllers", "127.0.0.1:9190", "--data-dir", "/tmp/unused")


def options(listen: str, advertised: str | None = None) -> object:
    parser = argparse.ArgumentParser()
    add_broker_parser(parser.add_subparsers())
    argv = ["broker", *BASE, "--listen", listen]
    if advertised is not None:
        argv += ["--advertised", advertised]
    return build_options(parser.parse_args(argv))


def listeners(opts: object) -> list[tuple[str, str, str]]:
    return [(lis.name, lis.listen, lis.advertised) for lis in opts.all_listeners()]  # type: ignore[attr-defined]


# --- the command line ---------------------------------------------------------------------------------


def test_a_bare_address_is_the_plaintext_listener() -> None:
    opts = options("127.0.0.1:9092")
    assert listeners(opts) == [("PLAINTEXT", "127.0.0.1:9092", "127.0.0.1:9092")]
    assert (opts.listen, opts.advertised) == ("127.0.0.1:9092", "127.0.0.1:9092")  # type: ignore[attr-defined]
    wildcard = options("0.0.0.0:9092", "broker-1:9092")
    assert listeners(wildcard) == [("PLAINTEXT", "0.0.0.0:9092", "broker-1:9092")]


def test_named_listeners_with_their_advertised_addresses() -> None:
    opts = options(
        "PLAINTEXT://0.0.0.0:19092,external://0.0.0.0:9092",
        "PLAINTEXT://broker-1:19092,EXTERNAL://localhost:9092",
    )
    assert listeners(opts) == [
        ("PLAINTEXT", "0.0.0.0:19092", "broker-1:19092"),
        ("EXTERNAL", "0.0.0.0:9092", "localhost:9092"),  # names are upper-cased, as Kafka normalises them
    ]
    # the inter-broker (PLAINTEXT) listener stays in --listen / --advertised's old fields
    assert (opts.listen, opts.advertised) == ("0.0.0.0:19092", "broker-1:19092")  # type: ignore[attr-defined]


def test_a_listener_missing_from_advertised_advertises_its_listen_address() -> None:
    opts = options("PLAINTEXT://127.0.0.1:19092,EXTERNAL://0.0.0.0:9092", "EXTERNAL://localhost:9092")
    assert listeners(opts) == [
        ("PLAINTEXT", "127.0.0.1:19092", "127.0.0.1:19092"),
        ("EXTERNAL", "0.0.0.0:9092", "localhost:9092"),
    ]


@pytest.mark.parametrize(
    ("listen", "advertised", "message"),
    [
        ("EXTERNAL://127.0.0.1:9092", None, "must include the inter-broker listener PLAINTEXT"),
        ("127.0.0.1:19092", "EXTERNAL://localhost:9092", "names listeners that --listen does not: EXTERNAL"),
        ("PLAINTEXT://127.0.0.1:1,PLAINTEXT://127.0.0.1:2", None, "names listener PLAINTEXT twice"),
        ("PLAINTEXT://127.0.0.1:1,B://localhost:1", None, "binds one address twice"),
        ("PLAINTEXT://127.0.0.1:1,EXTERNAL://0.0.0.0:2", None, "--listen EXTERNAL://0.0.0.0:2 binds every address"),
        ("0.0.0.0:9092", None, "--listen 0.0.0.0:9092 binds every address: give --advertised HOST:PORT"),
        ("PLAIN-TEXT://127.0.0.1:1", None, "listener name 'PLAIN-TEXT' must be letters, digits and _"),
        ("PLAINTEXT://127.0.0.1", None, "--listen listener PLAINTEXT must be HOST:PORT"),
        (",", None, "--listen lists no address"),
    ],
)
def test_bad_listeners_are_errors_that_say_why(listen: str, advertised: str | None, message: str) -> None:
    with pytest.raises(CommandError, match=message.replace("(", r"\(").replace(")", r"\)")):
        options(listen, advertised)


# --- the answers, per listener ------------------------------------------------------------------------


def register(harness: BrokerHarness, broker_id: int, *endpoints: Endpoint) -> None:
    epoch = harness.image.offset + 1
    harness.apply(RegisterBroker(broker_id, str(uuid.uuid4()), epoch, endpoints))
    harness.apply(UnfenceBroker(broker_id, epoch))


def hosts(brokers: object) -> dict[int, str]:
    return {b.node_id: f"{b.host}:{b.port}" for b in brokers}  # type: ignore[attr-defined]


def test_metadata_answers_the_endpoints_of_the_request_listener(harness: BrokerHarness) -> None:
    register(harness, 1, Endpoint("EXTERNAL", "localhost", 9093), Endpoint("PLAINTEXT", "broker-1", 19092))
    register(harness, 2, Endpoint("PLAINTEXT", "broker-2", 19092))  # no EXTERNAL listener
    harness.create_topic("t", 2, replicas=[1, 2], isr=[1, 2], leader=1)
    harness.change("t", 1, leader=2)
    request = pb.MetadataRequest(all_topics=True)

    internal = metadata.handle(harness.ctx, request, listener="PLAINTEXT")
    assert hosts(internal.brokers) == {0: "127.0.0.1:9092", 1: "broker-1:19092", 2: "broker-2:19092"}
    assert [p.error.code for p in internal.topics[0].partitions] == ["", ""]
    assert hosts(metadata.handle(harness.ctx, request).brokers) == hosts(internal.brokers)  # PLAINTEXT by default

    external = metadata.handle(harness.ctx, request, listener="EXTERNAL")
    assert hosts(external.brokers) == {1: "localhost:9093"}  # brokers without the listener are left out
    led_by_1, led_by_2 = external.topics[0].partitions
    assert (led_by_1.leader, led_by_1.error.code) == (1, "")
    assert (led_by_2.leader, led_by_2.error.code) == (2, "LISTENER_NOT_FOUND")
    assert "broker 2, has no listener EXTERNAL" in led_by_2.error.message


def test_describe_cluster_answers_the_endpoints_of_the_request_listener(harness: BrokerHarness) -> None:
    register(harness, 1, Endpoint("EXTERNAL", "localhost", 9093), Endpoint("PLAINTEXT", "broker-1", 19092))
    request = pb.DescribeClusterRequest()
    assert hosts(describe_cluster.handle(harness.ctx, request).brokers) == {0: "127.0.0.1:9092", 1: "broker-1:19092"}
    assert hosts(describe_cluster.handle(harness.ctx, request, listener="EXTERNAL").brokers) == {1: "localhost:9093"}


# --- a real broker with two listeners -----------------------------------------------------------------


def test_a_broker_process_serves_each_listener_its_own_addresses(tmp_path: Path) -> None:
    with Cluster(tmp_path, brokers=1, start=False) as cluster:
        proc = cluster.brokers[0]
        internal_port = int(proc.address.rpartition(":")[2])
        external_port = _free_port()
        at = proc.argv.index("--listen")
        proc.argv[at + 1] = f"PLAINTEXT://127.0.0.1:{internal_port},EXTERNAL://127.0.0.1:{external_port}"
        proc.argv[at + 2 : at + 2] = ["--advertised", f"EXTERNAL://localhost:{external_port}"]
        cluster.start()
        ready = proc.wait_line("ready on")
        assert f"EXTERNAL://127.0.0.1:{external_port}" in ready
        assert f"EXTERNAL://localhost:{external_port}" in ready
        answers = {}
        for name, port in (("PLAINTEXT", internal_port), ("EXTERNAL", external_port)):
            with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = broker_pb2_grpc.BrokerStub(channel)  # type: ignore[no-untyped-call]
                answers[name] = hosts(stub.Metadata(pb.MetadataRequest(), timeout=10).brokers)
        assert answers == {
            "PLAINTEXT": {0: f"127.0.0.1:{internal_port}"},
            "EXTERNAL": {0: f"localhost:{external_port}"},
        }


def _free_port() -> int:
    from controller.ports import free_ports

    (port,) = free_ports(1)
    return port


def test_metadata_names_each_brokers_data_listener_to_clients_of_a_listener_with_its_protocol(
    harness: BrokerHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    register(harness, 1, Endpoint("PLAINTEXT", "broker-1", 19092), Endpoint("DATA", "broker-1", 19892),
             Endpoint("EXTERNAL", "localhost", 9093))  # fmt: skip
    register(harness, 2, Endpoint("PLAINTEXT", "broker-2", 19092))  # no DATA listener
    request = pb.MetadataRequest(all_topics=True)

    def data(listener: str) -> dict[int, str]:
        brokers = metadata.handle(harness.ctx, request, listener=listener).brokers
        return {b.node_id: f"{b.data_host}:{b.data_port}" for b in brokers if b.data_port}

    assert data("PLAINTEXT") == {1: "broker-1:19892"}  # no map: every listener is PLAINTEXT
    assert all(b.data_host == "" for b in metadata.handle(harness.ctx, request).brokers if b.node_id == 2)
    assert describe_cluster.handle(harness.ctx, pb.DescribeClusterRequest()).brokers[1].data_port == 0

    def protocols(text: str) -> None:
        monkeypatch.setattr(harness.ctx, "security", NodeSecurity.from_props({"listener.security.protocol.map": text}))

    protocols("PLAINTEXT:PLAINTEXT,EXTERNAL:SSL,DATA:PLAINTEXT")
    assert data("PLAINTEXT") == {1: "broker-1:19892"}
    assert data("EXTERNAL") == {}  # a client of an SSL listener is never sent to a plaintext one
    protocols("PLAINTEXT:SSL,EXTERNAL:SSL,DATA:SSL")
    assert data("EXTERNAL") == {1: "broker-1:19892"}
    protocols("PLAINTEXT:SSL,EXTERNAL:SASL_SSL,DATA:SSL")
    assert data("EXTERNAL") == {}  # a SASL client is never sent to a listener without SASL
    protocols("PLAINTEXT:SSL,EXTERNAL:SASL_SSL,DATA:SASL_SSL")
    assert data("EXTERNAL") == {1: "broker-1:19892"}  # it authenticates there with its session token
    assert data("PLAINTEXT") == {}  # nor a client without SASL to one with it
    protocols("PLAINTEXT:PLAINTEXT,EXTERNAL:PLAINTEXT")
    assert data("PLAINTEXT") == {}  # a map without DATA


def test_metadata_names_the_data_listener_of_the_clients_listener_first(
    harness: BrokerHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``DATA_<LISTENER>`` serves the clients of ``<LISTENER>`` (another network's address); ``DATA`` the rest."""
    register(harness, 1, Endpoint("PLAINTEXT", "broker-1", 19092), Endpoint("DATA", "broker-1", 19892),
             Endpoint("EXTERNAL", "localhost", 9093), Endpoint("DATA_EXTERNAL", "localhost", 9893))  # fmt: skip
    register(harness, 2, Endpoint("PLAINTEXT", "broker-2", 19092), Endpoint("DATA", "broker-2", 19892),
             Endpoint("EXTERNAL", "localhost", 9094))  # no DATA_EXTERNAL  # fmt: skip
    request = pb.MetadataRequest(all_topics=True)

    def data(listener: str) -> dict[int, str]:
        brokers = metadata.handle(harness.ctx, request, listener=listener).brokers
        return {b.node_id: f"{b.data_host}:{b.data_port}" for b in brokers if b.data_port}

    assert data("PLAINTEXT") == {1: "broker-1:19892", 2: "broker-2:19892"}
    assert data("EXTERNAL") == {1: "localhost:9893", 2: "broker-2:19892"}  # DATA where it has no DATA_EXTERNAL
    monkeypatch.setattr(harness.ctx, "security", NodeSecurity.from_props(
        {"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,DATA:PLAINTEXT,EXTERNAL:SSL,DATA_EXTERNAL:SSL"}))
    assert data("PLAINTEXT") == {1: "broker-1:19892", 2: "broker-2:19892"}
    assert data("EXTERNAL") == {1: "localhost:9893"}  # never the plaintext DATA for a client of an SSL listener
