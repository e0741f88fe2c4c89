"""The file system can say no (issue 15): an OSError in a broker's metadata thread takes its log dir offline
(Kafka's LogDirFailureChannel) instead of killing it; the cleaner marks a partition it cannot clean as
uncleanable and goes on with the others. Real processes, clusters of their own (they damage a broker)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from log.record import build_batch
from proto import broker_pb2 as pb
from proto import controller_pb2
from tests.broker.cluster import Cluster
from tests.hostile.health import CALL_TIMEOUT_S, Ledger, check_healthy, produce_raw, read_partition
from tests.log.test_record_codec import recrc

pytestmark = pytest.mark.hostile


@pytest.fixture
def three(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, Ledger]]:
    with Cluster(tmp_path_factory.mktemp("fs"), brokers=3) as c:
        ledger = Ledger(c).create()
        ledger.produce(3)
        yield c, ledger


def test_a_file_system_refusal_takes_the_log_dir_offline_and_the_broker_stays_up(three: tuple[Cluster, Ledger]) -> None:
    """A file where broker 2 must create a partition's directory: its metadata thread gets an OSError. Broker 2
    stays up, answers KAFKA_STORAGE_ERROR for its partitions, asks to be fenced; the controller moves its
    leaderships to the others, which go on serving; nothing acknowledged is lost."""
    cluster, ledger = three
    (cluster.brokers[2].data_dir / "squatted-0").write_text("not a directory")
    request = controller_pb2.CreateTopicsRequest(topics=[controller_pb2.TopicToCreate(
        name="squatted", num_partitions=-1, replication_factor=-1,
        assignments=[controller_pb2.ReplicaList(broker_ids=[2, 0, 1])])], timeout_ms=20_000)  # fmt: skip
    assert not cluster.broker_stub(0).CreateTopics(request, timeout=30).topics[0].error.code
    cluster.wait_for(lambda: fenced(cluster, 2), 30, "broker 2 to be fenced after its log dir failed")
    assert cluster.brokers[2].alive()
    assert "is offline" in cluster.brokers[2].errors(20_000)
    answer = produce_raw(cluster, "ledger", 0, build_batch([b"x"], timestamp_ms=int(time.time() * 1000)), via=2)
    assert answer.error.code in ("KAFKA_STORAGE_ERROR", "NOT_LEADER_OR_FOLLOWER")
    metadata = cluster.broker_stub(2).Metadata(pb.MetadataRequest(topics=["ledger"]), timeout=CALL_TIMEOUT_S)
    assert all(p.leader != 2 for p in metadata.topics[0].partitions)  # broker 2 still answers metadata
    assert not produce_raw(cluster, "squatted", 0, build_batch([b"y"], timestamp_ms=int(time.time() * 1000))).error.code
    check_healthy(cluster, ledger)
    cluster.stop_broker(2)  # a restart finds the same file, and goes offline again rather than crash-looping
    cluster.brokers[2].start()
    cluster.wait_for(lambda: "is offline" in cluster.brokers[2].errors(20_000).split("broker 2 stopped")[-1], 60,
                     "broker 2 to take its log dir offline again after the restart")  # fmt: skip
    assert cluster.brokers[2].alive()
    check_healthy(cluster, ledger)


def fenced(cluster: Cluster, broker_id: int) -> bool:
    described = cluster.broker_stub(0).DescribeCluster(pb.DescribeClusterRequest(), timeout=CALL_TIMEOUT_S)
    return any(b.node_id == broker_id and b.fenced for b in described.brokers)


def test_a_partition_the_cleaner_cannot_clean_is_marked_and_the_others_are_cleaned(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """A compacted log holding a batch whose records do not decode under a valid CRC (written by an older
    version, or damaged on disk): the cleaner marks it uncleanable and cleans the other compacted topic."""
    config = {"log.cleaner.backoff.ms": "600000"}  # the cleaner sleeps until the restart below
    with Cluster(tmp_path_factory.mktemp("cleaner"), brokers=1, broker_config=config) as cluster:
        ledger = Ledger(cluster).create(replication_factor=1)
        compact = {"cleanup.policy": "compact", "segment.bytes": "2048", "min.cleanable.dirty.ratio": "0.01"}
        for name in ("bad", "good"):
            cluster.create_topic(name, 1, 1, compact)
            for i in range(120):
                key, value = b"k%d" % (i % 4), b"v%d" % i
                batch = build_batch([value], keys=[key], timestamp_ms=int(time.time() * 1000))
                assert not produce_raw(cluster, name, 0, batch, acks=1, via=0).error.code
        cluster.stop_broker(0)
        damage_first_batch(cluster.brokers[0].data_dir / "bad-0")
        argv = cluster.brokers[0].argv
        argv[argv.index("log.cleaner.backoff.ms=600000")] = "log.cleaner.backoff.ms=200"
        cluster.start_broker(0)
        good = cluster.wait_for(lambda: cleaned(cluster, "good"), 60, "the cleaner to compact the good topic")
        assert {b"v116", b"v117", b"v118", b"v119"} <= set(good.values())  # every key's latest value
        assert "marking it uncleanable" in cluster.brokers[0].errors(50_000)
        assert "bad-0" in cluster.brokers[0].errors(50_000)
        check_healthy(cluster, ledger)


def damage_first_batch(directory: object) -> None:
    """Replace the records of the first batch of the first segment with bytes that do not decode, and fix the
    CRC (what a damaged disk or an old bug leaves: the log's recovery keeps it, the cleaner cannot read it)."""
    from pathlib import Path

    from log.record.header import HEADER_SIZE, parse_header

    segment = sorted(p for p in Path(str(directory)).iterdir() if p.suffix == ".log")[0]
    data = bytearray(segment.read_bytes())
    size = parse_header(data).size_bytes
    first = bytearray(data[:size])
    first[HEADER_SIZE:] = b"\xff" * (size - HEADER_SIZE)
    data[:size] = recrc(first)
    segment.write_bytes(bytes(data))


def cleaned(cluster: Cluster, topic: str) -> dict[int, bytes | None] | None:
    """The records of ``topic``-0 once compaction removed most of the 120 (4 keys; the active segment and the
    records above the high watermark are not cleaned)."""
    found = read_partition(cluster, topic, 0, 120)
    return found if len(found) <= 40 else None
