"""The broker's gauges, computed at scrape time from its partitions, purgatories and lifecycle.

Nothing here runs between scrapes: a scrape walks the partition map once (a lock-free read of the published
map, then each partition's read-only properties and its log's size) and reads the counters that the ISR
thread and the flush observer keep. ``broker/metrics/README.md`` has the table of names.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from broker.metrics.requests import TopicMetrics

if TYPE_CHECKING:
    from broker.metrics.node import BrokerNode

RM = "kafka_server_replicamanager_"
# Kafka's BrokerState values (kafka.metadata.BrokerState)
STARTING, RECOVERY, RUNNING, SHUTTING_DOWN = 1, 2, 3, 7
PURGATORIES = (("Produce", "produce_purgatory"), ("Fetch", "fetch_purgatory"))


class BrokerCollector(Collector):
    """Reads a :class:`~broker.metrics.node.BrokerNode` (the ``BrokerServer``) when scraped (see the module
    docstring)."""

    def __init__(self, server: BrokerNode, topics: TopicMetrics) -> None:
        self._server = server
        self._topics = topics

    def collect(self) -> Iterator[Metric]:
        server = self._server
        yield _gauge("kafka_server_kafkaserver_brokerstate", "1 starting, 2 recovery (catching up with the "
                     "metadata), 3 running (unfenced), 7 shutting down", _state(server))  # fmt: skip
        image = server.metadata.image
        yield _gauge("kafka_server_brokermetadatametrics_lastappliedrecordoffset",
                     "offset of the last metadata record applied", image.offset)  # fmt: skip
        self._topics.forget_except(image.topics_by_name)
        yield from self._partitions()
        for name in ("purgatorysize", "numdelayedoperations"):
            family = GaugeMetricFamily(f"kafka_server_delayedoperationpurgatory_{name}",
                                       "operations waiting in the purgatory", labels=["delayedOperation"])  # fmt: skip
            for label, attribute in PURGATORIES:
                family.add_metric([label], getattr(server.replicas, attribute).size)
            yield family
        yield _counter(RM + "isrshrinks", "ISR changes that removed replicas", server.isr.isr_shrinks)
        yield _counter(RM + "isrexpands", "ISR changes that added replicas", server.isr.isr_expands)

    def _partitions(self) -> Iterator[Metric]:
        broker_id = self._server.node_id
        labels = ["topic", "partition"]
        log = {name: GaugeMetricFamily(f"kafka_log_log_{name}", text, labels=labels) for name, text in (
            ("size", "bytes of the partition's segments"), ("logstartoffset", "log start offset"),
            ("logendoffset", "log end offset"), ("numlogsegments", "segments"),
        )}  # fmt: skip
        cluster = {name: GaugeMetricFamily(f"kafka_cluster_partition_{name}", text, labels=labels) for name, text in (
            ("underreplicated", "1 when the ISR is smaller than the replica set (leaders only)"),
            ("insyncreplicascount", "ISR size (leaders only)"), ("replicascount", "replicas (leaders only)"),
            ("underminisr", "1 when the ISR is below min.insync.replicas (leaders only)"),
        )}  # fmt: skip
        counts = dict.fromkeys(("partitioncount", "leadercount", "underreplicatedpartitions",
                                "underminisrpartitioncount", "atminisrpartitioncount"), 0)  # fmt: skip
        for (topic, number), partition in sorted(self._server.replicas.partitions().items()):
            key = [topic, str(number)]
            counts["partitioncount"] += 1
            local = partition.log
            log["size"].add_metric(key, local.size_bytes)
            log["logstartoffset"].add_metric(key, partition.log_start_offset)
            log["logendoffset"].add_metric(key, partition.log_end_offset)
            log["numlogsegments"].add_metric(key, len(local.segments))
            if partition.leader_id != broker_id or not partition.is_leader:
                continue
            isr, replicas = len(partition.isr), len(partition.replicas)
            min_isr = partition.config.min_insync_replicas
            counts["leadercount"] += 1
            counts["underreplicatedpartitions"] += isr < replicas
            counts["underminisrpartitioncount"] += isr < min_isr
            counts["atminisrpartitioncount"] += isr == min_isr
            cluster["underreplicated"].add_metric(key, int(isr < replicas))
            cluster["underminisr"].add_metric(key, int(isr < min_isr))
            cluster["insyncreplicascount"].add_metric(key, isr)
            cluster["replicascount"].add_metric(key, replicas)
        for name, value in counts.items():
            yield _gauge(RM + name, name, value)
        yield from log.values()
        yield from cluster.values()


FLUSH_BUCKETS_MS = (0.1, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000)


class FlushMetrics:
    """Log flushes (``log.flush_stats``'s observer): Kafka's ``LogFlushRateAndTimeMs`` histogram for the
    broker, and per partition the flushes and their total time (their ratio: a partition's mean flush time).

    Thread-safety: ``observe`` runs on whichever thread flushes (under that log's lock).
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self._time = Histogram("kafka_log_logflushstats_logflushrateandtimems", "time of a log flush (fsync), ms",
                               buckets=FLUSH_BUCKETS_MS, registry=registry)  # fmt: skip
        self._flushes = Counter("kafka_log_log_flushes", "flushes of the partition's log", ["topic", "partition"],
                                registry=registry)  # fmt: skip
        self._flush_ms = Counter("kafka_log_log_flushtimems", "total time of the partition's flushes, ms",
                                 ["topic", "partition"], registry=registry)  # fmt: skip

    def observe(self, log_dir_name: str, duration_ms: float) -> None:
        topic, _, partition = log_dir_name.rpartition("-")
        self._time.observe(duration_ms)
        self._flushes.labels(topic, partition).inc()
        self._flush_ms.labels(topic, partition).inc(duration_ms)


def _state(server: BrokerNode) -> int:
    if server.stopping:
        return SHUTTING_DOWN
    if server.lifecycle.unfenced.is_set():
        return RUNNING
    return RECOVERY if server.lifecycle.registered.is_set() else STARTING


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)


def _counter(name: str, documentation: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, documentation, value=value)
