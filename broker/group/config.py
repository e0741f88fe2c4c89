"""The coordinator's settings, read from the broker config (Kafka's keys and defaults)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from metadata.configs import ConfigError

OFFSETS_TOPIC = "__consumer_offsets"
KNOWN_ASSIGNORS = ("uniform", "range")  # broker.group.assignors.ASSIGNORS


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """Kafka's ``group.consumer.*`` and ``offsets.*`` settings. Immutable."""

    session_timeout_ms: int = 45_000  # group.consumer.session.timeout.ms
    min_session_timeout_ms: int = 45_000  # group.consumer.min.session.timeout.ms
    max_session_timeout_ms: int = 60_000  # group.consumer.max.session.timeout.ms
    heartbeat_interval_ms: int = 5_000  # group.consumer.heartbeat.interval.ms
    assignors: tuple[str, ...] = ("uniform", "range")  # group.consumer.assignors; the first is the default
    max_size: int = 2**31 - 1  # group.consumer.max.size
    offsets_retention_ms: int = 7 * 24 * 3_600_000  # offsets.retention.ms
    offsets_retention_check_interval_ms: int = 600_000  # offsets.retention.check.interval.ms
    offset_metadata_max_bytes: int = 4096  # offset.metadata.max.bytes
    offsets_topic_num_partitions: int = 50  # offsets.topic.num.partitions
    offsets_topic_replication_factor: int = 3  # offsets.topic.replication.factor
    offsets_commit_timeout_ms: int = 5_000  # offsets.commit.timeout.ms: how long a write waits for the ISR
    offsets_load_buffer_size: int = 5 * 1024 * 1024  # offsets.load.buffer.size: bytes per read when loading

    @classmethod
    def from_broker(cls, get: Any) -> GroupConfig:
        """From a ``BrokerConfig.get``-like callable; ConfigError naming the key for an unknown assignor."""
        assignors = tuple(a.strip() for a in str(get("group.consumer.assignors")).split(",") if a.strip())
        unknown = [a for a in assignors if a not in KNOWN_ASSIGNORS]
        if unknown:
            raise ConfigError("group.consumer.assignors", f"group.consumer.assignors: unknown assignor(s) {unknown}; "
                              f"known: {', '.join(KNOWN_ASSIGNORS)}")  # fmt: skip
        return cls(
            session_timeout_ms=int(get("group.consumer.session.timeout.ms")),
            min_session_timeout_ms=int(get("group.consumer.min.session.timeout.ms")),
            max_session_timeout_ms=int(get("group.consumer.max.session.timeout.ms")),
            heartbeat_interval_ms=int(get("group.consumer.heartbeat.interval.ms")),
            assignors=assignors or ("uniform",),
            max_size=int(get("group.consumer.max.size")),
            offsets_retention_ms=int(get("offsets.retention.ms")),
            offsets_retention_check_interval_ms=int(get("offsets.retention.check.interval.ms")),
            offset_metadata_max_bytes=int(get("offset.metadata.max.bytes")),
            offsets_topic_num_partitions=int(get("offsets.topic.num.partitions")),
            offsets_topic_replication_factor=int(get("offsets.topic.replication.factor")),
            offsets_commit_timeout_ms=int(get("offsets.commit.timeout.ms")),
            offsets_load_buffer_size=int(get("offsets.load.buffer.size")),
        )


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units), as Kafka partitions group ids."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(group_id: str, num_partitions: int) -> int:
    """Kafka's ``Utils.abs(groupId.hashCode) % groupMetadataTopicPartitionCount``."""
    h = java_string_hash(group_id)
    return (0 if h == -(2**31) else abs(h)) % num_partitions
