"""What the scrape-time collectors read of a broker (``BrokerServer`` in ``broker/server.py``): the
:class:`BrokerNode` protocol. The server starts the metrics (``BrokerMetrics.start``); the metrics see the
server only through this protocol, so the import goes one way (docs/ARCHITECTURE.md, "Import direction")."""

from __future__ import annotations

from typing import Protocol

from broker.group.coordinator import GroupCoordinator
from broker.isr_manager import IsrManager
from broker.lifecycle import BrokerLifecycle
from broker.metadata_cache import MetadataCache
from broker.replica_manager import ReplicaManager
from controller.security.settings import NodeSecurity


class BrokerNode(Protocol):
    """A broker as its metrics see it (``BrokerServer`` is the one)."""

    @property
    def node_id(self) -> int: ...

    @property
    def stopping(self) -> bool: ...

    @property
    def metadata(self) -> MetadataCache: ...

    @property
    def replicas(self) -> ReplicaManager: ...

    @property
    def isr(self) -> IsrManager: ...

    @property
    def lifecycle(self) -> BrokerLifecycle: ...

    @property
    def coordinator(self) -> GroupCoordinator: ...

    @property
    def security(self) -> NodeSecurity: ...
