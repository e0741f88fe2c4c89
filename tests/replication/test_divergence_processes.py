"""Replicas that must converge after the rarer roads, between real broker processes (issue 16).

* Item 1: a follower whose new leader ends below the follower's high watermark (an unclean election)
  truncates anyway, lowers its high watermark, and ends up with exactly the leader's log; item 4 in the same
  story: a consumer that read the records the election cut detects the divergence (KIP-320) and reads the
  new leader's records at those offsets instead of skipping them.
* Item 3: a partition whose fetched batches fail on the follower does not stall the other partitions the
  same fetcher thread replicates.
* Item 4: right after a failover, ListOffsets "latest" never answers below what was acknowledged (KIP-207).
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from broker.log_manager import HW_CHECKPOINT
from log.checkpoint import read_checkpoint
from log.record import build_batch, iter_batches
from log.record.reader import read_batch
from odradek import Consumer, TopicPartition
from proto import broker_pb2 as pb
from tests.broker.cluster import Cluster
from tests.broker.test_broker_processes import produce

pytestmark = pytest.mark.slow

START_MS = 1_700_000_000_000
CONTROLLER_CONFIG = {"broker.session.timeout.ms": "3000"}
BROKER_CONFIG = {"replica.high.watermark.checkpoint.interval.ms": "100"}


def values_on_disk(cluster: Cluster, broker: int, topic: str, partition: int) -> list[bytes]:
    """Every record value in the broker's log files of ``topic-partition``, in offset order."""
    out: list[bytes] = []
    for path in sorted((cluster.brokers[broker].data_dir / f"{topic}-{partition}").glob("*.log")):
        data = path.read_bytes()
        for pos, _ in iter_batches(data):
            out += [r.value or b"" for r in read_batch(data, pos)[1]]
    return out


def send(cluster: Cluster, broker: int, topic: str, partition: int, values: list[bytes], acks: int = -1) -> None:
    answer = produce(cluster.broker_stub(broker), topic, partition, build_batch(values, timestamp_ms=START_MS), acks)
    assert not answer.error.code, answer.error


def poll_values(consumer: Consumer, count: int, timeout_s: float = 60.0) -> list[bytes]:
    """Poll until ``count`` records arrived (or the bound passes); their values."""
    out: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    while len(out) < count and time.monotonic() < deadline:
        out += [r.value or b"" for r in consumer.poll(timeout_ms=200)]
    return out


def isr(cluster: Cluster, topic: str, partition: int, via: int) -> list[int]:
    return sorted(cluster.partition_metadata(topic, partition, via=via).isr)


def test_item1_a_follower_follows_a_leader_that_ends_below_its_high_watermark(tmp_path: Path) -> None:
    with Cluster(tmp_path, brokers=2, controller_config=CONTROLLER_CONFIG, broker_config=BROKER_CONFIG) as cluster:
        configs = {"min.insync.replicas": "1", "unclean.leader.election.enable": "true"}
        cluster.create_topic("u", replication_factor=2, configs=configs)
        first = cluster.leader("u")
        second = 1 - first
        send(cluster, first, "u", 0, [b"a0", b"a1"])
        send(cluster, first, "u", 0, [b"a2", b"a3"])  # both replicas have a0-a3
        cluster.kill_broker(second)
        cluster.wait_for(lambda: isr(cluster, "u", 0, first) == [first], 30, "the ISR without the killed one")
        send(cluster, first, "u", 0, [b"b4", b"b5"])
        send(cluster, first, "u", 0, [b"b6", b"b7"])  # committed with the ISR = {first}: its HW is 8
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "auto.offset.reset": "earliest",
                             "retry.backoff.max.ms": 200, "retry.backoff.ms": 50})  # fmt: skip
        consumer.assign([TopicPartition("u", 0)])
        read = poll_values(consumer, 8)
        assert read == [b"a0", b"a1", b"a2", b"a3", b"b4", b"b5", b"b6", b"b7"]

        def hw_checkpointed() -> bool:
            saved = read_checkpoint(cluster.brokers[first].data_dir / HW_CHECKPOINT) or {}
            return saved.get("u 0") == 8

        cluster.wait_for(hw_checkpointed, 30, "the high watermark 8 checkpointed")
        cluster.kill_broker(first)
        cluster.start_broker(second)  # unclean: the only live replica leads, without b4-b7
        cluster.wait_for(lambda: cluster.leader("u", via=second) == second, 30, "an unclean election")
        send(cluster, second, "u", 0, [b"c4", b"c5", b"c6", b"c7", b"c8"])
        try:  # KIP-320: offsets 4-8 hold other records now; the consumer (position 8) reads them, c8 alone is not it
            assert poll_values(consumer, 5) == [b"c4", b"c5", b"c6", b"c7", b"c8"]
        finally:
            consumer.close()
        cluster.start_broker(first)  # HW 8 on disk, its log ends at 8, the leader's log at 4 in its epoch
        cluster.wait_for(lambda: isr(cluster, "u", 0, second) == [0, 1], 60, "the old leader back in the ISR")
        expected = [b"a0", b"a1", b"a2", b"a3", b"c4", b"c5", b"c6", b"c7", b"c8"]
        assert values_on_disk(cluster, second, "u", 0) == expected
        assert values_on_disk(cluster, first, "u", 0) == expected  # b4-b7 gone, the leader's records instead
        assert "below the high watermark 8" in cluster.brokers[first].errors(200_000)


def test_item3_a_partition_that_fails_on_the_follower_does_not_stall_the_others(tmp_path: Path) -> None:
    with Cluster(tmp_path, brokers=2, controller_config=CONTROLLER_CONFIG) as cluster:
        cluster.create_topic("c", partitions=3, replication_factor=2, configs={"min.insync.replicas": "1"})
        leader = cluster.leader("c", 0)
        follower = 1 - leader
        assert cluster.leader("c", 2) == leader  # round-robin placement: partitions 0 and 2 share a leader
        assert cluster.stop_broker(follower) == 0  # controlled: the leader now leads all three
        for partition in range(3):
            send(cluster, leader, "c", partition, [f"v{partition}".encode()])
        segment = cluster.brokers[leader].data_dir / "c-0" / f"{0:020d}.log"
        with segment.open("r+b") as f:  # the batch the follower has not fetched yet: its CRC fails now
            f.seek(-1, 2)
            last = f.read(1)
            f.seek(-1, 2)
            f.write(bytes([last[0] ^ 0xFF]))
        cluster.start_broker(follower)  # one fetcher thread fetches c-0, c-1, c-2 from the leader

        def others_in_sync() -> bool:
            return all(isr(cluster, "c", p, leader) == [0, 1] for p in (1, 2))

        cluster.wait_for(others_in_sync, 60, "c-1 and c-2 back in sync beside the failed c-0")
        assert isr(cluster, "c", 0, leader) == [leader]
        for partition in (1, 2):
            assert values_on_disk(cluster, follower, "c", partition) == [f"v{partition}".encode()]
        assert "c-0 failed while appending" in cluster.brokers[follower].errors(200_000)


def latest(cluster: Cluster, broker: int, topic: str) -> tuple[str, int]:
    """ListOffsets "latest" for a consumer, asked of ``broker``: ``(error code, offset)``."""
    asked = pb.ListOffsetsPartition(topic=topic, timestamp=-1, current_leader_epoch=-1)
    request = pb.ListOffsetsRequest(replica_id=-1, partitions=[asked])
    answer = cluster.broker_stub(broker).ListOffsets(request, timeout=10).partitions[0]
    return answer.error.code, answer.offset


def test_item4_latest_never_goes_back_after_a_failover(tmp_path: Path) -> None:
    """KIP-207. A follower learns the high watermark one fetch late (here up to 3 s: a long follower poll),
    so the new leader starts with a high watermark below what the old one acknowledged; the other follower
    is paused meanwhile, so it stays so until that follower is back in the ISR. ListOffsets must not answer
    the lagging high watermark: "latest" would go back, and a consumer reset to it would read records twice."""
    broker_config = {"replica.fetch.wait.max.ms": "3000"}
    with Cluster(tmp_path, brokers=3, controller_config=CONTROLLER_CONFIG, broker_config=broker_config) as cluster:
        cluster.create_topic("l", replication_factor=3, configs={"min.insync.replicas": "2"})
        old = cluster.leader("l")
        replicas = list(cluster.partition_metadata("l", 0).replicas)
        new, other = [b for b in replicas if b != old]  # the election takes the first ISR member in replica order
        for i in range(5):
            send(cluster, old, "l", 0, [f"v{i}".encode()])  # acks=all: 5 acknowledged
        cluster.kill_broker(old)
        time.sleep(1.0)  # the old leader's session (3 s) is 1 s ahead of the paused one's
        cluster.brokers[other].signal(signal.SIGSTOP)
        answers: list[tuple[str, int]] = []
        try:
            resume_at = time.monotonic() + 6  # both fenced by then; with ELR the HW waits for the ISR (HW8)
            deadline = time.monotonic() + 40
            while time.monotonic() < deadline and (not answers or answers[-1] != ("", 5)):
                answers.append(latest(cluster, new, "l"))
                if time.monotonic() > resume_at:
                    cluster.brokers[other].signal(signal.SIGCONT)
                time.sleep(0.01)
        finally:
            cluster.brokers[other].signal(signal.SIGCONT)
        offsets = [offset for code, offset in answers if not code]
        assert offsets, answers[-5:]
        assert offsets[-1] == 5, answers[-5:]
        assert min(offsets) == 5, f"latest went back: {sorted(set(offsets))}"
        codes = {code for code, _ in answers}
        assert codes <= {"", "NOT_LEADER_OR_FOLLOWER", "OFFSET_NOT_AVAILABLE"}, codes
