"""What the console's pages show, gathered through the client library (``odradek.Admin``) only.

:class:`ClusterView` turns the Admin answers into page-sized values: the cluster with each node's role,
liveness and gRPC health; topics with their partitions (leader, replicas, ISR, offline and under-replicated
replicas) and their sizes on disk (DescribeLogDirs, asked of every live broker: the leader replica's size
and offsets stand for the partition); consumer groups with members, assignment and lag.

Every client the console makes takes the same ``client_config`` (bootstrap servers and, once the cluster
has them, the security keys of ``--command-config``), so the console sees what its principal may see.

Thread-safety: the Admin client is thread-safe; a :class:`ClusterView` is shared by every request thread.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, field

from odradek import Admin, NewTopic
from odradek.errors import OdradekError
from odradek.health import check_all
from odradek.security.channels import channel_credentials
from odradek.security.config import SecurityConfig
from odradek.types import ConfigEntry, ConfigResource, GroupDescription, ReplicaLogDir

HEALTH_TIMEOUT_S = 1.0


@dataclass(frozen=True, slots=True)
class NodeView:
    role: str  # "controller" | "broker"
    node_id: int
    address: str
    status: str  # controllers: active | standby; brokers: alive | fenced
    health: str  # the gRPC health service's answer (SERVING, NOT_SERVING, UNREACHABLE, ...)
    rack: str = ""
    leaders: int = 0
    replicas: int = 0
    size_bytes: int | None = None  # None: the broker did not say


@dataclass(frozen=True, slots=True)
class PartitionView:
    partition: int
    leader: int
    replicas: list[int]
    isr: list[int]
    offline: list[int]
    log_start_offset: int | None = None
    high_watermark: int | None = None
    size_bytes: int | None = None

    @property
    def under_replicated(self) -> bool:
        return len(self.isr) < len(self.replicas)

    @property
    def out_of_sync(self) -> list[int]:
        return [r for r in self.replicas if r not in self.isr]

    @property
    def messages(self) -> int | None:
        if self.log_start_offset is None or self.high_watermark is None:
            return None
        return max(0, self.high_watermark - self.log_start_offset)


@dataclass(frozen=True, slots=True)
class TopicView:
    name: str
    internal: bool
    partitions: list[PartitionView]
    configs: dict[str, ConfigEntry] = field(default_factory=dict)

    @property
    def replication_factor(self) -> int:
        return max((len(p.replicas) for p in self.partitions), default=0)

    @property
    def under_replicated(self) -> int:
        return sum(1 for p in self.partitions if p.under_replicated)

    @property
    def offline(self) -> int:
        return sum(1 for p in self.partitions if p.leader < 0)

    @property
    def size_bytes(self) -> int | None:
        sizes = [p.size_bytes for p in self.partitions]
        return None if not sizes or any(s is None for s in sizes) else sum(s for s in sizes if s is not None)

    @property
    def messages(self) -> int | None:
        counts = [p.messages for p in self.partitions]
        return None if not counts or any(c is None for c in counts) else sum(c for c in counts if c is not None)


@dataclass(frozen=True, slots=True)
class Overview:
    cluster_id: str
    controller_id: int
    controllers: list[NodeView]
    brokers: list[NodeView]
    topics: int
    partitions: int
    under_replicated: int
    offline: int
    groups: int


@dataclass(frozen=True, slots=True)
class GroupRow:
    group_id: str
    state: str
    members: int | None
    total_lag: int | None
    coordinator_id: int
    error: str = ""


class ClusterView:
    """The console's window on a cluster (see the module docstring)."""

    def __init__(self, client_config: Mapping[str, object]) -> None:
        self.client_config = dict(client_config)
        self.admin = Admin({**self.client_config, "default.api.timeout.ms": 10_000})
        # the health checks speak TLS to TLS listeners, with the client certificate when there is one
        self._health_credentials = channel_credentials(SecurityConfig.from_mapping(self.client_config))

    def close(self) -> None:
        self.admin.close()

    # ------------------------------------------------------------------------------------- cluster

    def overview(self) -> Overview:
        cluster = self.admin.describe_cluster()
        topics = self.topics(include_internal=True)
        alive = [b.node_id for b in cluster.brokers if not b.fenced]
        dirs = self.log_dirs(alive)
        health = check_all([n.address for n in cluster.controllers] + [b.address for b in cluster.brokers],
                           timeout_s=HEALTH_TIMEOUT_S, credentials=self._health_credentials)  # fmt: skip
        controllers = [
            NodeView("controller", n.node_id, n.address, "active" if n.node_id == cluster.controller_id else "standby",
                     health.get(n.address, "UNKNOWN"))
            for n in cluster.controllers
        ]  # fmt: skip
        partitions = [p for t in topics for p in t.partitions]
        brokers = []
        for b in cluster.brokers:
            held = dirs.get(b.node_id)
            brokers.append(NodeView(
                "broker", b.node_id, b.address, "fenced" if b.fenced else "alive", health.get(b.address, "UNKNOWN"),
                b.rack, leaders=sum(1 for p in partitions if p.leader == b.node_id),
                replicas=sum(1 for p in partitions if b.node_id in p.replicas),
                size_bytes=None if held is None else sum(r.size_bytes for r in held),
            ))  # fmt: skip
        groups = 0
        with contextlib.suppress(OdradekError):
            groups = len(self.admin.list_groups())
        return Overview(
            cluster.cluster_id, cluster.controller_id, controllers, brokers, len(topics), len(partitions),
            sum(1 for p in partitions if p.under_replicated), sum(1 for p in partitions if p.leader < 0), groups,
        )  # fmt: skip

    def log_dirs(self, broker_ids: list[int], topics: list[str] | None = None) -> dict[int, list[ReplicaLogDir]]:
        """DescribeLogDirs of every broker that answers (one that does not is left out)."""
        found: dict[int, list[ReplicaLogDir]] = {}
        for broker_id in broker_ids:
            with contextlib.suppress(OdradekError):
                found.update(self.admin.describe_log_dirs([broker_id], topics or ()))
        return found

    # -------------------------------------------------------------------------------------- topics

    def topics(self, *, include_internal: bool = False, names: list[str] | None = None) -> list[TopicView]:
        described = self.admin.describe_topics(names)
        cluster = self.admin.describe_cluster()
        dirs = self.log_dirs([b.node_id for b in cluster.brokers if not b.fenced], names)
        leader_dirs = {(r.topic, r.partition): r for held in dirs.values() for r in held if r.is_leader}
        views = []
        for name, topic in described.items():
            if topic.is_internal and not include_internal:
                continue
            partitions = []
            for p in topic.partitions:
                d = leader_dirs.get((name, p.partition))
                partitions.append(PartitionView(
                    p.partition, p.leader, list(p.replicas), list(p.isr), list(p.offline_replicas),
                    d.log_start_offset if d else None, d.high_watermark if d else None, d.size_bytes if d else None,
                ))  # fmt: skip
            views.append(TopicView(name, topic.is_internal, partitions))
        return views

    def topic(self, name: str) -> TopicView:
        view = self.topics(include_internal=True, names=[name])[0]
        configs = self.admin.describe_configs([ConfigResource("topic", name)])[ConfigResource("topic", name)]
        return TopicView(view.name, view.internal, view.partitions, dict(sorted(configs.items())))

    def create_topic(self, name: str, partitions: int, replication_factor: int, configs: Mapping[str, str]) -> None:
        self.admin.create_topics([NewTopic(name, partitions, replication_factor, config=dict(configs))])

    def alter_topic_configs(self, name: str, changes: Mapping[str, str | None]) -> None:
        self.admin.alter_configs({ConfigResource("topic", name): dict(changes)})

    # -------------------------------------------------------------------------------------- groups

    def groups(self) -> list[GroupRow]:
        rows = []
        for listing in sorted(self.admin.list_groups(), key=lambda g: g.group_id):
            try:
                group = self.admin.describe_group(listing.group_id)
            except OdradekError as exc:
                rows.append(GroupRow(listing.group_id, listing.state, None, None, listing.coordinator_id, str(exc)))
                continue
            lag = group.total_lag if any(p.lag is not None for p in group.offsets) else None
            rows.append(GroupRow(group.group_id, group.state, len(group.members), lag, group.coordinator_id))
        return rows

    def group(self, group_id: str) -> GroupDescription:
        return self.admin.describe_group(group_id)


def parse_configs(text: str) -> dict[str, str]:
    """``key=value`` lines (blank lines and ``#`` or ``!`` comments skipped, as in a Kafka properties file) as a
    dict; ValueError naming a bad line."""
    configs: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"line {number}: expected key=value, got {line!r}")
        configs[key.strip()] = value.strip()
    return configs
