"""The metrics' pieces without processes: request names, error paths, record counts, topic series, the latency
histogram, election counting, the flush observer, the health reporter and the HTTP endpoint."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from types import SimpleNamespace

import grpc
import pytest
from prometheus_client import CollectorRegistry

from broker.handlers import consumer_group_heartbeat, fetch, forward, init_producer_id, list_offsets, produce
from broker.metrics.requests import ErrorReader, RequestMetrics, TopicMetrics, count_records, request_name
from common.clock import ManualClock
from controller.health import HealthReporter
from controller.metrics.endpoint import MetricsEndpoint, new_registry, split_address
from controller.metrics.stats import ControllerStats, LatencyHistogram, count_elections
from log.config import LogConfig
from log.flush_stats import set_flush_observer
from log.log import Log
from log.record import build_batch
from metadata.image import MetadataDelta, MetadataImage
from metadata.records import Partition, PartitionChange, Topic
from odradek.health import SERVING, UNREACHABLE, check
from proto import broker_pb2 as pb
from proto import controller_pb2 as cpb
from tests.metrics.scrape import scrape, value

TOPIC_ID = "3f2a6c1e-0000-4000-8000-000000000001"


def test_request_names_are_kafkas() -> None:
    assert request_name(produce.handle) == "Produce"
    assert request_name(list_offsets.handle) == "ListOffsets"
    assert request_name(init_producer_id.handle) == "InitProducerId"
    assert request_name(consumer_group_heartbeat.handle) == "ConsumerGroupHeartbeat"
    assert request_name(forward.create_topics) == "CreateTopics"
    assert request_name(forward.alter_configs) == "AlterConfigs"


def test_error_codes_are_found_at_every_level() -> None:
    response = pb.ProduceResponse()
    topic = response.topics.add(name="t")
    topic.partitions.add(partition=0).error.code = "NOT_LEADER_OR_FOLLOWER"
    topic.partitions.add(partition=1)
    topic.partitions.add(partition=2).error.code = "NOT_LEADER_OR_FOLLOWER"
    assert list(ErrorReader(pb.ProduceResponse.DESCRIPTOR)(response)) == ["NOT_LEADER_OR_FOLLOWER"] * 2
    created = cpb.CreateTopicsResponse()
    created.error.code = "NOT_CONTROLLER"
    created.topics.add(name="a").error.code = "TOPIC_ALREADY_EXISTS"
    assert sorted(ErrorReader(cpb.CreateTopicsResponse.DESCRIPTOR)(created)) == ["NOT_CONTROLLER",
                                                                                 "TOPIC_ALREADY_EXISTS"]  # fmt: skip
    assert list(ErrorReader(pb.DescribeClusterResponse.DESCRIPTOR)(pb.DescribeClusterResponse())) == []


def test_request_metrics_count_time_and_errors_and_split_fetches() -> None:
    registry = CollectorRegistry()
    metrics = RequestMetrics(registry)
    started = time.perf_counter()
    answer = pb.FetchResponse()
    answer.topics.add(name="t").partitions.add(partition=0).error.code = "OFFSET_OUT_OF_RANGE"
    metrics.record(fetch.handle, SimpleNamespace(replica_id=-1), answer, started)
    metrics.record(fetch.handle, SimpleNamespace(replica_id=2), pb.FetchResponse(), started)
    metrics.record(fetch.handle, SimpleNamespace(replica_id=2), pb.FetchResponse(), started)
    metrics.record_failure(produce.handle, SimpleNamespace(), started)

    def sample(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    assert sample("kafka_network_requestmetrics_requests_total", request="FetchConsumer") == 1
    assert sample("kafka_network_requestmetrics_requests_total", request="FetchFollower") == 2
    assert sample("kafka_network_requestmetrics_totaltimems_count", request="FetchFollower") == 2
    assert sample("kafka_network_requestmetrics_errors_total", request="FetchConsumer",
                  error="OFFSET_OUT_OF_RANGE") == 1  # fmt: skip
    assert sample("kafka_network_requestmetrics_errors_total", request="Produce", error="UNKNOWN_SERVER_ERROR") == 1


def test_records_are_counted_from_the_batch_headers() -> None:
    batches = b"".join(build_batch([b"x"] * n, timestamp_ms=1, base_offset=o) for n, o in ((3, 0), (1, 3), (7, 4)))
    assert count_records(batches) == 11
    assert count_records(b"") == 0


def test_a_deleted_topic_loses_its_series() -> None:
    registry = CollectorRegistry()
    topics = TopicMetrics(registry)
    topics.produced("kept", 100, 2)
    topics.bytes_sent("gone", 70, for_replica=False)
    topics.records_out("gone", build_batch([b"a", b"b"], timestamp_ms=1))
    assert registry.get_sample_value("kafka_server_brokertopicmetrics_messagesout_total", {"topic": "gone"}) == 2
    topics.forget_except(["kept"])
    assert registry.get_sample_value("kafka_server_brokertopicmetrics_bytesout_total", {"topic": "gone"}) is None
    assert registry.get_sample_value("kafka_server_brokertopicmetrics_bytesin_total", {"topic": "kept"}) == 100


def test_latency_histogram_buckets_are_cumulative() -> None:
    histogram = LatencyHistogram((1, 10))
    for v in (0.5, 1, 3, 50):
        histogram.observe(v)
    assert histogram.cumulative() == [("1", 2), ("10", 3), ("+Inf", 4)]
    assert (histogram.count, histogram.sum_ms) == (4, 54.5)


def image_with_partition(leader: int, isr: tuple[int, ...]) -> MetadataImage:
    delta = MetadataDelta(MetadataImage())
    delta.replay(Topic("t", TOPIC_ID), 0)
    delta.replay(Partition(TOPIC_ID, 0, (0, 1, 2), isr, leader, 0, 0), 1)
    return delta.apply()


def test_elections_are_counted_and_unclean_ones_told_apart() -> None:
    stats = ControllerStats()
    image = image_with_partition(leader=0, isr=(0, 1))
    count_elections(stats, image, [PartitionChange(TOPIC_ID, 0, isr=(0,))])  # no new leader
    count_elections(stats, image, [PartitionChange(TOPIC_ID, 0, leader=0)])  # the same leader
    assert (stats.leader_elections, stats.unclean_leader_elections) == (0, 0)
    count_elections(stats, image, [PartitionChange(TOPIC_ID, 0, isr=(1,), leader=1)])
    assert (stats.leader_elections, stats.unclean_leader_elections) == (1, 0)
    count_elections(stats, image, [PartitionChange(TOPIC_ID, 0, isr=(2,), leader=2)])  # 2 was not in the ISR
    count_elections(stats, image, [PartitionChange(TOPIC_ID, 0, leader=-1)])  # offline: no election
    assert (stats.leader_elections, stats.unclean_leader_elections) == (2, 1)


def test_a_log_flush_is_reported(tmp_path: Path) -> None:
    seen: list[tuple[str, float]] = []
    set_flush_observer(lambda name, ms: seen.append((name, ms)))
    try:
        log = Log.open(tmp_path / "orders-3", LogConfig(), ManualClock())
        log.append(build_batch([b"v"], timestamp_ms=1))
        log.flush()
        log.flush()  # nothing new: no fsync, no report
        log.close()
    finally:
        set_flush_observer(None)
    assert seen[0] == ("orders-3", 0.0)  # the manual clock does not move
    assert len(seen) == 1


@pytest.fixture
def health_server() -> Iterator[tuple[str, HealthReporter, list[bool]]]:
    ready = [False]
    reporter = HealthReporter("odradek.test.Service", lambda: ready[0], interval_s=0.02)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    reporter.add_to(server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    reporter.start()
    try:
        yield f"127.0.0.1:{port}", reporter, ready
    finally:
        reporter.shutdown()
        server.stop(0).wait(5)


def wait_status(address: str, service: str, wanted: str) -> None:
    deadline = time.monotonic() + 10
    while (status := check(address, service, 2.0)) != wanted:
        assert time.monotonic() < deadline, f"{service!r} stayed {status}, not {wanted}"
        time.sleep(0.02)


def test_health_follows_readiness_and_ends_not_serving(health_server: tuple[str, HealthReporter, list[bool]]) -> None:
    address, reporter, ready = health_server
    assert check(address) == "NOT_SERVING"
    ready[0] = True
    wait_status(address, "", SERVING)
    wait_status(address, "odradek.test.Service", SERVING)
    assert check(address, "no.such.Service") == "SERVICE_UNKNOWN"
    ready[0] = False
    wait_status(address, "", "NOT_SERVING")
    ready[0] = True
    wait_status(address, "", SERVING)
    reporter.shutdown()
    assert check(address) == "NOT_SERVING"
    assert check(address, "odradek.test.Service") == "NOT_SERVING"


def test_a_failing_readiness_probe_means_not_serving(health_server: tuple[str, HealthReporter, list[bool]]) -> None:
    address, reporter, ready = health_server
    ready[0] = True
    wait_status(address, "", SERVING)
    ready.clear()  # the probe now raises IndexError
    wait_status(address, "", "NOT_SERVING")


def test_nothing_listening_is_unreachable() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    assert check(f"127.0.0.1:{port}", timeout_s=0.5) == UNREACHABLE


def test_the_endpoint_serves_the_registry_and_stops() -> None:
    registry = new_registry()
    endpoint = MetricsEndpoint("127.0.0.1:0", registry)
    endpoint.start()
    try:
        assert endpoint.port > 0
        samples = scrape(endpoint.address)
        assert value(samples, "process_open_fds") > 0
        assert not any(name.endswith("_created") for name, _ in samples)
        busy = MetricsEndpoint(endpoint.address, registry)
        with pytest.raises(RuntimeError, match="cannot serve metrics"):
            busy.start()
    finally:
        endpoint.stop()
    endpoint.stop()  # twice is fine
    with pytest.raises(OSError):  # noqa: PT011 (connection refused, or reset: the server is gone)
        scrape(endpoint.address, timeout_s=2)


@pytest.mark.parametrize("address", ["nope", "host:", ":80", "h:99999"])
def test_bad_metrics_addresses_are_refused(address: str) -> None:
    with pytest.raises(ValueError, match="HOST:PORT"):
        split_address(address)
