"""The follower's fetcher thread (broker/replica_fetcher.py) against real partitions and a fake leader.

Issue 16, item 3: one bad partition must not stall the others. A partition whose truncation or append
raises is marked failed (Kafka's failed-partition state, KIP-461): the rest of the response is applied,
the failed one is left out of the next requests, and a new leader epoch gives it another chance.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.replica_fetcher import ReplicaFetcherThread
from log.record import build_batch
from proto import broker_pb2 as pb
from tests.broker.conftest import BrokerHarness

TOPIC = "t"
LEADER = 1
START_MS = 1_700_000_000_000


def good(base_offset: int = 0, n: int = 2) -> bytes:
    return build_batch([b"v"] * n, timestamp_ms=START_MS, base_offset=base_offset, partition_leader_epoch=0)


def corrupt() -> bytes:
    data = bytearray(good())
    data[-1] ^= 0xFF  # inside the CRC's range: the follower's validation refuses it (CORRUPT_MESSAGE)
    return bytes(data)


class FakeLeader:
    """The leader's two RPCs: OffsetsForLeaderEpoch answers epoch 0 ending at 0; Fetch answers ``records``
    per partition (nothing for the others) and remembers what each request asked for."""

    def __init__(self, records: dict[int, bytes]) -> None:
        self.records = records
        self.fetched: list[list[int]] = []

    def OffsetsForLeaderEpoch(self, request: Any, timeout: float) -> Any:  # noqa: N802 (gRPC's names)
        return pb.OffsetsForLeaderEpochResponse(partitions=[
            pb.OffsetForLeaderPartitionResult(topic=p.topic, partition=p.partition, leader_epoch=0, end_offset=0)
            for p in request.partitions
        ])  # fmt: skip

    def Fetch(self, request: Any, timeout: float) -> Any:  # noqa: N802
        asked = [p.partition for t in request.topics for p in t.partitions]
        self.fetched.append(asked)
        answers = [
            pb.FetchPartitionResponse(partition=n, high_watermark=0, records=self.records.pop(n, b""))
            for n in asked
        ]
        return pb.FetchResponse(topics=[pb.FetchTopicResponse(name=TOPIC, partitions=answers)])

    def ReplicaFetch(self, requests: Iterator[Any]) -> FakeStream:  # noqa: N802
        return FakeStream(self, requests)


class FakeStream:
    """The ReplicaFetch stream of :class:`FakeLeader`: each answer is the Fetch of the next request."""

    def __init__(self, leader: FakeLeader, requests: Iterator[Any]) -> None:
        self.leader = leader
        self.requests = requests
        self.cancelled = False

    def __iter__(self) -> FakeStream:
        return self

    def __next__(self) -> Any:
        return self.leader.Fetch(next(self.requests), 1.0)

    def cancel(self) -> None:
        self.cancelled = True


@pytest.fixture
def follower(tmp_path: Path) -> Iterator[BrokerHarness]:
    """Broker 0 follows broker 1 for t-0, t-1, t-2 (leader epoch 0)."""
    h = BrokerHarness(tmp_path / "broker")
    try:
        h.register(LEADER)
        h.create_topic(TOPIC, 3, replicas=[LEADER, 0], leader=LEADER)
        yield h
    finally:
        h.close()


def fetcher(h: BrokerHarness, leader: FakeLeader) -> ReplicaFetcherThread:
    thread = ReplicaFetcherThread(0, LEADER, "127.0.0.1:1", h.replicas, h.config, lambda: 1)
    thread._stub = leader  # the fake leader instead of gRPC
    thread.assign({(TOPIC, n): 0 for n in range(3)})
    return thread


def test_a_partition_that_fails_is_left_out_and_the_others_go_on(follower: BrokerHarness) -> None:
    leader = FakeLeader({0: good(), 1: corrupt(), 2: good()})
    thread = fetcher(follower, leader)
    try:
        thread.run_once()  # truncation round, then the fetch with the corrupt batch in the middle
        assert [follower.partition(TOPIC, n).log_end_offset for n in range(3)] == [2, 0, 2]
        assert thread.failed_partitions == {(TOPIC, 1)}
        leader.records = {0: good(2), 2: good(2)}
        thread.run_once()
        assert leader.fetched[-1] == [0, 2]  # the failed one is no longer asked for
        assert [follower.partition(TOPIC, n).log_end_offset for n in range(3)] == [4, 0, 4]
        follower.change(TOPIC, 1, leader=0)  # leadership moves here and back: a new leader epoch, another chance
        follower.change(TOPIC, 1, leader=LEADER)
        thread.assign({(TOPIC, n): follower.partition(TOPIC, n).leader_epoch for n in range(3)})
        leader.records = {1: good()}
        thread.run_once()
        thread.run_once()
        assert thread.failed_partitions == set()
        assert follower.partition(TOPIC, 1).log_end_offset == 2
    finally:
        thread.stop()


def test_a_failure_while_truncating_leaves_the_others_fetching(follower: BrokerHarness) -> None:
    leader = FakeLeader({0: good(), 2: good()})
    thread = fetcher(follower, leader)
    broken = follower.partition(TOPIC, 1)

    def fail(asked_epoch: int, answer: object) -> object:
        raise OSError("disk gone")

    broken.decide_truncation = fail  # type: ignore[method-assign]
    try:
        thread.run_once()
        assert thread.failed_partitions == {(TOPIC, 1)}
        assert leader.fetched == [[0, 2]]
        assert [follower.partition(TOPIC, n).log_end_offset for n in (0, 2)] == [2, 2]
    finally:
        thread.stop()
