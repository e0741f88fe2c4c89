"""CreateTopics, DeleteTopics, CreatePartitions and replica placement of the pure core.

Each test names the rule it checks: T* from controller/core/topics.py, P* from controller/core/placement.py
(Kafka's ReplicationControlManager and AdminUtils.assignReplicasToBrokersRackUnaware).
"""

from __future__ import annotations

import collections
import random

import pytest

from controller.core.placement import assign_replicas
from controller.core.topics import Refused, check_dir_name
from metadata.records import Config, ConfigResourceType, Partition, RemoveTopic, Topic
from proto import controller_pb2 as pb
from tests.controller.conftest import CoreHarness, make_harness


@pytest.fixture
def three(harness: CoreHarness) -> CoreHarness:
    harness.start_brokers([0, 1, 2])
    return harness


# --- names ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["", ".", "..", "a" * 250, "a b", "tøpic", "a/b", "a:b", "a*"])
def test_illegal_topic_names_are_refused(three: CoreHarness, name: str) -> None:
    """T1: Kafka's Topic.validate."""
    result = three.create_topic(name)
    assert result.error.code == "INVALID_TOPIC_EXCEPTION"
    assert three.image.topics_by_name == {}


@pytest.mark.parametrize("name", ["a", "A-b_c.9", "a" * 249, "..a", "_"])
def test_legal_topic_names_are_accepted(three: CoreHarness, name: str) -> None:
    """T1: [a-zA-Z0-9._-]{1,249}, not "." or ".."."""
    assert not three.create_topic(name).error.code
    assert three.image.topic(name) is not None


def test_existing_topic_is_topic_already_exists(three: CoreHarness) -> None:
    """T2."""
    three.create_topic("t")
    assert three.create_topic("t").error.code == "TOPIC_ALREADY_EXISTS"


def test_names_colliding_on_dot_and_underscore_are_refused(three: CoreHarness) -> None:
    """T2: "a.b" and "a_b" collide (Kafka's metric names would)."""
    three.create_topic("a.b")
    result = three.create_topic("a_b")
    assert result.error.code == "INVALID_TOPIC_EXCEPTION"
    assert "collides" in result.error.message


def test_a_name_twice_in_one_request_is_invalid_request_for_both(three: CoreHarness) -> None:
    """T1: duplicates in one request."""
    request = pb.CreateTopicsRequest(
        topics=[pb.TopicToCreate(name=n, num_partitions=1, replication_factor=1) for n in ("x", "x", "y")]
    )
    response = three.call("CreateTopics", request)
    assert [t.error.code for t in response.topics] == ["INVALID_REQUEST", "INVALID_REQUEST", ""]
    assert set(three.image.topics_by_name) == {"y"}


# --- configs ---------------------------------------------------------------------------------------


def test_unknown_topic_config_key_is_invalid_config_naming_the_key(three: CoreHarness) -> None:
    """T3."""
    result = three.create_topic("t", configs={"retention.ms": "1", "no.such.key": "1"})
    assert result.error.code == "INVALID_CONFIG"
    assert "no.such.key" in result.error.message
    assert three.image.topic("t") is None


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("retention.ms", "-2"),
        ("retention.ms", "soon"),
        ("segment.bytes", "13"),
        ("cleanup.policy", "delete,shred"),
        ("min.insync.replicas", "0"),
        ("unclean.leader.election.enable", "yes"),
        ("min.cleanable.dirty.ratio", "1.5"),
        ("compression.type", "brotli"),
    ],
)
def test_bad_topic_config_value_is_invalid_config_naming_the_key(three: CoreHarness, key: str, value: str) -> None:
    """T3: values are checked against Kafka's types and ranges."""
    result = three.create_topic("t", configs={key: value})
    assert result.error.code == "INVALID_CONFIG"
    assert key in result.error.message


def test_topic_configs_are_written_with_the_topic(three: CoreHarness) -> None:
    """T3, T6."""
    three.create_topic("t", configs={"cleanup.policy": "compact", "retention.ms": "100"})
    assert three.image.config(ConfigResourceType.TOPIC, "t") == {"cleanup.policy": "compact", "retention.ms": "100"}


# --- partitions and replication factor -------------------------------------------------------------


@pytest.mark.parametrize("partitions", [0, -2])
def test_non_positive_partition_count_is_invalid_partitions(three: CoreHarness, partitions: int) -> None:
    """T4."""
    assert three.create_topic("t", partitions=partitions).error.code == "INVALID_PARTITIONS"


@pytest.mark.parametrize("rf", [0, -2, 2**15])
def test_bad_replication_factor_is_invalid_replication_factor(three: CoreHarness, rf: int) -> None:
    """T4."""
    assert three.create_topic("t", rf=rf).error.code == "INVALID_REPLICATION_FACTOR"


def test_replication_factor_above_the_unfenced_brokers_is_refused(three: CoreHarness) -> None:
    """T4: only unfenced brokers count."""
    three.register(3)  # registered but fenced
    result = three.create_topic("t", rf=4)
    assert result.error.code == "INVALID_REPLICATION_FACTOR"
    assert "3 broker(s)" in result.error.message
    three.heartbeat(2, want_shut_down=True)  # leads nothing: shut down and fenced at once
    assert three.create_topic("t", rf=3).error.code == "INVALID_REPLICATION_FACTOR"
    assert not three.create_topic("t", rf=2).error.code


def test_minus_one_takes_the_static_defaults() -> None:
    """T4: num.partitions and default.replication.factor."""
    h = make_harness({"num.partitions": "5", "default.replication.factor": "2"})
    h.start_brokers([0, 1, 2])
    result = h.create_topic("t", partitions=-1, rf=-1)
    assert (result.num_partitions, result.replication_factor) == (5, 2)
    topic = h.image.topic("t")
    assert topic is not None
    assert len(topic.partitions) == 5
    assert all(len(reg.replicas) == 2 for reg in topic.partitions.values())


def test_cluster_config_overrides_the_static_defaults(three: CoreHarness) -> None:
    """T4: the dynamic cluster config comes before the static one."""
    request = pb.AlterConfigsRequest()
    res = request.resources.add(resource_type="cluster", resource_name="")
    res.entries.add(key="num.partitions", value="4")
    res.entries.add(key="default.replication.factor", value="3")
    three.call("AlterConfigs", request)
    result = three.create_topic("t", partitions=-1, rf=-1)
    assert (result.num_partitions, result.replication_factor) == (4, 3)


def test_new_partitions_have_all_replicas_in_sync_and_the_first_leading(three: CoreHarness) -> None:
    """T4, P1: ISR = replicas, leader = the first replica, epochs 0."""
    three.create_topic("t", 6, 3)
    for _, reg in three.image.all_partitions():
        assert reg.isr == reg.replicas
        assert reg.leader == reg.replicas[0]
        assert (reg.leader_epoch, reg.partition_epoch) == (0, 0)


# --- explicit assignments ------------------------------------------------------------------------------


def test_explicit_assignment_is_used_as_given(three: CoreHarness) -> None:
    """T5."""
    result = three.create_topic("t", partitions=-1, rf=-1, assignments=[[2, 0], [1, 2]])
    assert (result.num_partitions, result.replication_factor) == (2, 2)
    assert [three.partition("t", p).replicas for p in (0, 1)] == [(2, 0), (1, 2)]


@pytest.mark.parametrize(
    ("assignments", "fragment"),
    [
        ([[]], "empty"),
        ([[0, 0]], "twice"),
        ([[0, 7]], "unregistered"),
        ([[0, 1], [2]], "replica(s)"),
    ],
)
def test_bad_explicit_assignment_is_invalid_replica_assignment(
    three: CoreHarness, assignments: list[list[int]], fragment: str
) -> None:
    """T5."""
    result = three.create_topic("t", partitions=-1, rf=-1, assignments=assignments)
    assert result.error.code == "INVALID_REPLICA_ASSIGNMENT"
    assert fragment in result.error.message


def test_explicit_assignment_of_only_fenced_brokers_is_refused(three: CoreHarness) -> None:
    """T5: a partition needs an eligible replica; fenced replicas are kept out of the ISR."""
    three.register(5)
    result = three.create_topic("t", partitions=-1, rf=-1, assignments=[[5]])
    assert result.error.code == "INVALID_REPLICA_ASSIGNMENT"
    assert not three.create_topic("u", partitions=-1, rf=-1, assignments=[[5, 1]]).error.code
    reg = three.partition("u")
    assert (reg.replicas, reg.isr, reg.leader) == ((5, 1), (1,), 1)


def test_explicit_assignment_with_a_conflicting_count_is_invalid_request(three: CoreHarness) -> None:
    """T5: num_partitions and replication_factor are -1 (or match)."""
    assert three.create_topic("t", partitions=3, rf=-1, assignments=[[0]]).error.code == "INVALID_REQUEST"
    assert three.create_topic("t", partitions=-1, rf=2, assignments=[[0]]).error.code == "INVALID_REQUEST"
    assert not three.create_topic("t", partitions=1, rf=1, assignments=[[0]]).error.code


# --- commands, validate_only ---------------------------------------------------------------------------


def test_validate_only_checks_everything_and_writes_nothing(three: CoreHarness) -> None:
    """T6."""
    offset = three.image.offset
    ok = three.create_topic("t", 3, 2, validate_only=True)
    bad = three.create_topic("u", 3, 7, validate_only=True)
    assert (ok.error.code, ok.num_partitions, ok.replication_factor) == ("", 3, 2)
    assert bad.error.code == "INVALID_REPLICATION_FACTOR"
    assert three.image.offset == offset
    assert three.image.topics_by_name == {}


def test_a_topic_is_one_command_and_topics_are_packed_without_splitting_one() -> None:
    """T6: commands hold at most controller.max.records.per.command records; no topic spans two."""
    h = make_harness({"controller.max.records.per.command": "16"})
    h.start_brokers([0, 1])
    topics = [pb.TopicToCreate(name=f"t{i}", num_partitions=5, replication_factor=2) for i in range(7)]
    h.call("CreateTopics", pb.CreateTopicsRequest(topics=topics))
    commands = h.results[-1].commands
    assert [len(c) for c in commands] == [12, 12, 12, 6]  # 6 records a topic, 2 topics fit in 16
    for command in commands:
        ids = {r.topic_id for r in command if isinstance(r, Topic)}
        assert {r.topic_id for r in command if isinstance(r, Partition)} == ids
    assert len(h.image.topics_by_name) == 7


def test_a_topic_too_big_for_one_command_is_refused() -> None:
    """T6: never split one topic; refuse it instead."""
    h = make_harness({"controller.max.records.per.command": "16"})
    h.start_brokers([0])
    result = h.create_topic("t", 16)
    assert result.error.code == "INVALID_PARTITIONS"
    assert "controller.max.records.per.command" in result.error.message
    assert not h.create_topic("u", 15).error.code


def test_topic_ids_come_from_the_injected_random_source() -> None:
    """T6, P3: the same seed gives the same ids and placements."""
    runs = []
    for _ in range(2):
        h = make_harness(seed=42)
        h.start_brokers([0, 1, 2])
        h.create_topic("t", 5, 2)
        runs.append(h.image.topic("t"))
    assert runs[0] == runs[1]


# --- delete ------------------------------------------------------------------------------------------


def test_delete_topics_removes_topic_and_configs(three: CoreHarness) -> None:
    """T7: RemoveTopic; a topic's configs go with it; unknown names are UNKNOWN_TOPIC_OR_PARTITION."""
    three.create_topic("t", 2, configs={"retention.ms": "5"})
    topic_id = three.topic_id("t")
    response = three.call("DeleteTopics", pb.DeleteTopicsRequest(names=["t", "nope"]))
    assert [(r.name, r.error.code) for r in response.topics] == [("t", ""), ("nope", "UNKNOWN_TOPIC_OR_PARTITION")]
    assert response.topics[0].topic_id == topic_id
    assert three.results[-1].records == (RemoveTopic(topic_id),)
    assert three.image.topic("t") is None
    assert three.image.config(ConfigResourceType.TOPIC, "t") == {}
    assert not three.create_topic("t").error.code  # the name is free again, with a new id
    assert three.topic_id("t") != topic_id


# --- create partitions --------------------------------------------------------------------------------


def _grow(h: CoreHarness, name: str, count: int, assignments: list[list[int]] | None = None) -> pb.TopicResult:
    topic = pb.CreatePartitionsRequest.Topic(name=name, count=count)
    for replicas in assignments or []:
        topic.assignments.add(broker_ids=replicas)
    response: pb.CreatePartitionsResponse = h.call("CreatePartitions", pb.CreatePartitionsRequest(topics=[topic]))
    return response.topics[0]


def test_create_partitions_only_grows(three: CoreHarness) -> None:
    """T8: fewer or as many partitions as now is INVALID_PARTITIONS; unknown topic likewise refused."""
    three.create_topic("t", 3, 2)
    assert _grow(three, "t", 2).error.code == "INVALID_PARTITIONS"
    assert _grow(three, "t", 3).error.code == "INVALID_PARTITIONS"
    assert _grow(three, "nope", 5).error.code == "UNKNOWN_TOPIC_OR_PARTITION"
    result = _grow(three, "t", 5)
    assert (result.error.code, result.num_partitions, result.replication_factor) == ("", 5, 2)
    topic = three.image.topic("t")
    assert topic is not None
    assert sorted(topic.partitions) == [0, 1, 2, 3, 4]
    assert all(len(reg.replicas) == 2 for reg in topic.partitions.values())


def test_create_partitions_with_assignment(three: CoreHarness) -> None:
    """T8: the assignment lists exactly the new partitions, with the topic's replication factor."""
    three.create_topic("t", 1, 2)
    assert _grow(three, "t", 3, [[0, 1]]).error.code == "INVALID_REPLICA_ASSIGNMENT"
    assert _grow(three, "t", 2, [[0]]).error.code == "INVALID_REPLICA_ASSIGNMENT"
    assert not _grow(three, "t", 2, [[2, 1]]).error.code
    assert three.partition("t", 1).replicas == (2, 1)


def test_create_partitions_validate_only_writes_nothing(three: CoreHarness) -> None:
    """T8, T6."""
    three.create_topic("t", 1, 1)
    request = pb.CreatePartitionsRequest(
        topics=[pb.CreatePartitionsRequest.Topic(name="t", count=4)], validate_only=True
    )
    offset = three.image.offset
    assert not three.call("CreatePartitions", request).topics[0].error.code
    assert three.image.offset == offset


def test_configs_stay_with_the_topic_command(three: CoreHarness) -> None:
    """T6: Topic first, its Partitions, then its Configs."""
    three.create_topic("t", 2, 1, configs={"retention.ms": "1"})
    kinds = [type(r) for r in three.results[-1].records]
    assert kinds == [Topic, Partition, Partition, Config]


# --- placement ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("brokers", "partitions"), [(3, 6), (3, 7), (5, 12), (4, 1), (7, 100)])
def test_placement_spreads_leaders_within_one(brokers: int, partitions: int) -> None:
    """P1: every broker gets N // n or N // n + 1 leaderships."""
    for seed in range(20):
        assignment = assign_replicas(list(range(brokers)), partitions, min(3, brokers), random.Random(seed))
        counts = collections.Counter(replicas[0] for replicas in assignment)
        low = partitions // brokers
        assert all(counts[b] in (low, low + 1) for b in range(brokers)), (seed, counts)


def test_placement_never_repeats_a_broker_and_spreads_followers() -> None:
    """P2: distinct replicas; followers spread too (each broker holds about N * rf / n replicas)."""
    assignment = assign_replicas([1, 3, 5, 7, 9], 50, 3, random.Random(7))
    assert all(len(set(r)) == 3 for r in assignment)
    counts = collections.Counter(b for r in assignment for b in r)
    assert max(counts.values()) - min(counts.values()) <= 3


def test_placement_is_kafkas_round_robin() -> None:
    """P1, P2: first replica b[(p + s) % n], followers shifted by h (+1 every n partitions)."""

    class Fixed(random.Random):
        def randrange(self, *args: object, **kwargs: object) -> int:
            return 0

    assignment = assign_replicas([0, 1, 2], 4, 2, Fixed())
    assert assignment == [(0, 1), (1, 2), (2, 0), (0, 2)]


def test_placement_of_partitions_matches_the_unfenced_brokers_only(three: CoreHarness) -> None:
    """T4: only eligible brokers get replicas."""
    three.register(9)  # fenced
    three.create_topic("t", 30, 3)
    assert all(9 not in reg.replicas for _, reg in three.image.all_partitions())


# --- limits: replicas per broker, directory names ------------------------------------------------------


def test_replicas_per_broker_are_capped_by_max_broker_partitions() -> None:
    """T9: CreateTopics and CreatePartitions refuse (POLICY_VIOLATION, nothing written) what would put more than
    max.broker.partitions replicas on a broker, counting topics created before in the same request."""
    h = make_harness({"max.broker.partitions": "10"})
    h.start_brokers([0, 1])
    assert not h.create_topic("a", 8, 2).error.code  # 8 replicas on each broker
    offset = h.image.offset
    refused = h.create_topic("b", 5, 1)  # 3 + 2 more: one broker would hold 11
    assert refused.error.code == "POLICY_VIOLATION"
    assert "would hold 11 partition replicas, above max.broker.partitions=10" in refused.error.message
    assert h.image.offset == offset
    assert _grow(h, "a", 11).error.code == "POLICY_VIOLATION"  # 3 more on each: 11 > 10
    assert not _grow(h, "a", 9).error.code  # 9 on each
    both = h.call("CreateTopics", pb.CreateTopicsRequest(topics=[
        pb.TopicToCreate(name="c", num_partitions=1, replication_factor=2),
        pb.TopicToCreate(name="d", num_partitions=1, replication_factor=2),
    ]))  # fmt: skip
    assert [t.error.code for t in both.topics] == ["", "POLICY_VIOLATION"]  # c takes the last seat of each
    request = pb.AlterConfigsRequest()
    request.resources.add(resource_type="cluster", resource_name="").entries.add(key="max.broker.partitions",
                                                                                 value="100")  # fmt: skip
    assert not h.call("AlterConfigs", request).resources[0].error.code
    assert not h.create_topic("d", 1, 2).error.code  # the cluster config raised the limit


def test_partition_directory_names_fit_the_file_system() -> None:
    """T10: ``<topic>-<partition>`` of a 249-character topic fits 255 bytes up to partition 99999 (a request for
    more is refused before any placement: shown on the rule itself, 100,000 partitions being too many to make
    in a test)."""
    longest = "x" * 249
    check_dir_name(longest, 100_000)
    with pytest.raises(Refused, match="longer than 255 bytes") as refused:
        check_dir_name(longest, 100_001)
    assert refused.value.code == "INVALID_PARTITIONS"
    check_dir_name("y" * 244, 10**10)
