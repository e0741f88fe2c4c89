"""Metadata, ListOffsets, DescribeCluster, DescribeConfigs and the forwarded admin calls, without gRPC."""

from __future__ import annotations

from pathlib import Path

from broker.handlers import describe_cluster, describe_configs, forward, list_offsets, metadata
from metadata.records import FenceBroker
from proto import broker_pb2 as pb
from proto import controller_pb2
from tests.broker.conftest import START_MS, BrokerHarness, batch
from tests.broker.test_fetch_handler import append


def offsets(
    harness: BrokerHarness, *items: tuple[str, int, int], epoch: int = -1
) -> list[pb.ListOffsetsPartitionResponse]:
    request = pb.ListOffsetsRequest(replica_id=-1, partitions=[
        pb.ListOffsetsPartition(topic=t, partition=p, timestamp=ts, current_leader_epoch=epoch) for t, p, ts in items
    ])  # fmt: skip
    return list(list_offsets.handle(harness.ctx, request).partitions)


def test_list_offsets(harness: BrokerHarness) -> None:
    harness.create_topic("t")
    append(harness, batch([b"a", b"b"], timestamp_ms=START_MS))
    append(harness, batch([b"c"], timestamp_ms=START_MS + 5000))
    append(harness, batch([b"d"], timestamp_ms=START_MS + 1000))
    earliest, latest, biggest, by_time, too_late = offsets(
        harness, ("t", 0, -2), ("t", 0, -1), ("t", 0, -3), ("t", 0, START_MS + 10), ("t", 0, START_MS + 9999)
    )
    assert (earliest.offset, latest.offset) == (0, 4)
    assert (biggest.offset, biggest.timestamp) == (2, START_MS + 5000)
    assert (by_time.offset, by_time.timestamp) == (2, START_MS + 5000)
    assert (too_late.offset, too_late.timestamp) == (-1, -1)
    assert not too_late.error.code
    assert all(r.leader_epoch == harness.partition("t").leader_epoch for r in (earliest, latest))


def test_list_offsets_errors(harness: BrokerHarness) -> None:
    harness.register(1)
    harness.create_topic("t")
    harness.create_topic("elsewhere", replicas=[1])
    bad_time, unknown, elsewhere = offsets(harness, ("t", 0, -7), ("nope", 0, -1), ("elsewhere", 0, -1))
    assert bad_time.error.code == "INVALID_REQUEST"
    assert unknown.error.code == "UNKNOWN_TOPIC_OR_PARTITION"
    assert elsewhere.error.code == "NOT_LEADER_OR_FOLLOWER"
    (fenced,) = offsets(harness, ("t", 0, -1), epoch=harness.partition("t").leader_epoch + 1)
    assert fenced.error.code == "UNKNOWN_LEADER_EPOCH"


def test_metadata_answers_for_the_whole_cluster(harness: BrokerHarness) -> None:
    harness.register(1)
    harness.register(2)
    harness.create_topic("mine", partitions=2)
    harness.create_topic("theirs", replicas=[1, 2], isr=[1, 2], leader=2)
    response = metadata.handle(harness.ctx, pb.MetadataRequest(all_topics=True))
    assert [b.node_id for b in response.brokers] == [0, 1, 2]
    assert [(b.host, b.port) for b in response.brokers][1] == ("127.0.0.1", 9093)
    assert response.controller_id == 100
    assert response.metadata_offset == harness.image.offset
    topics = {t.name: t for t in response.topics}
    assert sorted(topics) == ["mine", "theirs"]
    theirs = topics["theirs"].partitions[0]
    assert (theirs.leader, list(theirs.replicas), list(theirs.isr)) == (2, [1, 2], [1, 2])
    assert topics["theirs"].topic_id == harness.topic_ids["theirs"]
    harness.apply(FenceBroker(1, harness.image.brokers[1].broker_epoch))
    response = metadata.handle(harness.ctx, pb.MetadataRequest(topics=["theirs", "nope"]))
    assert [b.node_id for b in response.brokers] == [0, 2]  # unfenced only
    assert list(response.topics[0].partitions[0].offline_replicas) == [1]
    assert response.topics[1].error.code == "UNKNOWN_TOPIC_OR_PARTITION"
    assert metadata.handle(harness.ctx, pb.MetadataRequest()).topics == []  # no topics asked, none given


def test_metadata_leader_not_available(harness: BrokerHarness) -> None:
    harness.create_topic("t")
    harness.change("t", leader=-1)
    (partition,) = metadata.handle(harness.ctx, pb.MetadataRequest(topics=["t"])).topics[0].partitions
    assert partition.leader == -1
    assert partition.error.code == "LEADER_NOT_AVAILABLE"


def test_describe_cluster_without_a_controller(harness: BrokerHarness) -> None:
    harness.register(1)
    response = describe_cluster.handle(harness.ctx, pb.DescribeClusterRequest())
    assert response.controller_id == 100
    assert [b.node_id for b in response.brokers] == [0, 1]
    assert not response.error.code


def configs(harness: BrokerHarness, kind: str, name: str, *keys: str) -> pb.DescribeConfigsResponse.Result:
    request = pb.DescribeConfigsRequest(resources=[pb.DescribeConfigsRequest.Resource(
        resource_type=kind, resource_name=name, keys=list(keys))])  # fmt: skip
    return describe_configs.handle(harness.ctx, request).results[0]


def test_describe_topic_configs_with_their_sources(tmp_path: Path) -> None:
    h = BrokerHarness(tmp_path / "b", props={"log.retention.hours": "24"})
    try:
        h.create_topic("t", configs={"segment.bytes": "4096"})
        result = configs(h, "topic", "t")
        entries = {c.key: c for c in result.configs}
        assert (entries["segment.bytes"].value, entries["segment.bytes"].source) == ("4096", "DYNAMIC_TOPIC_CONFIG")
        assert (entries["retention.ms"].value, entries["retention.ms"].source) == ("86400000", "STATIC_BROKER_CONFIG")
        assert entries["cleanup.policy"].source == "DEFAULT_CONFIG"
        assert entries["cleanup.policy"].is_default
        assert [c.key for c in configs(h, "topic", "t", "segment.bytes").configs] == ["segment.bytes"]
        assert h.partition("t").config.segment_bytes == 4096  # the log runs with it too
        assert h.partition("t").config.retention_ms == 86_400_000
    finally:
        h.close()


def test_describe_configs_errors_and_the_broker_resource(harness: BrokerHarness) -> None:
    assert configs(harness, "topic", "nope").error.code == "UNKNOWN_TOPIC_OR_PARTITION"
    assert configs(harness, "broker", "7").error.code == "INVALID_REQUEST"
    assert configs(harness, "group", "g").error.code == "INVALID_REQUEST"
    broker = {c.key: c for c in configs(harness, "broker", "0").configs}
    assert broker["fetch.max.bytes"].value == "57671680"
    assert broker["fetch.max.bytes"].read_only
    assert broker["auto.create.topics.enable"].value == "false"


def test_forwarded_calls_without_a_controller_time_out(harness: BrokerHarness) -> None:
    response = forward.create_topics(harness.ctx, controller_pb2.CreateTopicsRequest(
        topics=[controller_pb2.TopicToCreate(name="t", num_partitions=1, replication_factor=1)]))  # fmt: skip
    assert response.error.code == "REQUEST_TIMED_OUT"
    assert harness.image.topic("t") is None
