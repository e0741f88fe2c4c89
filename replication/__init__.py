"""Partition state on a broker: roles, epochs, ISR, the high watermark, leader epochs and truncation.

Pure cores: :mod:`replication.high_watermark` (HW1-HW7), :mod:`replication.isr` (ISR1-ISR7),
:mod:`replication.epoch_cache` (EC1-EC3, the ``leader-epoch-checkpoint``), :mod:`replication.truncation`
(TR1-TR6, OffsetsForLeaderEpoch). :class:`~replication.unified_log.UnifiedLog` keeps a log, its producer
state and its epoch cache in step; :class:`Partition` owns one and drives the cores (with
:mod:`replication.sequence_wait` for held batches and :mod:`replication.fetch_positions` for DelayedFetch);
the broker's fetcher threads (``broker/replica_fetcher.py``) and ISR thread (``broker/isr_manager.py``)
drive partitions.

``replication`` imports ``log`` and nothing else of the project; ``broker`` drives it.
"""

from replication.errors import (
    FencedLeaderEpochError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    PartitionError,
    UnknownLeaderEpochError,
)
from replication.high_watermark import HighWatermark, ReplicaProgress
from replication.partition import Partition
from replication.views import FetchPosition, PartitionRead, Role

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
