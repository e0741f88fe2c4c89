"""``odradek up``'s layout: the port plan, cluster.json's shape (docs/INTERFACE.md), restarts from it, the
children's command lines, the cluster secret and the one-``up``-per-data-dir lock."""

from __future__ import annotations

import argparse
import json
import os
import socket
import stat
from pathlib import Path

import pytest

from odradek.errors import CliError
from odradek.launcher.children import ports_in_use
from odradek.launcher.plan import (
    layout_counts,
    plan_cluster,
    plan_from_document,
    read_cluster_json,
    write_cluster_json,
)
from odradek.launcher.up import check_ports, child_argv, choose_plan, ensure_secret, locked


def up_args(**values: object) -> argparse.Namespace:
    defaults: dict[str, object] = {"controllers": None, "brokers": None, "base_port": None}
    return argparse.Namespace(**{**defaults, **values})


def test_port_plan_from_the_base_port(tmp_path: Path) -> None:
    plan = plan_cluster(str(tmp_path), controllers=3, brokers=2, base_port=9092)
    assert [b.listen for b in plan.brokers] == ["127.0.0.1:9092", "127.0.0.1:9093"]
    assert [c.listen for c in plan.controllers] == ["127.0.0.1:9192", "127.0.0.1:9193", "127.0.0.1:9194"]
    assert [c.raft_listen for c in plan.controllers] == ["127.0.0.1:9292", "127.0.0.1:9293", "127.0.0.1:9294"]
    assert plan.bootstrap_servers == "127.0.0.1:9092,127.0.0.1:9093"
    assert plan.quorum == "0@127.0.0.1:9292,1@127.0.0.1:9293,2@127.0.0.1:9294"
    assert plan.controller_listeners == "127.0.0.1:9192,127.0.0.1:9193,127.0.0.1:9194"
    assert [c.data_dir for c in plan.controllers][0] == str(tmp_path / "controller-0")
    assert plan.log_path(plan.brokers[1]) == tmp_path / "logs" / "broker-1.log"
    assert [b.kafka_listen for b in plan.brokers] == ["127.0.0.1:9392", "127.0.0.1:9393"]
    assert plan.kafka_bootstrap_servers == "127.0.0.1:9392,127.0.0.1:9393"
    assert [b.metrics for b in plan.brokers] == ["127.0.0.1:9592", "127.0.0.1:9593"]
    assert [c.metrics for c in plan.controllers] == ["127.0.0.1:9692", "127.0.0.1:9693", "127.0.0.1:9694"]
    assert [b.replication_listen for b in plan.brokers] == ["127.0.0.1:9792", "127.0.0.1:9793"]
    assert [b.data_listen for b in plan.brokers] == ["127.0.0.1:9892", "127.0.0.1:9893"]
    ports = [port for port, _ in plan.ports()]
    # controllers, raft, brokers' gRPC, Kafka, replication and data listeners, every node's metrics
    assert len(ports) == len(set(ports)) == 3 + 3 + 2 + 2 + 2 + 2 + 5
    assert len(plan.ports(metrics=False)) == 3 + 3 + 2 + 2 + 2 + 2


@pytest.mark.parametrize(
    ("controllers", "brokers", "base_port", "message"),
    [(0, 1, 9092, "--controllers"), (1, 0, 9092, "--brokers"), (1, 101, 9092, "--brokers"),
     (1, 1, 65400, "does not fit"), (1, 1, 0, "does not fit")],
)  # fmt: skip
def test_impossible_plans_are_refused(tmp_path: Path, controllers: int, brokers: int, base_port: int,
                                      message: str) -> None:  # fmt: skip
    with pytest.raises(CliError, match=message):
        plan_cluster(str(tmp_path), controllers, brokers, base_port)


def test_cluster_json_has_exactly_the_interface_shape(tmp_path: Path) -> None:
    plan = plan_cluster(str(tmp_path), 1, 2, 30000)
    path = write_cluster_json(plan, {"controller-0": 11, "broker-0": 12, "broker-1": 13})
    doc = json.loads(path.read_text())
    assert set(doc) == {"bootstrap_servers", "kafka_bootstrap_servers", "controllers", "brokers"}
    assert doc["bootstrap_servers"] == "127.0.0.1:30000,127.0.0.1:30001"
    assert doc["kafka_bootstrap_servers"] == "127.0.0.1:30300,127.0.0.1:30301"
    controller = {"node_id": 0, "pid": 11, "listen": "127.0.0.1:30100", "raft_listen": "127.0.0.1:30200",
                  "data_dir": str(tmp_path / "controller-0"), "metrics": "127.0.0.1:30600"}  # fmt: skip
    assert doc["controllers"] == [controller]
    keys = {"node_id", "pid", "listen", "kafka_listen", "replication_listen", "data_listen", "data_dir", "metrics"}
    assert [set(b) for b in doc["brokers"]] == [keys] * 2
    assert [b["kafka_listen"] for b in doc["brokers"]] == ["127.0.0.1:30300", "127.0.0.1:30301"]
    assert [b["replication_listen"] for b in doc["brokers"]] == ["127.0.0.1:30700", "127.0.0.1:30701"]
    assert [b["data_listen"] for b in doc["brokers"]] == ["127.0.0.1:30800", "127.0.0.1:30801"]
    assert [b["pid"] for b in doc["brokers"]] == [12, 13]
    assert [b["metrics"] for b in doc["brokers"]] == ["127.0.0.1:30500", "127.0.0.1:30501"]
    assert not list(tmp_path.glob(".cluster.json*")), "the temporary file is renamed into place"
    without = json.loads(write_cluster_json(plan, {}, metrics=False).read_text())
    assert [n["metrics"] for n in without["controllers"] + without["brokers"]] == [None] * 3


def test_a_cluster_json_without_metrics_gets_the_planned_addresses(tmp_path: Path) -> None:
    plan = plan_cluster(str(tmp_path), 1, 1, 31000)
    doc = json.loads(write_cluster_json(plan, {}).read_text())
    for node in doc["controllers"] + doc["brokers"]:
        del node["metrics"]  # as an older cluster.json
    assert plan_from_document(str(tmp_path), doc) == plan


def test_a_restart_takes_the_layout_from_cluster_json(tmp_path: Path) -> None:
    plan = plan_cluster(str(tmp_path), 3, 3, 31000)
    write_cluster_json(plan, {})
    again = plan_from_document(str(tmp_path), read_cluster_json(str(tmp_path)) or {})
    assert again == plan
    assert layout_counts(again) == (3, 3, 31000)
    chosen, restart = choose_plan(up_args(), str(tmp_path))
    assert restart
    assert chosen == plan
    chosen, _ = choose_plan(up_args(controllers=3, brokers=3, base_port=31000), str(tmp_path))
    assert chosen == plan


@pytest.mark.parametrize("option", [{"controllers": 1}, {"brokers": 5}, {"base_port": 9092}])
def test_a_restart_refuses_options_that_contradict_the_layout(tmp_path: Path, option: dict[str, int]) -> None:
    write_cluster_json(plan_cluster(str(tmp_path), 3, 3, 31000), {})
    with pytest.raises(CliError, match="contradicts"):
        choose_plan(up_args(**option), str(tmp_path))


def test_a_fresh_dir_gets_the_defaults(tmp_path: Path) -> None:
    plan, restart = choose_plan(up_args(), str(tmp_path))
    assert not restart
    assert layout_counts(plan) == (3, 3, 9092)


@pytest.mark.parametrize("content", ["{", "[]", '{"controllers": [], "brokers": []}',
                                     '{"controllers": [{"node_id": 0}], "brokers": []}'])  # fmt: skip
def test_a_broken_cluster_json_is_one_sentence(tmp_path: Path, content: str) -> None:
    (tmp_path / "cluster.json").write_text(content)
    with pytest.raises(CliError, match="cluster.json"):
        choose_plan(up_args(), str(tmp_path))


def test_children_get_the_interface_flags(tmp_path: Path) -> None:
    plan = plan_cluster(str(tmp_path), 3, 1, 30000)
    secret = tmp_path / "cluster.secret"
    controller = child_argv(plan, plan.controllers[1], secret, ["a=b"])
    assert controller[1:4] == ["-m", "odradek.cli", "controller"]
    flags = dict(zip(controller[4::2], controller[5::2], strict=True))
    assert flags == {
        "--node-id": "1", "--listen": "127.0.0.1:30101", "--raft-listen": "127.0.0.1:30201",
        "--quorum": "0@127.0.0.1:30200,1@127.0.0.1:30201,2@127.0.0.1:30202",
        "--controller-addresses": "0@127.0.0.1:30100,1@127.0.0.1:30101,2@127.0.0.1:30102",
        "--cluster-secret-file": str(secret), "--data-dir": str(tmp_path / "controller-1"), "--config": "a=b",
        "--metrics-listen": "127.0.0.1:30601",
    }  # fmt: skip
    broker = child_argv(plan, plan.brokers[0], secret, [])
    assert broker[3] == "broker"
    assert dict(zip(broker[4::2], broker[5::2], strict=True)) == {
        "--node-id": "0",
        "--listen": "PLAINTEXT://127.0.0.1:30000,KAFKA://127.0.0.1:30300,REPLICATION://127.0.0.1:30700,"
        "DATA://127.0.0.1:30800",
        "--data-dir": str(tmp_path / "broker-0"),
        "--controllers": "127.0.0.1:30100,127.0.0.1:30101,127.0.0.1:30102", "--metrics-listen": "127.0.0.1:30500",
    }  # fmt: skip
    assert "--metrics-listen" not in child_argv(plan, plan.brokers[0], secret, [], metrics=False)


def test_the_secret_is_private_and_kept(tmp_path: Path) -> None:
    path = ensure_secret(str(tmp_path))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    secret = path.read_text()
    assert len(secret.strip()) >= 32
    os.chmod(path, 0o644)
    assert ensure_secret(str(tmp_path)).read_text() == secret
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_one_up_per_data_dir(tmp_path: Path) -> None:
    with locked(str(tmp_path)), pytest.raises(CliError, match="another 'odradek up'"), locked(str(tmp_path)):
        pass
    with locked(str(tmp_path)):
        pass


def test_ports_in_use_are_found_and_named(tmp_path: Path) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert ports_in_use([(port, "broker 0")]) == [(port, "broker 0")]
        plan = plan_cluster(str(tmp_path), 1, 1, port)
        with pytest.raises(CliError, match=rf"already in use: {port} \(broker 0\); .*--base-port"):
            check_ports(plan, [])
    assert ports_in_use([(port, "broker 0")]) == []


def test_sasl_ssl_brokers_have_a_data_listener_for_their_sasl_clients(tmp_path: Path) -> None:
    """Clients of --security sasl_ssl produce and fetch on the brokers' DATA listeners too (SASL_SSL there: an AUTH
    frame with the session token of their SASL exchange), beside the brokers' own internal listener."""
    plan = plan_cluster(str(tmp_path), 1, 2, 9092, security="sasl_ssl")
    assert [b.data_listen for b in plan.brokers] == ["127.0.0.1:9892", "127.0.0.1:9893"]
    assert all(b.internal_listen for b in plan.brokers)
    ssl_plan = plan_cluster(str(tmp_path), 1, 2, 9092, security="ssl")
    assert [b.data_listen for b in ssl_plan.brokers] == ["127.0.0.1:9892", "127.0.0.1:9893"]
