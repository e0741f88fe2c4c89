"""The shared network core: bootstrap, metadata refresh policy, calls to brokers."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from common.clock import ManualClock
from odradek.errors import KafkaTimeoutError, NetworkError
from odradek.net import ClusterClient
from odradek.net.metadata import Cluster
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


def _answer(epochs: dict[int, tuple[int, int]], topic_id: str = "id-1") -> broker_pb2.MetadataResponse:
    """A MetadataResponse of brokers 1-3 and topic ``t`` whose partitions have these (leader, leader epoch)."""
    response = broker_pb2.MetadataResponse(cluster_id="c")
    for node in (1, 2, 3):
        response.brokers.add(node_id=node, host="127.0.0.1", port=9000 + node)
    topic = response.topics.add(name="t", topic_id=topic_id)
    for partition, (leader, epoch) in epochs.items():
        topic.partitions.add(partition=partition, leader=leader, leader_epoch=epoch, replicas=[1, 2, 3], isr=[1, 2, 3])
    return response


def _epoch(cluster: Cluster, tp: TopicPartition) -> int:
    info = cluster.partition(tp)
    assert info is not None
    return info.leader_epoch


def test_an_answer_from_an_older_leader_epoch_keeps_the_partition_as_it_was() -> None:
    """KIP-320: a broker cut off from the controllers answers from its old image; its leaders must not replace
    newer ones, partition by partition, while the partitions it knows as well as the last answer still update."""
    first = Cluster.from_response(_answer({0: (2, 7), 1: (3, 4)}), 1.0)
    assert first.stale == frozenset()
    behind = Cluster.from_response(_answer({0: (1, 5), 1: (1, 5)}), 2.0, first)
    assert behind.leader(TopicPartition("t", 0)) == 2  # epoch 5 < 7: kept
    assert _epoch(behind, TopicPartition("t", 0)) == 7
    assert behind.leader(TopicPartition("t", 1)) == 1  # epoch 5 > 4: taken
    assert behind.stale == frozenset({TopicPartition("t", 0)})
    assert behind.topics["t"].available == (0, 1)
    same = Cluster.from_response(_answer({0: (2, 7), 1: (1, 5)}), 3.0, behind)
    assert same.stale == frozenset()
    assert same.leader(TopicPartition("t", 0)) == 2
    recreated = Cluster.from_response(_answer({0: (3, 0), 1: (3, 0)}, topic_id="id-2"), 4.0, same)
    assert recreated.leader(TopicPartition("t", 0)) == 3  # another topic under the same name: taken whole
    assert recreated.stale == frozenset()


def test_a_refresh_from_a_broker_behind_asks_again(cluster: FakeCluster) -> None:
    clock = ManualClock()
    c = client(cluster, clock, retry_backoff_ms=100, metadata_max_age_ms=10_000)
    tp = TopicPartition("t", 0)
    try:
        cluster.create_topic("t", 1)
        cluster.set_leader(tp, 1)
        cluster.set_leader(tp, 1)
        c.add_topics(["t"])
        assert _epoch(c.refresh(), tp) == 2
        with cluster.lock:
            cluster.partition(tp).leader_epoch = 1  # the next answer comes from a broker behind
        snapshot = c.refresh()
        assert _epoch(snapshot, tp) == 2
        assert snapshot.stale == frozenset({tp})
        assert c.metadata_due_in_ms(clock.monotonic_ms()) == pytest.approx(100)  # asked again, spaced
        with cluster.lock:
            cluster.partition(tp).leader_epoch = 3
        clock.advance(100)
        assert c.maybe_refresh()
        assert _epoch(c.cluster, tp) == 3
        assert c.cluster.stale == frozenset()
        assert c.metadata_due_in_ms(clock.monotonic_ms()) == pytest.approx(10_000)
    finally:
        c.close()
