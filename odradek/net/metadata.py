"""The clients' view of the cluster: an immutable snapshot built from one MetadataResponse.

Readers (producer threads, the sender, the consumer) take ``client.cluster`` and use it without locks;
a refresh swaps in a new snapshot. Protobuf fields are read once here, into plain tuples.

A partition's metadata never goes back (KIP-320): an answer that gives a partition an older leader epoch than
the snapshot before it (a broker cut off from the controllers still answers from the image it last had) keeps
the partition as it was, and the snapshot says which partitions it kept (``Cluster.stale``) so that the client
asks again, of another broker. A topic whose id changed (deleted and created again) takes the new answer whole.
"""

from __future__ import annotations

from typing import NamedTuple

from odradek.types import TopicPartition
from proto import broker_pb2

NO_LEADER = -1


class PartitionInfo(NamedTuple):
    partition: int
    leader: int  # -1: none
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...]
    error: str  # "" or a Kafka error name (LEADER_NOT_AVAILABLE, ...)


class TopicInfo(NamedTuple):
    name: str
    error: str  # "" or a Kafka error name (UNKNOWN_TOPIC_OR_PARTITION, ...)
    partitions: tuple[PartitionInfo, ...]  # by partition id
    available: tuple[int, ...]  # partitions with a live leader
    is_internal: bool
    topic_id: str


class BrokerInfo(NamedTuple):
    node_id: int
    address: str  # host:port
    rack: str
    data_address: str = ""  # host:port of its DATA listener (Produce and Fetch on TCP frames); "": none


class Cluster:
    """One metadata snapshot. Immutable once built, so safe to share between threads."""

    __slots__ = ("brokers", "topics", "cluster_id", "controller_id", "updated_ms", "stale", "_leaders")

    def __init__(
        self,
        brokers: dict[int, BrokerInfo],
        topics: dict[str, TopicInfo],
        cluster_id: str = "",
        controller_id: int = -1,
        updated_ms: float = 0.0,
        stale: frozenset[TopicPartition] = frozenset(),
    ) -> None:
        self.brokers = brokers
        self.topics = topics
        self.cluster_id = cluster_id
        self.controller_id = controller_id
        self.updated_ms = updated_ms
        self.stale = stale  # partitions whose answer had an older leader epoch than before: kept as they were
        self._leaders: dict[TopicPartition, PartitionInfo] = {
            TopicPartition(name, p.partition): p for name, info in topics.items() for p in info.partitions
        }

    @classmethod
    def from_response(
        cls, response: broker_pb2.MetadataResponse, updated_ms: float, previous: Cluster | None = None
    ) -> Cluster:
        """The snapshot of ``response``; a partition ``previous`` knew in a newer leader epoch stays as it was."""
        brokers = {
            b.node_id: BrokerInfo(
                b.node_id, f"{b.host}:{b.port}", b.rack, f"{b.data_host}:{b.data_port}" if b.data_port else ""
            )
            for b in response.brokers
            if not b.fenced
        }
        topics: dict[str, TopicInfo] = {}
        stale: list[TopicPartition] = []
        for t in response.topics:
            partitions = sorted(
                (
                    PartitionInfo(
                        p.partition,
                        p.leader,
                        p.leader_epoch,
                        tuple(p.replicas),
                        tuple(p.isr),
                        tuple(p.offline_replicas),
                        p.error.code,
                    )
                    for p in t.partitions
                ),
                key=lambda p: p.partition,
            )
            before = None if previous is None else previous.topics.get(t.name)
            if before is not None and (before.topic_id == t.topic_id or not before.topic_id or not t.topic_id):
                partitions, kept = _newer_of(before.partitions, partitions)
                stale.extend(TopicPartition(t.name, p) for p in kept)
            available = tuple(p.partition for p in partitions if p.leader >= 0 and p.leader in brokers)
            topics[t.name] = TopicInfo(t.name, t.error.code, tuple(partitions), available, t.is_internal, t.topic_id)
        return cls(brokers, topics, response.cluster_id, response.controller_id, updated_ms, frozenset(stale))

    def leader(self, tp: TopicPartition) -> int:
        """The leader's node id, or -1 when unknown (no leader, unknown partition, leader not in the snapshot)."""
        info = self._leaders.get(tp)
        if info is None or info.leader not in self.brokers:
            return NO_LEADER
        return info.leader

    def partition(self, tp: TopicPartition) -> PartitionInfo | None:
        return self._leaders.get(tp)

    def address(self, node_id: int) -> str | None:
        broker = self.brokers.get(node_id)
        return None if broker is None else broker.address

    def data_address(self, node_id: int) -> str:
        """The address of ``node_id``'s DATA listener, "" when it has none (or is unknown)."""
        broker = self.brokers.get(node_id)
        return "" if broker is None else broker.data_address

    def partition_count(self, topic: str) -> int | None:
        info = self.topics.get(topic)
        if info is None or not info.partitions:
            return None
        return len(info.partitions)


def _newer_of(
    before: tuple[PartitionInfo, ...], answer: list[PartitionInfo]
) -> tuple[list[PartitionInfo], list[int]]:
    """``answer``'s partitions, each replaced by ``before``'s where that has a newer leader epoch; and which were."""
    known = {p.partition: p for p in before}
    kept: list[int] = []
    merged: list[PartitionInfo] = []
    for p in answer:
        old = known.get(p.partition)
        if old is not None and old.leader_epoch > p.leader_epoch >= 0:
            kept.append(p.partition)
            merged.append(old)
        else:
            merged.append(p)
    return merged, kept


EMPTY_CLUSTER = Cluster({}, {})
