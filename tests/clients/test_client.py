"""The shared network core: bootstrap, metadata refresh policy, calls to brokers."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from common.clock import ManualClock
from odradek.errors import KafkaTimeoutError, NetworkError
from odradek.net import ClusterClient
from odradek.types import TopicPartition
from proto import broker_pb2
from tests.clients.fake_broker import FakeCluster


def client(cluster: FakeCluster, clock: ManualClock | None = None, **kwargs: int) -> ClusterClient:
    return ClusterClient(bootstrap_servers=cluster.bootstrap.split(","), clock=clock or ManualClock(), **kwargs)


def test_refresh_reads_brokers_and_the_topics_of_interest(make_cluster: Callable[..., FakeCluster]) -> None:
    cluster = make_cluster((1, 2))
    cluster.create_topic("t", 2)
    cluster.create_topic("other", 1)
    c = client(cluster)
    try:
        c.add_topics(["t"])
        snapshot = c.refresh()
        assert set(snapshot.brokers) == {1, 2}
        assert set(snapshot.topics) == {"t"}
        assert snapshot.leader(TopicPartition("t", 1)) == 2
        assert snapshot.cluster_id == "fake-cluster"
        assert cluster.calls_of("Metadata")[-1].topics == ["t"]
    finally:
        c.close()


def test_refresh_policy_follows_requests_backoff_and_max_age(cluster: FakeCluster) -> None:
    clock = ManualClock()
    c = client(cluster, clock, retry_backoff_ms=100, metadata_max_age_ms=10_000)
    try:
        assert c.metadata_due_in_ms(clock.monotonic_ms()) == 0  # never fetched
        assert c.maybe_refresh()
        calls = len(cluster.calls_of("Metadata"))
        assert c.metadata_due_in_ms(clock.monotonic_ms()) == pytest.approx(10_000)
        c.request_update()
        assert c.metadata_due_in_ms(clock.monotonic_ms()) == pytest.approx(100)  # spaced by retry.backoff.ms
        assert not c.maybe_refresh()
        clock.advance(100)
        assert c.maybe_refresh()
        clock.advance(9_999)
        assert not c.maybe_refresh()
        clock.advance(1)
        assert c.maybe_refresh()  # metadata.max.age.ms
        assert len(cluster.calls_of("Metadata")) == calls + 2
    finally:
        c.close()


def test_failed_refreshes_back_off_exponentially(cluster: FakeCluster) -> None:
    clock = ManualClock()
    c = ClusterClient(bootstrap_servers=["127.0.0.1:1"], clock=clock, retry_backoff_ms=100, retry_backoff_max_ms=1000)
    try:
        with pytest.raises(NetworkError, match="no broker answered Metadata"):
            c.refresh()
        first = c.metadata_due_in_ms(clock.monotonic_ms())
        assert 80 <= first <= 120
        assert not c.maybe_refresh()
        clock.advance(first)
        assert not c.maybe_refresh()  # fails again
        assert 160 <= c.metadata_due_in_ms(clock.monotonic_ms()) <= 240
    finally:
        c.close()


def test_new_topic_of_interest_requests_an_update(cluster: FakeCluster) -> None:
    clock = ManualClock()
    c = client(cluster, clock)
    try:
        c.refresh()
        clock.advance(1000)
        assert c.metadata_due_in_ms(clock.monotonic_ms()) > 0
        c.add_topics(["new"])
        assert c.metadata_due_in_ms(clock.monotonic_ms()) == 0
    finally:
        c.close()


def test_wait_for_topic_times_out_naming_the_topic(cluster: FakeCluster) -> None:
    c = ClusterClient(bootstrap_servers=cluster.bootstrap.split(","), retry_backoff_ms=10)
    try:
        with pytest.raises(KafkaTimeoutError, match=r"topic 'x' not present in metadata after 100 ms \(last error"):
            c.wait_for_topic("x", 100)
        cluster.create_topic("x", 3)
        assert len(c.wait_for_topic("x", 1000).partitions) == 3
    finally:
        c.close()


def test_call_any_moves_past_dead_brokers(cluster: FakeCluster) -> None:
    c = ClusterClient(bootstrap_servers=["127.0.0.1:1", *cluster.bootstrap.split(",")])
    try:
        response = c.call_any("DescribeCluster", broker_pb2.DescribeClusterRequest())
        assert response.cluster_id == "fake-cluster"
    finally:
        c.close()


def test_call_node_unknown_to_the_metadata(cluster: FakeCluster) -> None:
    c = client(cluster)
    try:
        c.refresh()
        with pytest.raises(NetworkError, match="broker 42 is not in the cluster metadata"):
            c.call_node(42, "DescribeCluster", broker_pb2.DescribeClusterRequest())
    finally:
        c.close()
