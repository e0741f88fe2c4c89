"""The errors of a partition replica; ``code`` is Kafka's error name."""

from __future__ import annotations

from log.errors import LogError


class PartitionError(LogError):
    """A request this partition cannot serve in its current state. ``code`` is Kafka's error name."""


class NotLeaderOrFollowerError(PartitionError):
    code = "NOT_LEADER_OR_FOLLOWER"
    retriable = True


class NotEnoughReplicasError(PartitionError):
    code = "NOT_ENOUGH_REPLICAS"
    retriable = True


class FencedLeaderEpochError(PartitionError):
    code = "FENCED_LEADER_EPOCH"
    retriable = True


class UnknownLeaderEpochError(PartitionError):
    code = "UNKNOWN_LEADER_EPOCH"
    retriable = True


class OffsetNotAvailableError(PartitionError):
    """KIP-207: a new leader's high watermark is still below the start of its epoch; asked again soon."""

    code = "OFFSET_NOT_AVAILABLE"
    retriable = True
