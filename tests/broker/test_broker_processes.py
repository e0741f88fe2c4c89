"""The broker as a process: `odradek controller` + `odradek broker` on 127.0.0.1, spoken to over gRPC.

Every wait is bounded; ordering is asserted with events (a long poll is still pending when checked, then
returns after the produce), never with wall-clock speed.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import grpc
import pytest

from log.record import build_batch, iter_batches
from proto import broker_pb2 as pb
from proto import controller_pb2 as cpb
from tests.broker.cluster import Cluster

pytestmark = pytest.mark.slow

START_MS = 1_700_000_000_000


def produce(stub: object, topic: str, partition: int, records: bytes, acks: int = 1) -> pb.ProducePartitionResponse:
    request = pb.ProduceRequest(acks=acks, timeout_ms=10_000, topics=[pb.ProduceTopicData(
        name=topic, partitions=[pb.ProducePartitionData(partition=partition, records=records)])])  # fmt: skip
    response: pb.ProduceResponse = stub.Produce(request, timeout=30)  # type: ignore[attr-defined]
    return response.topics[0].partitions[0]


def fetch_request(topic: str, partition: int, offset: int, *, max_wait_ms: int = 0, epoch: int = -1) -> pb.FetchRequest:
    request = pb.FetchRequest(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20)
    request.topics.add(name=topic).partitions.add(
        partition=partition, fetch_offset=offset, partition_max_bytes=1 << 20, current_leader_epoch=epoch
    )
    return request


def fetch(stub: object, topic: str, partition: int, offset: int, **kwargs: int) -> pb.FetchPartitionResponse:
    response: pb.FetchResponse = stub.Fetch(fetch_request(topic, partition, offset, **kwargs), timeout=30)  # type: ignore[attr-defined]
    return response.topics[0].partitions[0]


@pytest.fixture(scope="module")
def one(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with Cluster(tmp_path_factory.mktemp("one"), brokers=1) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def three(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    config = {"auto.create.topics.enable": "true", "num.partitions": "3"}
    with Cluster(tmp_path_factory.mktemp("three"), brokers=3, broker_config=config) as cluster:
        yield cluster


def test_produce_acks_0_and_1_then_fetch_byte_identical(one: Cluster) -> None:
    one.create_topic("bytes", partitions=2)
    stub = one.broker_stub(0)
    epoch = one.partition_metadata("bytes", 1).leader_epoch
    first = build_batch(
        [b"a", b"b", None], keys=[b"k1", None, b"k3"], timestamp_ms=START_MS, partition_leader_epoch=epoch
    )
    second = build_batch([b"c" * 1000], timestamp_ms=START_MS + 1, base_offset=3, partition_leader_epoch=epoch)
    answer = produce(stub, "bytes", 1, first, acks=1)
    assert not answer.error.code
    assert answer.base_offset == 0
    produce(stub, "bytes", 1, second, acks=0)  # the client ignores an acks=0 answer; the broker appends
    got = fetch(stub, "bytes", 1, 0)
    assert not got.error.code
    assert got.records == first + second  # offsets and epoch match what the broker assigns: identical bytes
    assert (got.high_watermark, got.log_start_offset, got.log_end_offset) == (4, 0, 4)
    assert fetch(stub, "bytes", 0, 0).records == b""  # the other partition is untouched


def test_acks_all_with_one_replica(one: Cluster) -> None:
    one.create_topic("all")
    answer = produce(one.broker_stub(0), "all", 0, build_batch([b"x"], timestamp_ms=START_MS), acks=-1)
    assert not answer.error.code
    assert answer.base_offset == 0


def test_long_poll_returns_when_data_arrives_and_not_before(one: Cluster) -> None:
    one.create_topic("poll")
    stub = one.broker_stub(0)
    pending = stub.Fetch.future(fetch_request("poll", 0, 0, max_wait_ms=60_000), timeout=90)
    time.sleep(0.2)  # give the request time to reach the purgatory: if it answered, done() says so below
    assert not pending.done(), "the fetch answered with no data"
    records = build_batch([b"wake up"], timestamp_ms=START_MS)
    assert not produce(stub, "poll", 0, records).error.code
    got = pending.result(timeout=10).topics[0].partitions[0]
    assert not got.error.code
    assert got.records[16:] == records[16:]


def test_long_poll_expires_empty(one: Cluster) -> None:
    one.create_topic("quiet")
    got = fetch(one.broker_stub(0), "quiet", 0, 0, max_wait_ms=100)
    assert not got.error.code
    assert got.records == b""


def test_error_paths_over_the_wire(one: Cluster) -> None:
    one.create_topic("errors", configs={"max.message.bytes": "500"})
    stub = one.broker_stub(0)
    ok = build_batch([b"ok"], timestamp_ms=START_MS)
    assert produce(stub, "nope", 0, ok).error.code == "UNKNOWN_TOPIC_OR_PARTITION"
    assert produce(stub, "errors", 9, ok).error.code == "UNKNOWN_TOPIC_OR_PARTITION"
    assert produce(stub, "errors", 0, ok, acks=5).error.code == "INVALID_REQUIRED_ACKS"
    assert produce(stub, "errors", 0, build_batch([b"x" * 1000], timestamp_ms=START_MS)).error.code == (
        "MESSAGE_TOO_LARGE"
    )
    assert fetch(stub, "errors", 0, 7).error.code == "OFFSET_OUT_OF_RANGE"
    epoch = one.partition_metadata("errors", 0).leader_epoch
    assert fetch(stub, "errors", 0, 0, epoch=epoch + 1).error.code == "UNKNOWN_LEADER_EPOCH"
    duplicate = stub.CreateTopics(cpb.CreateTopicsRequest(topics=[cpb.TopicToCreate(
        name="errors", num_partitions=1, replication_factor=1)]), timeout=30)  # fmt: skip
    assert duplicate.topics[0].error.code == "TOPIC_ALREADY_EXISTS"
    bad_name = stub.CreateTopics(cpb.CreateTopicsRequest(topics=[cpb.TopicToCreate(
        name="no/slashes", num_partitions=1, replication_factor=1)]), timeout=30)  # fmt: skip
    assert bad_name.topics[0].error.code == "INVALID_TOPIC_EXCEPTION"
    assert not produce(stub, "errors", 0, ok).error.code
    metadata = one.metadata(0, ["nope"])
    assert metadata.topics[0].error.code == "UNKNOWN_TOPIC_OR_PARTITION"


def test_garbage_records_get_corrupt_message_and_the_broker_keeps_serving(one: Cluster) -> None:
    one.create_topic("garbage")
    stub = one.broker_stub(0)
    for junk in (b"\xff" * 100, b"hello", build_batch([b"x"], timestamp_ms=START_MS)[:-3]):
        answer = produce(stub, "garbage", 0, junk)
        assert answer.error.code == "CORRUPT_MESSAGE", junk
    flipped = bytearray(build_batch([b"x"], timestamp_ms=START_MS))
    flipped[-1] ^= 1
    assert produce(stub, "garbage", 0, bytes(flipped)).error.code == "CORRUPT_MESSAGE"
    assert fetch(stub, "garbage", 0, 0).log_end_offset == 0  # nothing was written
    assert not produce(stub, "garbage", 0, build_batch([b"fine"], timestamp_ms=START_MS)).error.code
    assert fetch(stub, "garbage", 0, 0).log_end_offset == 1
    with pytest.raises(grpc.RpcError) as raised:  # not even protobuf: gRPC refuses it, the broker lives on
        one.broker_channel(0).unary_unary("/odradek.broker.Broker/Produce")(b"\xff\xff\xff", timeout=10)
    assert raised.value.code() in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN)
    assert one.brokers[0].alive()
    assert not produce(stub, "garbage", 0, build_batch([b"still"], timestamp_ms=START_MS)).error.code


def test_list_offsets_describe_cluster_and_configs(one: Cluster) -> None:
    one.create_topic("offsets", configs={"retention.ms": "123456"})
    stub = one.broker_stub(0)
    produce(stub, "offsets", 0, build_batch([b"a", b"b"], timestamp_ms=START_MS))
    produce(stub, "offsets", 0, build_batch([b"c"], timestamp_ms=START_MS + 50))
    request = pb.ListOffsetsRequest(replica_id=-1, partitions=[
        pb.ListOffsetsPartition(topic="offsets", partition=0, timestamp=ts, current_leader_epoch=-1)
        for ts in (-2, -1, -3, START_MS + 10)
    ])  # fmt: skip
    answers = stub.ListOffsets(request, timeout=10).partitions
    assert [(a.offset, a.error.code) for a in answers] == [(0, ""), (3, ""), (2, ""), (2, "")]
    cluster = stub.DescribeCluster(pb.DescribeClusterRequest(), timeout=10)
    assert cluster.cluster_id
    assert cluster.controller_id == 0
    assert [c.address for c in cluster.controllers] == [one.controllers[0].address]
    assert [(b.node_id, f"{b.host}:{b.port}", b.fenced) for b in cluster.brokers] == [
        (0, one.brokers[0].address, False)
    ]
    configs = stub.DescribeConfigs(pb.DescribeConfigsRequest(resources=[pb.DescribeConfigsRequest.Resource(
        resource_type="topic", resource_name="offsets", keys=["retention.ms"])]), timeout=10)  # fmt: skip
    (entry,) = configs.results[0].configs
    assert (entry.value, entry.source) == ("123456", "DYNAMIC_TOPIC_CONFIG")


def test_alter_configs_reaches_the_partition(one: Cluster) -> None:
    one.create_topic("altered")
    stub = one.broker_stub(0)
    response = stub.AlterConfigs(cpb.AlterConfigsRequest(resources=[cpb.AlterConfigsRequest.Resource(
        resource_type="topic", resource_name="altered",
        entries=[cpb.ConfigEntry(key="max.message.bytes", value="100")])]), timeout=30)  # fmt: skip
    assert not response.error.code
    assert not response.resources[0].error.code
    big = build_batch([b"x" * 200], timestamp_ms=START_MS)
    one.wait_for(lambda: produce(stub, "altered", 0, big).error.code == "MESSAGE_TOO_LARGE", 20, "the new limit")


def test_delete_topic_removes_its_directory(one: Cluster) -> None:
    one.create_topic("doomed")
    stub = one.broker_stub(0)
    produce(stub, "doomed", 0, build_batch([b"x"], timestamp_ms=START_MS))
    assert (one.brokers[0].data_dir / "doomed-0").is_dir()
    response = stub.DeleteTopics(cpb.DeleteTopicsRequest(names=["doomed"], timeout_ms=30_000), timeout=40)
    assert not response.topics[0].error.code
    assert one.metadata(0, ["doomed"]).topics[0].error.code == "UNKNOWN_TOPIC_OR_PARTITION"  # read-your-writes
    assert not (one.brokers[0].data_dir / "doomed-0").exists()
    assert produce(stub, "doomed", 0, build_batch([b"x"], timestamp_ms=START_MS)).error.code == (
        "UNKNOWN_TOPIC_OR_PARTITION"
    )


def test_three_brokers_any_broker_answers_metadata(three: Cluster) -> None:
    three.create_topic("spread", partitions=6, replication_factor=1)
    metadata = [three.metadata(i, ["spread"]) for i in range(3)]
    assert all(sorted(b.node_id for b in m.brokers) == [0, 1, 2] for m in metadata)
    leaders = [[p.leader for p in m.topics[0].partitions] for m in metadata]
    assert leaders[0] == leaders[1] == leaders[2]
    assert set(leaders[0]) == {0, 1, 2}
    for partition, leader in enumerate(leaders[0]):
        other = (leader + 1) % 3
        records = build_batch([f"p{partition}".encode()], timestamp_ms=START_MS)
        assert produce(three.broker_stub(other), "spread", partition, records).error.code == "NOT_LEADER_OR_FOLLOWER"
        assert not produce(three.broker_stub(leader), "spread", partition, records).error.code
        got = fetch(three.broker_stub(leader), "spread", partition, 0)
        assert [h.base_offset for _, h in iter_batches(got.records)] == [0]
        assert fetch(three.broker_stub(other), "spread", partition, 0).error.code == "NOT_LEADER_OR_FOLLOWER"


def test_auto_create_when_enabled(three: Cluster) -> None:
    first = three.metadata(1, ["made-on-demand", "bad/name"])
    assert first.topics[1].error.code == "INVALID_TOPIC_EXCEPTION"
    assert first.topics[0].error.code in ("", "LEADER_NOT_AVAILABLE")
    three.wait_for(lambda: three.has_leaders(2, "made-on-demand", 3), 30, "the auto-created topic")
    leader = three.leader("made-on-demand", 0)
    assert not produce(
        three.broker_stub(leader), "made-on-demand", 0, build_batch([b"x"], timestamp_ms=START_MS)
    ).error.code
    assert three.metadata(0, ["bad/name"]).topics[0].error.code == "INVALID_TOPIC_EXCEPTION"


def test_sigterm_shuts_down_cleanly_and_a_restart_keeps_the_data(tmp_path: Path) -> None:
    with Cluster(tmp_path, brokers=1) as cluster:
        cluster.create_topic("durable", partitions=2, configs={"segment.bytes": "2000"})
        stub = cluster.broker_stub(0)
        sent = [build_batch([f"r{i}".encode() * 200], timestamp_ms=START_MS + i) for i in range(20)]
        for i, records in enumerate(sent):
            assert not produce(stub, "durable", i % 2, records).error.code
        before = [_fetch_all(stub, "durable", p) for p in (0, 1)]
        broker = cluster.brokers[0]
        broker.signal(signal.SIGTERM)
        assert broker.wait(40) == 0, broker.errors()
        assert "controlled shutdown done" in broker.errors()
        for p in (0, 1):
            directory = broker.data_dir / f"durable-{p}"
            assert (directory / "clean-shutdown").exists(), f"no clean-shutdown marker in {directory}"
            assert len(list(directory.glob("*.log"))) > 1  # several segments
        cluster.start_broker(0)
        stub = cluster.broker_stub(0)
        cluster.wait_for(lambda: cluster.leader("durable", 1) == 0, 30, "leadership back on broker 0")
        for p in (0, 1):
            served = cluster.wait_for(partial(_served, stub, "durable", p), 30, f"durable-{p} served again")
            assert served.log_end_offset == served.high_watermark == 10
            after = _fetch_all(stub, "durable", p)
            assert [h.base_offset for _, h in iter_batches(after)] == list(range(10))
            assert after == before[p]  # the stored bytes, unchanged by the restart
        assert not produce(stub, "durable", 0, build_batch([b"more"], timestamp_ms=START_MS)).error.code


def _served(stub: object, topic: str, partition: int) -> pb.FetchPartitionResponse | None:
    got = fetch(stub, topic, partition, 0)
    return None if got.error.code or got.high_watermark < got.log_end_offset else got


def _fetch_all(stub: object, topic: str, partition: int) -> bytes:
    chunks: list[bytes] = []
    offset = 0
    while True:
        got = fetch(stub, topic, partition, offset)
        if not got.records:
            return b"".join(chunks)
        chunks.append(got.records)
        offset = [h.next_offset for _, h in iter_batches(got.records)][-1]
