"""What every request handler may use: the broker's identity, config, metadata, partitions, controllers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from broker.config import BrokerConfig
from broker.controller_channel import ControllerChannel
from broker.group.coordinator import GroupCoordinator
from broker.metadata_cache import MetadataCache
from broker.producer_ids import ProducerIdManager
from broker.replica_manager import ReplicaManager
from controller.security.settings import NodeSecurity
from proto import controller_pb2

if TYPE_CHECKING:
    from broker.metrics import BrokerMetrics
    from broker.txn.coordinator import TransactionCoordinator
    from broker.txn.peers import BrokerPeers


@dataclass(slots=True)
class QuorumInfo:
    """The last DescribeQuorum answer a controller gave (cluster id, controller nodes), for DescribeCluster."""

    cluster_id: str = ""
    nodes: list[controller_pb2.QuorumNode] = field(default_factory=list)


@dataclass(slots=True)
class BrokerContext:
    """The broker as request handlers see it.

    Thread-safety: every part is safe to use from request threads (see each class); ``quorum`` is replaced
    whole by the DescribeCluster handler (one attribute write).
    """

    broker_id: int
    config: BrokerConfig
    metadata: MetadataCache
    replicas: ReplicaManager
    controllers: ControllerChannel | None = None  # None: no controller (unit tests); forwards time out
    quorum: QuorumInfo = field(default_factory=QuorumInfo)
    forward_timeout_ms: int = 30_000
    producer_ids: ProducerIdManager | None = None  # None: no controller (unit tests); InitProducerId refuses
    coordinator: GroupCoordinator | None = None  # None: no group coordinator (unit tests)
    metrics: BrokerMetrics | None = None  # None: metrics off (no --metrics-listen): no metrics work per request
    security: NodeSecurity = field(default_factory=NodeSecurity)  # listeners' protocols, TLS, authorizer
    guard: Any = None  # controller.security.node.NodeGuard (SASL, authorizer); None: unit tests, no checks
    classic: Any = None  # broker.group.classic_driver.ClassicCoordinator; None: no classic groups (unit tests)
    txn_coordinator: TransactionCoordinator | None = None  # None: no transaction coordinator (unit tests)
    peers: BrokerPeers | None = None  # calls to other brokers (transactions); None: none (unit tests)
