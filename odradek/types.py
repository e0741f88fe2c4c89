"""The value types of the client API: immutable, hashable, cheap (NamedTuples on the hot paths)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

Header = tuple[str, bytes | None]

TIMESTAMP_TYPE_NONE = -1
TIMESTAMP_TYPE_CREATE_TIME = 0
TIMESTAMP_TYPE_LOG_APPEND_TIME = 1


class TopicPartition(NamedTuple):
    """A partition of a topic. Hashable, and ordered by topic then partition."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


class RecordMetadata(NamedTuple):
    """Where a produced record landed. ``offset`` is -1 with ``acks=0`` (the broker does not answer)."""

    topic: str
    partition: int
    offset: int
    timestamp: int

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


class ConsumerRecord(NamedTuple):
    """One record returned by :meth:`odradek.Consumer.poll`.

    ``timestamp_type`` is 0 for CreateTime (the producer's clock) and 1 for LogAppendTime (the broker's).
    """

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]
    timestamp_type: int = TIMESTAMP_TYPE_CREATE_TIME

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


class OffsetAndTimestamp(NamedTuple):
    """The answer of ``offsets_for_times``: the first offset whose timestamp is at or after the one asked."""

    offset: int
    timestamp: int
    leader_epoch: int | None = None


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadata:
    """What ``Producer.send_offsets_to_transaction`` needs of a consumer (``Consumer.group_metadata()``):
    its group and, when it is a member, its member id and epoch (Kafka's generation) so that a zombie
    member's offsets are refused."""

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class TransactionListing:
    """One transactional id, as ``Admin.list_transactions`` (``kafka-transactions list``) shows it."""

    transactional_id: str
    producer_id: int
    state: str  # Kafka's names: Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit, CompleteAbort
    coordinator_id: int


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    """One transactional id's state at its coordinator (``Admin.describe_transactions``)."""

    transactional_id: str
    coordinator_id: int
    state: str
    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    transaction_start_time_ms: int  # -1: no transaction
    partitions: tuple[TopicPartition, ...]


@dataclass(frozen=True, slots=True)
class NewTopic:
    """A topic to create. -1 for ``num_partitions`` or ``replication_factor`` means the cluster default."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    config: Mapping[str, str] = field(default_factory=dict)
    replica_assignment: Mapping[int, list[int]] | None = None


@dataclass(frozen=True, slots=True)
class PartitionDescription:
    partition: int
    leader: int  # -1: no leader
    replicas: list[int]
    isr: list[int]
    leader_epoch: int
    offline_replicas: list[int] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class TopicDescription:
    name: str
    partitions: list[PartitionDescription]
    topic_id: str = ""
    is_internal: bool = False


@dataclass(frozen=True, slots=True)
class NodeDescription:
    """A controller: its node id and the address of its Controller gRPC service."""

    node_id: int
    address: str


@dataclass(frozen=True, slots=True)
class BrokerDescription:
    node_id: int
    address: str
    fenced: bool
    rack: str = ""


@dataclass(frozen=True, slots=True)
class ClusterDescription:
    """``controller_id`` is the active controller's node id (-1 when none is known)."""

    cluster_id: str
    controller_id: int
    controllers: list[NodeDescription]
    brokers: list[BrokerDescription]


class ConfigResource(NamedTuple):
    """What a config belongs to: ``resource_type`` is "topic" or "broker" (or "cluster" for alter_configs)."""

    resource_type: str
    name: str


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One config value as the broker describes it; ``source`` is Kafka's (DYNAMIC_TOPIC_CONFIG, DEFAULT_CONFIG...)."""

    name: str
    value: str | None
    source: str = ""
    is_default: bool = False
    read_only: bool = False
    sensitive: bool = False


@dataclass(frozen=True, slots=True)
class ReplicaLogDir:
    """One replica a broker holds (``Admin.describe_log_dirs``): its size on disk and offsets."""

    topic: str
    partition: int
    size_bytes: int
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    segments: int
    is_leader: bool


@dataclass(frozen=True, slots=True)
class TopicResult:
    """What the controller answered for one topic of create_topics / delete_topics / create_partitions."""

    name: str
    topic_id: str = ""
    num_partitions: int = -1
    replication_factor: int = -1


# ------------------------------------------------------------------------------------ consumer groups


@dataclass(frozen=True, slots=True)
class GroupListing:
    """One group of ``Admin.list_groups()``: ``state`` is Empty, Assigning, Reconciling, Stable or Dead."""

    group_id: str
    state: str
    group_type: str = "consumer"
    coordinator_id: int = -1


@dataclass(frozen=True, slots=True)
class MemberDescription:
    """A group member: ``assignment`` is what it owns now, ``target_assignment`` what it will own when reconciled."""

    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    member_epoch: int
    subscribed_topics: list[str]
    subscribed_pattern: str | None
    assignment: list[TopicPartition]
    target_assignment: list[TopicPartition]
    state: str = ""
    rack_id: str = ""


@dataclass(frozen=True, slots=True)
class PartitionLag:
    """A partition of a group: its committed offset, the log end offset (high watermark) and the lag between
    them (None where unknown: nothing committed, or no answer from the leader), and its owner's member id."""

    partition: TopicPartition
    committed_offset: int | None
    log_end_offset: int | None
    lag: int | None
    member_id: str | None = None


@dataclass(frozen=True, slots=True)
class GroupDescription:
    """``Admin.describe_group()``: the group's state, members and, per partition, committed offset and lag."""

    group_id: str
    state: str
    group_epoch: int
    assignment_epoch: int
    assignor: str
    coordinator_id: int
    members: list[MemberDescription]
    offsets: list[PartitionLag]

    @property
    def total_lag(self) -> int:
        return sum(p.lag for p in self.offsets if p.lag is not None)
