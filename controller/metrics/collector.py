"""The controller's metrics, computed at scrape time from its committed image, its quorum and its stats.

Cluster-wide gauges (offline partitions, topic and partition counts, brokers) come from the active
controller only, as in Kafka: the others report 0, so that ``sum()`` over the controllers is the cluster's
value and ``kafka_controller_kafkacontroller_activecontrollercount`` sums to 1 in a healthy quorum. The Raft
metrics describe each node's own view. ``broker/metrics/README.md`` has the table of names.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from controller.metrics.stats import LatencyHistogram

if TYPE_CHECKING:
    from controller.node_api import ControllerNode

KC = "kafka_controller_kafkacontroller_"
RAFT = "kafka_server_raftmetrics_"
RAFT_STATES = ("leader", "follower", "candidate", "stopped")


class ControllerCollector(Collector):
    """Reads a controller node (:class:`~controller.node_api.ControllerNode`) when scraped (see the module
    docstring)."""

    def __init__(self, server: ControllerNode) -> None:
        self._server = server

    def collect(self) -> Iterator[Metric]:
        server = self._server
        image = server.publisher.image
        active = server.quorum.is_active() and image.controller_id == server.node_id
        yield _gauge(KC + "activecontrollercount", "1 on the active controller, else 0", int(active))
        partitions = [p for t in image.topics_by_name.values() for p in t.partitions.values()]
        counts = {
            "offlinepartitionscount": sum(1 for p in partitions if not p.has_leader),
            "preferredreplicaimbalancecount": sum(
                1 for p in partitions if p.has_leader and p.replicas and p.replicas[0] != p.leader
            ),
            "globaltopiccount": len(image.topics_by_name),
            "globalpartitioncount": len(partitions),
            "activebrokercount": sum(1 for b in image.brokers.values() if not b.fenced),
            "fencedbrokercount": sum(1 for b in image.brokers.values() if b.fenced),
        }
        for name, value in counts.items():
            yield _gauge(KC + name, f"{name} (active controller only)", value if active else 0)
        yield _gauge(KC + "lastappliedrecordoffset", "offset of the last metadata record applied", image.offset)
        stats = server.stats
        elections = CounterMetricFamily(
            "kafka_controller_controllerstats_leaderelections", "partition leaders elected by this controller"
        )
        elections.add_metric([], stats.leader_elections)
        yield elections
        unclean = CounterMetricFamily(
            "kafka_controller_controllerstats_uncleanleaderelections", "leaders elected from outside the ISR"
        )
        unclean.add_metric([], stats.unclean_leader_elections)
        yield unclean
        yield from self._raft(image.offset, stats.leader_changes, stats.commit_latency)

    def _raft(self, image_offset: int, leader_changes: int, commit_latency: LatencyHistogram) -> Iterator[Metric]:
        status = self._server.quorum.status()
        yield _gauge(RAFT + "currentleader", "the Raft leader's node id (-1: none known)",
                     -1 if status.leader_id is None else status.leader_id)  # fmt: skip
        yield _gauge(RAFT + "currentepoch", "the Raft term", status.raft_term)
        yield _gauge(RAFT + "highwatermark", "committed metadata offset + 1 (applied here)", image_offset + 1)
        yield _gauge(RAFT + "logendoffset", "the metadata log end offset", status.end_offset)
        state = GaugeMetricFamily(RAFT + "currentstate", "1 for this node's Raft role", labels=["state"])
        for role in RAFT_STATES:
            state.add_metric([role], int(status.role == role))
        yield state
        changes = CounterMetricFamily(RAFT + "leaderchanges", "new Raft leaders seen (LeaderChange records)")
        changes.add_metric([], leader_changes)
        yield changes
        yield histogram(RAFT + "commitlatencyms", "time from append to commit of metadata records (ms)", commit_latency)


def histogram(name: str, documentation: str, source: LatencyHistogram) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, documentation)
    family.add_metric([], [(bound, float(n)) for bound, n in source.cumulative()], source.sum_ms)
    return family


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)
