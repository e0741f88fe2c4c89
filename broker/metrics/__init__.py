"""The broker's metrics for Prometheus, named after Kafka's JMX metrics (``README.md`` here has the table).

:class:`BrokerMetrics` holds what the request path updates (per request name: count, errors, time; per
topic: bytes and messages in and out) and, once started, serves them with the scrape-time collectors
(partitions, purgatories, ISR changes, log flushes, consumer group lag, the process) on the node's
``/metrics`` endpoint. A broker without ``--metrics-listen`` has none: its request path then does no
metrics work at all (``BrokerContext.metrics`` is None).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from broker.metrics.collector import BrokerCollector, FlushMetrics
from broker.metrics.groups import GroupLagCollector
from broker.metrics.requests import RequestMetrics, TopicMetrics
from controller.metrics.endpoint import MetricsEndpoint, new_registry
from log.flush_stats import set_flush_observer

if TYPE_CHECKING:
    from broker.metrics.node import BrokerNode


class BrokerMetrics:
    """One broker's metrics and endpoint. ``start`` and ``stop`` from the broker's start/stop thread."""

    def __init__(self, listen: str) -> None:
        self.registry = new_registry()
        self.requests = RequestMetrics(self.registry)
        self.topics = TopicMetrics(self.registry)
        self.flushes = FlushMetrics(self.registry)
        self.endpoint = MetricsEndpoint(listen, self.registry)
        self._groups: GroupLagCollector | None = None

    def start(self, server: BrokerNode) -> None:
        """Register the scrape-time collectors of ``server`` and serve; ``RuntimeError`` when it cannot bind."""
        self.registry.register(BrokerCollector(server, self.topics))
        self._groups = GroupLagCollector(server)
        self.registry.register(self._groups)
        set_flush_observer(self.flushes.observe)
        self.endpoint.start()

    def stop(self) -> None:
        self.endpoint.stop()
        set_flush_observer(None)
        if self._groups is not None:
            self._groups.close()
