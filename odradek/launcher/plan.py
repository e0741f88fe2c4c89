"""The layout of a local cluster (node ids, ports, directories) and its ``cluster.json``: pure functions.

Port plan from ``--base-port B`` (default 9092), every address on 127.0.0.1::

    broker i                    B + i          (9092, 9093, ...: the bootstrap servers)
    controller i, gRPC          B + 100 + i    (9192, 9193, ...)
    controller i, Raft          B + 200 + i    (9292, 9293, ...)
    broker i, Kafka protocol    B + 300 + i    (9392, 9393, ...: the Kafka bootstrap servers)
    broker i, internal          B + 400 + i    (--security sasl_ssl: the brokers' own SSL listener)
    broker i, metrics           B + 500 + i    (9592, ...: http://HOST:PORT/metrics)
    controller i, metrics       B + 600 + i    (9692, ...)
    broker i, replication       B + 700 + i    (9792, ...: followers fetch here, broker.replication_link)
    broker i, data              B + 800 + i    (9892, ...: the clients' Produce and Fetch on TCP frames; with
                                                --security sasl_ssl SASL_SSL, the clients' session tokens)

(a node's metrics port is its gRPC port + 500).

Node ids count from 0 for controllers and brokers alike (they are separate id spaces). Under the data
dir ``D``: ``D/controller-<id>/`` and ``D/broker-<id>/`` (each node's data dir), ``D/logs/<name>.log``,
``D/cluster.secret`` and ``D/cluster.json``. A data dir that already holds a ``cluster.json`` is
restarted with the layout that file records (same node ids, ports and directories).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from odradek.errors import CliError

HOST = "127.0.0.1"
DEFAULT_BASE_PORT = 9092
CONTROLLER_PORT_OFFSET = 100
RAFT_PORT_OFFSET = 200
KAFKA_PORT_OFFSET = 300
INTERNAL_PORT_OFFSET = 400
METRICS_PORT_OFFSET = 500  # from the node's gRPC port
REPLICATION_PORT_OFFSET = 700
DATA_PORT_OFFSET = 800
MAX_NODES = 100  # per role: the port ranges above must not overlap
CLUSTER_JSON = "cluster.json"
SECRET_FILE = "cluster.secret"


@dataclass(frozen=True, slots=True)
class NodePlan:
    """One process of the cluster. ``raft_listen`` is empty for a broker; ``metrics`` is the address of its
    ``/metrics`` endpoint."""

    role: str  # "controller" or "broker"
    node_id: int
    listen: str
    data_dir: str
    raft_listen: str = ""
    kafka_listen: str = ""  # a broker's Kafka-protocol listener ("" in a layout from before it existed)
    metrics: str = ""
    internal_listen: str = ""  # --security sasl_ssl: a broker's inter-broker listener (SSL)
    replication_listen: str = ""  # a broker's REPLICATION listener ("" in a layout from before it existed)
    data_listen: str = ""  # a broker's DATA listener ("" in a layout from before it existed)

    @property
    def name(self) -> str:
        return f"{self.role}-{self.node_id}"


@dataclass(frozen=True, slots=True)
class ClusterPlan:
    root: str
    controllers: tuple[NodePlan, ...]
    brokers: tuple[NodePlan, ...]
    security: str = "plaintext"  # odradek up --security (odradek.launcher.secure)

    @property
    def nodes(self) -> tuple[NodePlan, ...]:
        return self.controllers + self.brokers

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(b.listen for b in self.brokers)

    @property
    def kafka_bootstrap_servers(self) -> str:
        return ",".join(b.kafka_listen for b in self.brokers if b.kafka_listen)

    @property
    def quorum(self) -> str:
        """``--quorum``: every controller's Raft address."""
        return ",".join(f"{c.node_id}@{c.raft_listen}" for c in self.controllers)

    @property
    def controller_addresses(self) -> str:
        """``--controller-addresses``: every controller's gRPC address, with its id."""
        return ",".join(f"{c.node_id}@{c.listen}" for c in self.controllers)

    @property
    def controller_listeners(self) -> str:
        """A broker's ``--controllers``: every controller's gRPC address."""
        return ",".join(c.listen for c in self.controllers)

    def ports(self, *, metrics: bool = True) -> list[tuple[int, str]]:
        """Every port the cluster binds, with what binds it (for "port in use" messages)."""
        found: list[tuple[int, str]] = []
        for node in self.nodes:
            found.append((port_of(node.listen), f"{node.role} {node.node_id}"))
            if node.raft_listen:
                found.append((port_of(node.raft_listen), f"controller {node.node_id} (Raft)"))
            if node.kafka_listen:
                found.append((port_of(node.kafka_listen), f"broker {node.node_id} (Kafka protocol)"))
            if node.internal_listen:
                found.append((port_of(node.internal_listen), f"broker {node.node_id} (internal)"))
            if node.replication_listen:
                found.append((port_of(node.replication_listen), f"broker {node.node_id} (replication)"))
            if node.data_listen:
                found.append((port_of(node.data_listen), f"broker {node.node_id} (data)"))
            if metrics and node.metrics:
                found.append((port_of(node.metrics), f"{node.role} {node.node_id} (metrics)"))
        return found

    def log_path(self, node: NodePlan) -> Path:
        return Path(self.root) / "logs" / f"{node.name}.log"


def port_of(address: str) -> int:
    return int(address.rpartition(":")[2])


def plan_cluster(
    root: str, controllers: int, brokers: int, base_port: int, hosts: Mapping[str, str] | None = None,
    security: str = "plaintext",
) -> ClusterPlan:  # fmt: skip
    """A fresh layout: ``controllers`` and ``brokers`` nodes on ports planned from ``base_port``, every one on
    127.0.0.1 unless ``hosts`` gives a node (by name, ``broker-0``) an address of its own (the chaos harness
    gives each node its own loopback address, so that links between nodes can be cut)."""
    hosts = hosts or {}
    for count, what in ((controllers, "--controllers"), (brokers, "--brokers")):
        if not 1 <= count <= MAX_NODES:
            raise CliError(f"{what} must be between 1 and {MAX_NODES}, got {count}")
    highest = max(base_port + CONTROLLER_PORT_OFFSET + METRICS_PORT_OFFSET + controllers,
                  base_port + DATA_PORT_OFFSET + brokers) - 1  # fmt: skip
    if base_port < 1 or highest > 65535:
        raise CliError(
            f"--base-port {base_port} does not fit: the cluster uses ports {base_port}..{highest} "
            f"(brokers from {base_port}, controllers from {base_port + CONTROLLER_PORT_OFFSET}, "
            f"Raft from {base_port + RAFT_PORT_OFFSET}, Kafka protocol from {base_port + KAFKA_PORT_OFFSET}, "
            f"metrics from {base_port + METRICS_PORT_OFFSET}, replication from {base_port + REPLICATION_PORT_OFFSET}, "
            f"data from {base_port + DATA_PORT_OFFSET})"
        )
    root = os.path.abspath(root)
    return ClusterPlan(
        root=root,
        security=security,
        controllers=tuple(
            NodePlan(
                "controller",
                i,
                f"{_host(hosts, 'controller', i)}:{base_port + CONTROLLER_PORT_OFFSET + i}",
                os.path.join(root, f"controller-{i}"),
                raft_listen=f"{_host(hosts, 'controller', i)}:{base_port + RAFT_PORT_OFFSET + i}",
                metrics=f"{_host(hosts, 'controller', i)}:"
                f"{base_port + CONTROLLER_PORT_OFFSET + METRICS_PORT_OFFSET + i}",
            )
            for i in range(controllers)
        ),  # fmt: skip
        brokers=tuple(
            NodePlan("broker", i, f"{_host(hosts, 'broker', i)}:{base_port + i}", os.path.join(root, f"broker-{i}"),
                     kafka_listen=f"{_host(hosts, 'broker', i)}:{base_port + KAFKA_PORT_OFFSET + i}",
                     metrics=f"{_host(hosts, 'broker', i)}:{base_port + METRICS_PORT_OFFSET + i}",
                     internal_listen=f"{_host(hosts, 'broker', i)}:{base_port + INTERNAL_PORT_OFFSET + i}"
                     if security == "sasl_ssl" else "",
                     replication_listen=f"{_host(hosts, 'broker', i)}:{base_port + REPLICATION_PORT_OFFSET + i}",
                     data_listen=f"{_host(hosts, 'broker', i)}:{base_port + DATA_PORT_OFFSET + i}")
            for i in range(brokers)
        ),
    )


def _host(hosts: Mapping[str, str], role: str, node_id: int) -> str:
    return hosts.get(f"{role}-{node_id}", HOST)


def cluster_document(plan: ClusterPlan, pids: Mapping[str, int], *, metrics: bool = True) -> dict[str, Any]:
    """``cluster.json`` as docs/INTERFACE.md defines it; ``pids`` maps node names (``broker-0``) to process ids;
    each node's ``"metrics"`` is its ``/metrics`` address, null when the cluster runs without metrics."""
    doc: dict[str, Any] = {
        "bootstrap_servers": plan.bootstrap_servers,
        "kafka_bootstrap_servers": plan.kafka_bootstrap_servers,
        "controllers": [
            {
                "node_id": c.node_id,
                "pid": pids.get(c.name),
                "listen": c.listen,
                "raft_listen": c.raft_listen,
                "data_dir": c.data_dir,
            }
            for c in plan.controllers
        ],  # fmt: skip
        "brokers": [
            {"node_id": b.node_id, "pid": pids.get(b.name), "listen": b.listen, "kafka_listen": b.kafka_listen,
             "data_dir": b.data_dir, **({"internal_listen": b.internal_listen} if b.internal_listen else {}),
             **({"replication_listen": b.replication_listen} if b.replication_listen else {}),
             **({"data_listen": b.data_listen} if b.data_listen else {})}
            for b in plan.brokers
        ],
    }
    if plan.security != "plaintext":
        doc["security"] = plan.security
        doc["client_properties"] = os.path.join(plan.root, "client.properties")
    for key, nodes in (("controllers", plan.controllers), ("brokers", plan.brokers)):
        for entry, node in zip(doc[key], nodes, strict=True):
            entry["metrics"] = node.metrics if metrics and node.metrics else None
    return doc


def write_cluster_json(plan: ClusterPlan, pids: Mapping[str, int], *, metrics: bool = True) -> Path:
    """Write ``<root>/cluster.json`` atomically (a reader never sees half a file)."""
    path = Path(plan.root) / CLUSTER_JSON
    tmp = path.with_name(f".{CLUSTER_JSON}.tmp")
    tmp.write_text(json.dumps(cluster_document(plan, pids, metrics=metrics), indent=2) + "\n")
    os.replace(tmp, path)
    return path


def read_cluster_json(root: str) -> dict[str, Any] | None:
    """``<root>/cluster.json``, or None when there is none; :class:`CliError` when it does not parse."""
    path = Path(root) / CLUSTER_JSON
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise CliError(f"{path} is not valid JSON ({exc}); move it away to start a new cluster there") from None
    if not isinstance(doc, dict):
        raise CliError(f"{path} does not hold a JSON object; move it away to start a new cluster there")
    return doc


def plan_from_document(root: str, doc: Mapping[str, Any]) -> ClusterPlan:
    """The layout a ``cluster.json`` records (for a restart); :class:`CliError` when it is incomplete."""
    path = os.path.join(os.path.abspath(root), CLUSTER_JSON)
    try:
        controllers = tuple(_node("controller", entry) for entry in _entries(doc, "controllers"))
        brokers = tuple(_node("broker", entry) for entry in _entries(doc, "brokers"))
    except (KeyError, TypeError, ValueError) as exc:
        raise CliError(f"{path} does not describe a cluster ({exc}); move it away to start a new one") from None
    if not controllers or not brokers:
        raise CliError(f"{path} lists no controller or no broker; move it away to start a new cluster there")
    security = doc.get("security", "plaintext")
    if security not in ("plaintext", "ssl", "sasl_ssl"):
        raise CliError(f"{path} names an unknown security mode {security!r}")
    return ClusterPlan(os.path.abspath(root), controllers, brokers, security)


def _entries(doc: Mapping[str, Any], key: str) -> Sequence[Mapping[str, Any]]:
    entries = doc[key]
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise TypeError(f"{key!r} is not a list of objects")
    return entries


def _node(role: str, entry: Mapping[str, Any]) -> NodePlan:
    node_id = entry["node_id"]
    if type(node_id) is not int or node_id < 0:
        raise ValueError(f"bad node_id {node_id!r}")
    listen = _address(entry["listen"])
    raft = _address(entry["raft_listen"]) if role == "controller" else ""
    kafka = _address(entry["kafka_listen"]) if role == "broker" and entry.get("kafka_listen") else ""
    internal = _address(entry["internal_listen"]) if role == "broker" and entry.get("internal_listen") else ""
    replication = _address(entry["replication_listen"]) if role == "broker" and entry.get("replication_listen") else ""
    data = _address(entry["data_listen"]) if role == "broker" and entry.get("data_listen") else ""
    data_dir = entry["data_dir"]
    if not isinstance(data_dir, str) or not data_dir:
        raise ValueError(f"bad data_dir {data_dir!r}")
    # a cluster.json without metrics addresses (an older one, or a run without metrics): the planned ones
    metrics = entry.get("metrics") or f"{listen.rpartition(':')[0]}:{port_of(listen) + METRICS_PORT_OFFSET}"
    return NodePlan(role, node_id, listen, data_dir, raft_listen=raft, kafka_listen=kafka, metrics=_address(metrics),
                    internal_listen=internal, replication_listen=replication, data_listen=data)


def _address(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(f"bad address {value!r}")
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"bad address {value!r}")
    return value


def layout_counts(plan: ClusterPlan) -> tuple[int, int, int]:
    """``(controllers, brokers, base_port)`` of a layout (base port: the first broker's)."""
    return len(plan.controllers), len(plan.brokers), min(port_of(b.listen) for b in plan.brokers)
