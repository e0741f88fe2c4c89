"""Partition state on a broker: roles, epochs, ISR, the high watermark (and, later, follower fetchers).

``replication`` imports ``log`` and nothing else of the project; ``broker`` drives it.
"""

from replication.partition import (
    FencedLeaderEpochError,
    FetchPosition,
    HighWatermark,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    Partition,
    PartitionError,
    PartitionRead,
    ReplicaProgress,
    Role,
    UnknownLeaderEpochError,
)

__all__ = [
    "FencedLeaderEpochError",
    "FetchPosition",
    "HighWatermark",
    "NotEnoughReplicasError",
    "NotLeaderOrFollowerError",
    "Partition",
    "PartitionError",
    "PartitionRead",
    "ReplicaProgress",
    "Role",
    "UnknownLeaderEpochError",
]
