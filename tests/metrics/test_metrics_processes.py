"""Metrics and health of real processes: 3 controllers and 3 brokers with ``--metrics-listen``, scraped over HTTP
while the test produces, consumes, lets a group lag, and kills a follower.

Each test asserts that values move the way an operator's dashboard expects (bytes in rise with a produce, a
killed follower makes partitions under-replicated, a lagging group shows its lag, exactly one active
controller). Waits are bounded polls of the scrape.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from odradek import Admin, Consumer, Producer, TopicPartition
from odradek.health import SERVING, UNREACHABLE, check, check_all
from proto import broker_pb2
from tests.broker.cluster import Cluster
from tests.metrics.scrape import scrape, total, value

pytestmark = pytest.mark.slow

WAIT_S = 60.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    # A follower that stops fetching leaves the ISR by its leader's decision (replica.lag.time.max.ms) well
    # before the controller fences it (broker.session.timeout.ms): Kafka's IsrShrinks count the former.
    config = {"replica.lag.time.max.ms": "1000", "offsets.topic.replication.factor": "3",
              "offsets.topic.num.partitions": "3"}  # fmt: skip
    with Cluster(tmp_path_factory.mktemp("metrics"), brokers=3, controllers=3, broker_config=config,
                 controller_config={"broker.session.timeout.ms": "6000"}, metrics=True, kafka=True) as c:  # fmt: skip
        yield c


def admin(cluster: Cluster) -> Admin:
    return Admin({"bootstrap.servers": cluster.bootstrap_servers})


def produce(cluster: Cluster, topic: str, count: int, partition: int = 0, acks: str = "all") -> None:
    config = {"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 5, "acks": acks,
              "enable.idempotence": acks == "all"}  # fmt: skip
    with Producer(config) as producer:
        futures = [producer.send(topic, value=b"v%06d" % i, partition=partition) for i in range(count)]
        producer.flush(30)
        for future in futures:
            future.result(timeout=30)


def leader_index(cluster: Cluster, topic: str, partition: int = 0) -> int:
    leader = cluster.leader(topic, partition)
    return next(i for i, b in enumerate(cluster.brokers) if b.node_id == leader)


def test_every_node_serves_metrics_and_health(cluster: Cluster) -> None:
    procs = cluster.controllers + cluster.brokers
    for proc in procs:
        samples = scrape(proc.metrics_address)
        assert value(samples, "process_resident_memory_bytes") > 0
        assert value(samples, "process_open_fds") > 0
        assert "process_cpu_seconds_total" in {name for name, _ in samples}
    # "ready" lines come first; the health service follows within its poll interval (a controller's once the
    # quorum has a leader)
    every = {p.address: SERVING for p in procs}
    cluster.wait_for(lambda: check_all(every) == every, WAIT_S, "every node SERVING")
    assert check(cluster.brokers[0].address, "odradek.broker.Broker") == SERVING
    assert check(cluster.controllers[0].address, "odradek.controller.Controller") == SERVING
    for proc in cluster.brokers:
        assert value(scrape(proc.metrics_address), "kafka_server_kafkaserver_brokerstate") == 3  # RUNNING
    done = subprocess.run([sys.executable, "-m", "odradek.cli", "health", cluster.brokers[1].address],
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert (done.returncode, done.stdout.strip()) == (0, f"{cluster.brokers[1].address} SERVING")


def test_exactly_one_active_controller(cluster: Cluster) -> None:
    scrapes = [scrape(c.metrics_address) for c in cluster.controllers]
    assert sum(value(s, "kafka_controller_kafkacontroller_activecontrollercount") for s in scrapes) == 1
    assert sum(value(s, "kafka_controller_kafkacontroller_activebrokercount") for s in scrapes) == 3
    assert sum(value(s, "kafka_controller_kafkacontroller_offlinepartitionscount") for s in scrapes) == 0
    assert sum(value(s, "kafka_server_raftmetrics_currentstate", {"state": "leader"}) for s in scrapes) == 1
    leaders = {value(s, "kafka_server_raftmetrics_currentleader") for s in scrapes}
    assert len(leaders) == 1
    assert leaders != {-1}


def test_produce_and_consume_move_the_topic_and_request_metrics(cluster: Cluster) -> None:
    cluster.create_topic("flow", partitions=1, replication_factor=3)
    leader = cluster.brokers[leader_index(cluster, "flow")]
    before = scrape(leader.metrics_address)
    produce(cluster, "flow", 500)
    after = scrape(leader.metrics_address)
    topic = {"topic": "flow"}
    assert value(after, "kafka_server_brokertopicmetrics_messagesin_total", topic) == 500
    bytes_in = value(after, "kafka_server_brokertopicmetrics_bytesin_total", topic)
    assert bytes_in > 500 * 7  # the values alone are 7 bytes each
    produce_requests = {"request": "Produce"}
    assert (value(after, "kafka_network_requestmetrics_requests_total", produce_requests)
            > value(before, "kafka_network_requestmetrics_requests_total", produce_requests, default=0))  # fmt: skip
    assert value(after, "kafka_network_requestmetrics_totaltimems_count", produce_requests) >= 1
    log_size = value(after, "kafka_log_log_size", {"topic": "flow", "partition": "0"})
    assert log_size == bytes_in  # everything produced is in the leader's log, byte for byte
    assert value(after, "kafka_log_log_logendoffset", {"topic": "flow", "partition": "0"}) == 500
    cluster.wait_for(lambda: total(scrape(leader.metrics_address), "kafka_server_brokertopicmetrics_"
                                   "replicationbytesout_total", topic="flow") >= 2 * bytes_in,
                     WAIT_S, "both followers to fetch every byte")  # fmt: skip

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition("flow", 0)])
        seen: list[object] = []

        def read_all() -> bool:
            seen.extend(consumer.poll(timeout_ms=500))
            return len(seen) >= 500

        cluster.wait_for(read_all, WAIT_S, "the consumer to read 500 records")
        assert len(seen) == 500
    finally:
        consumer.close()
    out = scrape(leader.metrics_address)
    assert value(out, "kafka_server_brokertopicmetrics_messagesout_total", topic) == 500
    assert value(out, "kafka_server_brokertopicmetrics_bytesout_total", topic) == bytes_in
    assert value(out, "kafka_network_requestmetrics_requests_total", {"request": "FetchConsumer"}) >= 1


def test_a_request_error_is_counted_by_its_kafka_name(cluster: Cluster) -> None:
    address = cluster.brokers[0].metrics_address
    labels = {"request": "ListOffsets", "error": "UNKNOWN_TOPIC_OR_PARTITION"}
    before = value(scrape(address), "kafka_network_requestmetrics_errors_total", labels, default=0)
    request = broker_pb2.ListOffsetsRequest(replica_id=-1, partitions=[broker_pb2.ListOffsetsPartition(
        topic="no-such-topic", partition=0, timestamp=-1)])  # fmt: skip
    answer = cluster.broker_stub(0).ListOffsets(request, timeout=10)
    assert answer.partitions[0].error.code == "UNKNOWN_TOPIC_OR_PARTITION"
    fetch = broker_pb2.FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20)
    fetch.topics.add(name="no-such-topic").partitions.add(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)
    assert cluster.broker_stub(0).Fetch(fetch, timeout=10).topics[0].partitions[0].error.code
    after = scrape(address)
    assert value(after, "kafka_network_requestmetrics_errors_total", labels) == before + 1
    fetch_errors = {"request": "FetchConsumer", "error": "UNKNOWN_TOPIC_OR_PARTITION"}
    assert value(after, "kafka_network_requestmetrics_errors_total", fetch_errors) >= 1


def test_a_lagging_group_shows_its_lag(cluster: Cluster) -> None:
    cluster.create_topic("lagging", partitions=2, replication_factor=1)
    produce(cluster, "lagging", 300, partition=0)
    produce(cluster, "lagging", 200, partition=1)
    with admin(cluster) as a:
        a.alter_group_offsets("slow-readers", {TopicPartition("lagging", 0): 100, TopicPartition("lagging", 1): 150})

    def lags() -> dict[str, float] | None:
        found: dict[str, float] = {}
        for broker in cluster.brokers:
            for (name, labels), v in scrape(broker.metrics_address).items():
                if name == "kafka_consumergroup_lag" and ("group", "slow-readers") in labels:
                    found[dict(labels)["partition"]] = v
        return found if len(found) == 2 else None

    assert cluster.wait_for(lags, WAIT_S, "the group's lag on its coordinator") == {"0": 200, "1": 50}
    produce(cluster, "lagging", 10, partition=1)
    assert cluster.wait_for(lambda: (found := lags()) and found["1"] == 60 and found, WAIT_S,
                            "the lag to follow the produce") == {"0": 200, "1": 60}  # fmt: skip


def test_a_killed_follower_makes_partitions_under_replicated(cluster: Cluster) -> None:
    cluster.create_topic("guarded", partitions=1, replication_factor=3, configs={"min.insync.replicas": "3"})
    produce(cluster, "guarded", 10)
    leader = leader_index(cluster, "guarded")
    follower = next(i for i in range(3) if i != leader)
    address = cluster.brokers[leader].metrics_address
    key = {"topic": "guarded", "partition": "0"}
    before = scrape(address)
    assert value(before, "kafka_cluster_partition_underreplicated", key) == 0
    shrinks_before = value(before, "kafka_server_replicamanager_isrshrinks_total")
    cluster.kill_broker(follower)
    try:
        produce(cluster, "guarded", 10, acks="1")  # the leader's log end moves on; the dead follower lags (ISR1)
        cluster.wait_for(lambda: value(scrape(address), "kafka_cluster_partition_underreplicated", key) == 1,
                         WAIT_S, "the leader to report guarded-0 under-replicated")  # fmt: skip
        after = scrape(address)
        assert value(after, "kafka_server_replicamanager_underreplicatedpartitions") >= 1
        assert value(after, "kafka_server_replicamanager_underminisrpartitioncount") >= 1
        assert value(after, "kafka_cluster_partition_insyncreplicascount", key) == 2
        assert value(after, "kafka_server_replicamanager_isrshrinks_total") > shrinks_before
        cluster.wait_for(lambda: sum(value(scrape(c.metrics_address), "kafka_controller_kafkacontroller_"
                                           "fencedbrokercount") for c in cluster.controllers) == 1,
                         WAIT_S, "the active controller to count the fenced broker")  # fmt: skip
    finally:
        cluster.start_broker(follower)
    cluster.wait_for(lambda: value(scrape(address), "kafka_cluster_partition_underreplicated", key) == 0,
                     WAIT_S, "guarded-0 back in sync")  # fmt: skip
    assert value(scrape(address), "kafka_server_replicamanager_isrexpands_total") >= 1


def test_a_killed_leader_counts_an_election_on_the_active_controller(cluster: Cluster, tmp_path: Path) -> None:
    cluster.create_topic("elected", partitions=1, replication_factor=3)
    produce(cluster, "elected", 5)

    def elections() -> float:
        return sum(value(scrape(c.metrics_address), "kafka_controller_controllerstats_leaderelections_total")
                   for c in cluster.controllers)  # fmt: skip

    before = elections()
    leader = leader_index(cluster, "elected")
    cluster.kill_broker(leader)
    try:
        cluster.wait_for(lambda: elections() > before, WAIT_S, "a leader election to be counted")
        assert check(cluster.brokers[leader].address, timeout_s=1.0) == UNREACHABLE
    finally:
        cluster.start_broker(leader)


def test_the_dashboard_and_alerts_use_metrics_the_nodes_serve(cluster: Cluster) -> None:
    cluster.create_topic("watched", partitions=1, replication_factor=3)
    produce(cluster, "watched", 5)
    with admin(cluster) as a:
        a.alter_group_offsets("watchers", {TopicPartition("watched", 0): 2})
    unknown = broker_pb2.ListOffsetsRequest(replica_id=-1, partitions=[broker_pb2.ListOffsetsPartition(
        topic="no-such-topic", partition=0, timestamp=-1)])  # fmt: skip
    cluster.broker_stub(0).ListOffsets(unknown, timeout=10)  # an error answered: the errors counter has a sample

    def served() -> set[str] | None:
        names = {name for proc in cluster.controllers + cluster.brokers for name, _ in scrape(proc.metrics_address)}
        return names if "kafka_consumergroup_lag" in names else None

    names: set[str] = cluster.wait_for(served, WAIT_S, "the group's lag in a scrape")
    deploy = Path(__file__).resolve().parents[2] / "deploy"
    dashboard = json.loads((deploy / "grafana" / "odradek-dashboard.json").read_text())
    expressions = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    assert len(expressions) > 30
    expressions += re.findall(r"expr: (.+)", (deploy / "prometheus" / "alerts.yml").read_text())
    used = {m for e in expressions for m in re.findall(r"\b(?:kafka|process)_[a-z0-9_]+", e)}
    missing = sorted(used - names)
    assert not missing, f"the dashboard or the alerts use metrics no node serves: {missing}"


def test_the_kafka_listener_is_counted_too(cluster: Cluster) -> None:
    from confluent_kafka import Consumer as KafkaConsumer
    from confluent_kafka import Producer as KafkaProducer
    from confluent_kafka import TopicPartition as KafkaTopicPartition

    from tests.kafka.helpers import consume

    cluster.create_topic("spoken", partitions=1, replication_factor=3)
    leader = cluster.brokers[leader_index(cluster, "spoken")]
    producer = KafkaProducer({"bootstrap.servers": cluster.kafka_bootstrap_servers})
    for i in range(50):
        producer.produce("spoken", value=b"kafka-%03d" % i, partition=0)
    assert producer.flush(30) == 0
    consumer = KafkaConsumer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "group.id": "spoken-readers",
                              "enable.auto.commit": False})  # fmt: skip
    try:
        consumer.assign([KafkaTopicPartition("spoken", 0, 0)])
        assert len(consume(consumer, 50)) == 50
    finally:
        consumer.close()
    samples = scrape(leader.metrics_address)
    topic = {"topic": "spoken"}
    assert value(samples, "kafka_server_brokertopicmetrics_messagesin_total", topic) == 50
    assert value(samples, "kafka_server_brokertopicmetrics_bytesout_total", topic) == value(
        samples, "kafka_server_brokertopicmetrics_bytesin_total", topic)  # fmt: skip
    requests = total(samples, "kafka_network_requestmetrics_requests_total", request="ApiVersions")
    assert requests >= 1  # only Kafka's clients ask ApiVersions
