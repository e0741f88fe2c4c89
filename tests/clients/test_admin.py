"""The Admin client against an in-process fake cluster over real gRPC."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import pytest

from odradek import Admin, NewTopic, TopicPartition
from odradek.errors import (
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    KafkaTimeoutError,
    NetworkError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
)
from odradek.types import (
    BrokerDescription,
    ClusterDescription,
    ConfigEntry,
    ConfigResource,
    NodeDescription,
    PartitionDescription,
    TopicDescription,
    TopicResult,
)
from tests.clients.fake_broker import FakeCluster
from tests.clients.test_consumer import fill


def admin(cluster: FakeCluster, **config: object) -> Admin:
    return Admin({"bootstrap.servers": cluster.bootstrap, "retry.backoff.ms": 5, **config})


def test_create_list_describe_delete(make_cluster: Callable[..., FakeCluster]) -> None:
    cluster = make_cluster((1, 2))
    with admin(cluster) as a:
        created = a.create_topics(
            [NewTopic("orders", 3, 2, config={"min.insync.replicas": "2"}), NewTopic("audit", 1, 1)]
        )
        assert created["orders"] == TopicResult("orders", "id-orders", 3, 1)
        assert a.list_topics() == ["audit", "orders"]
        described = a.describe_topics(["orders"])
        assert list(described) == ["orders"]
        orders = described["orders"]
        assert isinstance(orders, TopicDescription)
        assert orders.partitions[0] == PartitionDescription(0, 1, [1, 2], [1, 2], 0, [])
        assert [p.leader for p in orders.partitions] == [1, 2, 1]
        assert cluster.topic_configs["orders"] == {"min.insync.replicas": "2"}
        a.delete_topics(["audit"])
        assert a.list_topics() == ["orders"]
        assert list(a.describe_topics()) == ["orders"]


def test_create_topic_errors_are_typed(make_cluster: Callable[..., FakeCluster]) -> None:
    cluster = make_cluster((1,))
    cluster.create_topic("orders")
    with admin(cluster) as a:
        with pytest.raises(TopicAlreadyExistsError, match="could not create topic 'orders': topic orders exists"):
            a.create_topics([NewTopic("orders", 1, 1)])
        with pytest.raises(InvalidReplicationFactorError):
            a.create_topics([NewTopic("wide", 1, 3)])
        with pytest.raises(
            TopicAlreadyExistsError, match="could not create 2 topics: 'orders'.*'bad'.*INVALID_PARTITIONS"
        ):
            a.create_topics([NewTopic("orders", 1, 1), NewTopic("bad", 0, 1), NewTopic("fine", 1, 1)])
        assert "fine" in a.list_topics()  # the others of the call went through
        with pytest.raises(TypeError, match="NewTopic"):
            a.create_topics(["x"])  # type: ignore[list-item]
        with pytest.raises(TypeError, match="list of topic names"):
            a.delete_topics("orders")


def test_validate_only_creates_nothing(cluster: FakeCluster) -> None:
    with admin(cluster) as a:
        assert a.create_topics([NewTopic("x", 2, 1)], validate_only=True)["x"].num_partitions == 2
        assert a.list_topics() == []


def test_not_controller_is_retried(cluster: FakeCluster) -> None:
    cluster.admin_errors["CreateTopics"] = deque(["NOT_CONTROLLER", "NOT_CONTROLLER"])
    with admin(cluster) as a:
        a.create_topics([NewTopic("orders", 1, 1)])
        assert a.list_topics() == ["orders"]
    assert len(cluster.calls_of("CreateTopics")) == 3


def test_not_controller_until_the_timeout(cluster: FakeCluster) -> None:
    cluster.admin_errors["CreateTopics"] = deque(["NOT_CONTROLLER"] * 1000)
    with admin(cluster) as a, pytest.raises(KafkaTimeoutError, match="CreateTopics did not succeed within 200 ms"):
        a.create_topics([NewTopic("orders", 1, 1)], timeout_ms=200)


def test_other_top_level_errors_raise_at_once(cluster: FakeCluster) -> None:
    cluster.admin_errors["CreateTopics"] = deque(["INVALID_REQUEST"])
    with admin(cluster) as a, pytest.raises(Exception, match="CreateTopics"):
        a.create_topics([NewTopic("orders", 1, 1)])
    assert len(cluster.calls_of("CreateTopics")) == 1


def test_delete_unknown_topic(cluster: FakeCluster) -> None:
    with admin(cluster) as a, pytest.raises(UnknownTopicOrPartitionError, match="could not delete topic 'nope'"):
        a.delete_topics(["nope"])


def test_describe_unknown_topic(cluster: FakeCluster) -> None:
    cluster.create_topic("orders")
    with admin(cluster) as a, pytest.raises(UnknownTopicOrPartitionError, match="nope"):
        a.describe_topics(["orders", "nope"])


def test_internal_topics_are_hidden_unless_asked(cluster: FakeCluster) -> None:
    cluster.create_topic("orders")
    cluster.create_topic("__consumer_offsets")
    cluster.internal_topics.add("__consumer_offsets")
    with admin(cluster) as a:
        assert a.list_topics() == ["orders"]
        assert a.list_topics(include_internal=True) == ["__consumer_offsets", "orders"]
        assert a.describe_topics()["__consumer_offsets"].is_internal


def test_describe_cluster(make_cluster: Callable[..., FakeCluster]) -> None:
    cluster = make_cluster((2, 1))
    cluster.fenced.add(2)
    with admin(cluster) as a:
        described = a.describe_cluster()
    assert described == ClusterDescription(
        cluster_id="fake-cluster",
        controller_id=100,
        controllers=[NodeDescription(100, "127.0.0.1:1")],
        brokers=[
            BrokerDescription(1, f"127.0.0.1:{cluster.ports[1]}", False),
            BrokerDescription(2, f"127.0.0.1:{cluster.ports[2]}", True),
        ],
    )


def test_list_offsets(cluster: FakeCluster) -> None:
    t0, t1 = TopicPartition("t", 0), TopicPartition("t", 1)
    cluster.create_topic("t", 2)
    fill(cluster, t0, 10, start_ms=1_000)
    cluster.truncate_front(t0, 5)
    with admin(cluster) as a:
        assert a.list_offsets({t0: "earliest", t1: "earliest"}) == {t0: 5, t1: 0}
        assert a.list_offsets({t0: "latest"}) == {t0: 10}
        assert a.list_offsets({t0: 1_007, t1: 1_007}) == {t0: 7, t1: -1}
        with pytest.raises(ValueError, match="offset spec"):
            a.list_offsets({t0: "soon"})
        with pytest.raises(UnknownTopicOrPartitionError, match="topic 'nope' does not exist"):
            a.list_offsets({TopicPartition("nope", 0): "latest"})
        with pytest.raises(UnknownTopicOrPartitionError, match="t-5 does not exist"):
            a.list_offsets({TopicPartition("t", 5): "latest"})


def test_list_offsets_follows_a_moved_leader(make_cluster: Callable[..., FakeCluster]) -> None:
    cluster = make_cluster((1, 2))
    tp = TopicPartition("t", 0)
    cluster.create_topic("t", 1, leaders=[1])
    fill(cluster, tp, 3)
    with admin(cluster) as a:
        assert a.list_offsets({tp: "latest"}) == {tp: 3}
        cluster.set_leader(tp, 2)
        assert a.list_offsets({tp: "latest"}) == {tp: 3}


def test_create_partitions(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 2)
    with admin(cluster) as a:
        a.create_partitions({"t": 5})
        assert len(a.describe_topics(["t"])["t"].partitions) == 5
        with pytest.raises(InvalidPartitionsError, match="cannot shrink"):
            a.create_partitions({"t": 3})


def test_configs(cluster: FakeCluster) -> None:
    cluster.create_topic("t")
    resource = ConfigResource("topic", "t")
    with admin(cluster) as a:
        a.alter_configs({resource: {"retention.ms": "1000", "cleanup.policy": "compact"}})
        described = a.describe_configs([resource])
        assert described[resource]["retention.ms"] == ConfigEntry("retention.ms", "1000", "DYNAMIC_TOPIC_CONFIG")
        a.alter_configs({("topic", "t"): {"retention.ms": None}})
        assert set(a.describe_configs([("topic", "t")])[resource]) == {"cleanup.policy"}
        assert set(a.describe_configs([resource], keys=["nothing"])[resource]) == set()
        with pytest.raises(UnknownTopicOrPartitionError):
            a.describe_configs([("topic", "nope")])
        with pytest.raises(UnknownTopicOrPartitionError):
            a.alter_configs({("topic", "nope"): {"a": "b"}})


def test_group_calls_need_a_coordinator(cluster: FakeCluster) -> None:
    with admin(cluster) as a, pytest.raises(UnsupportedVersionError):  # groups: tests/clients/test_group_admin.py
        a.describe_group("billing")


def test_bootstrap_tries_each_server(cluster: FakeCluster) -> None:
    cluster.create_topic("orders")
    dead = "127.0.0.1:1"
    with Admin({"bootstrap.servers": f"{dead},{cluster.bootstrap}"}) as a:
        assert a.list_topics() == ["orders"]


def test_no_reachable_broker_is_a_network_error() -> None:
    config = {"bootstrap.servers": "127.0.0.1:1", "request.timeout.ms": 500}
    with Admin(config) as a, pytest.raises(NetworkError, match="no broker answered Metadata"):
        a.list_topics()
