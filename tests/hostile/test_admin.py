"""Hostile metadata and admin requests (issue 15): the 249-character topic whose deletion made brokers
crash-loop, odd names and huge values, the cap on partitions per broker. Each ends with :func:`check_healthy`."""

from __future__ import annotations

import pytest

from proto import broker_pb2 as pb
from proto import controller_pb2
from tests.broker.cluster import Cluster
from tests.hostile.health import CALL_TIMEOUT_S, Ledger, check_healthy, create_topic_raw, good_batch, produce_raw

pytestmark = pytest.mark.hostile


def delete_topic(cluster: Cluster, name: str) -> controller_pb2.TopicResult:
    request = controller_pb2.DeleteTopicsRequest(names=[name], timeout_ms=20_000)
    result: controller_pb2.TopicResult = cluster.broker_stub(0).DeleteTopics(request, timeout=30).topics[0]
    return result


def test_a_249_character_topic_is_created_written_deleted_and_created_again(cluster: Cluster, ledger: Ledger) -> None:
    """Its ``-delete`` directory name (``<topic>-<partition>.<uuid>-delete``) is longer than 255 bytes: brokers
    crash-looped on the rename; the topic part is cut short now, as Kafka does."""
    name = "a" * 249
    cluster.create_topic(name, 3, 3)
    assert not produce_raw(cluster, name, 1, good_batch()).error.code
    assert not delete_topic(cluster, name).error.code
    for i, proc in enumerate(cluster.brokers):
        cluster.wait_for(lambda p=proc: not any(d.name.startswith(name) for d in p.data_dir.iterdir()), 30,
                         f"broker {i} to delete the directories of the 249-character topic")  # fmt: skip
    check_healthy(cluster, ledger)
    cluster.create_topic(name, 1, 3)  # the name is free again, and every broker follows
    assert not produce_raw(cluster, name, 0, good_batch()).error.code
    check_healthy(cluster, ledger)


@pytest.mark.parametrize(("name", "words"), [
    ("a" * 250, "longer than 249"), ("", "empty"), ("..", '"." or ".."'), ("bad/name", "character"),
    ("tab\tname", "character"), ("é", "character"), ("x" * 1_000_000, "longer than 249"),
])  # fmt: skip
def test_illegal_topic_names_are_invalid_topic_exception(
    cluster: Cluster, ledger: Ledger, name: str, words: str
) -> None:
    result = create_topic_raw(cluster, name)
    assert result.error.code == "INVALID_TOPIC_EXCEPTION"
    assert words in result.error.message
    metadata = cluster.broker_stub(0).Metadata(pb.MetadataRequest(topics=[name]), timeout=CALL_TIMEOUT_S)
    assert metadata.topics[0].error.code in ("INVALID_TOPIC_EXCEPTION", "UNKNOWN_TOPIC_OR_PARTITION")
    check_healthy(cluster, ledger)


@pytest.mark.parametrize(("partitions", "rf", "code"), [
    (2**31 - 1, 1, "INVALID_PARTITIONS"), (0, 1, "INVALID_PARTITIONS"), (-5, 1, "INVALID_PARTITIONS"),
    (1, 4, "INVALID_REPLICATION_FACTOR"), (1, 2**15, "INVALID_REPLICATION_FACTOR"),
    (1, -7, "INVALID_REPLICATION_FACTOR"),
])  # fmt: skip
def test_huge_and_negative_counts_are_refused(
    cluster: Cluster, ledger: Ledger, partitions: int, rf: int, code: str
) -> None:
    result = create_topic_raw(cluster, f"counts-{partitions}-{rf}".replace("-", "_"), partitions, rf)
    assert result.error.code == code, result.error
    check_healthy(cluster, ledger)


def test_more_partitions_than_a_broker_may_hold_is_policy_violation(cluster: Cluster, ledger: Ledger) -> None:
    """max.broker.partitions (300 here; KIP-578's name, not adopted by Kafka): each replica costs a broker a
    directory and open files, so one request cannot make a broker open them without bound."""
    result = create_topic_raw(cluster, "too-many", 400, 3)
    assert result.error.code == "POLICY_VIOLATION"
    assert "above max.broker.partitions=300" in result.error.message
    grow = controller_pb2.CreatePartitionsRequest(topics=[controller_pb2.CreatePartitionsRequest.Topic(
        name="ledger", count=400)], timeout_ms=20_000)  # fmt: skip
    grown = cluster.broker_stub(0).CreatePartitions(grow, timeout=30).topics[0]
    assert grown.error.code == "POLICY_VIOLATION"
    check_healthy(cluster, ledger)


@pytest.mark.parametrize(("key", "value"), [
    ("no.such.key", "1"), ("segment.bytes", "-1"), ("message.timestamp.after.max.ms", "soon"),
    ("retention.ms", "9" * 40), ("cleanup.policy", "compact,,delete"),
])  # fmt: skip
def test_bad_topic_configs_are_invalid_config_naming_the_key(
    cluster: Cluster, ledger: Ledger, key: str, value: str
) -> None:
    result = create_topic_raw(cluster, "configs", 1, 1, configs={key: value})
    assert result.error.code == "INVALID_CONFIG"
    assert key in result.error.message
    check_healthy(cluster, ledger)


def test_metadata_for_a_hundred_thousand_unknown_topics_is_answered(cluster: Cluster, ledger: Ledger) -> None:
    request = pb.MetadataRequest(topics=[f"t{i}" for i in range(100_000)])
    response = cluster.broker_stub(1).Metadata(request, timeout=CALL_TIMEOUT_S)
    assert {t.error.code for t in response.topics} == {"UNKNOWN_TOPIC_OR_PARTITION"}
    check_healthy(cluster, ledger)
